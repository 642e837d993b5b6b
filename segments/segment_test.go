package segments

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"
)

func newSeg(t *testing.T, size int64, opt Options) *Segment {
	t.Helper()
	s, err := New(7, size, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestNewRejectsBadSizes(t *testing.T) {
	for _, size := range []int64{0, -1, MaxSize + 1} {
		if _, err := New(1, size, Options{}); !errors.Is(err, ErrSize) {
			t.Errorf("New(size %d) = %v, want ErrSize", size, err)
		}
	}
}

func TestBoundsChecked(t *testing.T) {
	s := newSeg(t, 4096, Options{})
	if err := s.CopyIn(4090, make([]byte, 6)); err != nil {
		t.Fatalf("in-bounds copy: %v", err)
	}
	cases := []struct{ off, n int64 }{{4090, 7}, {-1, 1}, {0, -1}, {4097, 0}, {1 << 62, 1 << 62}}
	for _, c := range cases {
		err := s.Check(c.off, c.n)
		var re *RangeError
		if !errors.Is(err, ErrBounds) || !errors.As(err, &re) || re.ID != 7 || re.Size != 4096 {
			t.Errorf("Check(%d, %d) = %v, want a RangeError for segment 7", c.off, c.n, err)
		}
	}
	if err := s.CopyOut(4095, make([]byte, 2)); !errors.Is(err, ErrBounds) {
		t.Errorf("CopyOut past the end: %v", err)
	}
	// Nothing was written by the refused copies.
	if err := s.CopyIn(4095, []byte{1, 2}); !errors.Is(err, ErrBounds) {
		t.Fatalf("CopyIn past the end: %v", err)
	}
	if s.Bytes()[4095] != 0 {
		t.Fatal("a refused CopyIn wrote into the segment")
	}
}

func TestTypedViewsAliasMemory(t *testing.T) {
	s := newSeg(t, 4096, Options{})
	f, err := s.Float64s(64, 4)
	if err != nil {
		t.Fatal(err)
	}
	f[1] = 1.5
	var back [8]byte
	s.CopyOut(72, back[:])
	if got, _ := s.Float64s(72, 1); got[0] != 1.5 {
		t.Fatalf("view does not alias the segment: %v", got)
	}
	if _, err := s.Uint64s(4, 1); !errors.Is(err, ErrAlign) {
		t.Errorf("misaligned view: %v", err)
	}
	if _, err := s.Int64s(4088, 2); !errors.Is(err, ErrBounds) {
		t.Errorf("view past the end: %v", err)
	}
	w, err := s.Word(8)
	if err != nil {
		t.Fatal(err)
	}
	w.Add(5)
	if u, _ := s.Uint64s(8, 1); u[0] != 5 {
		t.Fatalf("atomic word does not alias the segment: %d", u[0])
	}
}

func TestNotifications(t *testing.T) {
	s := newSeg(t, 64, Options{Notifications: 16})
	if s.NumNotifications() != 16 {
		t.Fatalf("NumNotifications = %d", s.NumNotifications())
	}
	if err := s.SetNotification(16, 1); !errors.Is(err, ErrNotificationID) {
		t.Errorf("slot 16 of 16: %v", err)
	}
	if _, err := s.WaitSome(context.Background(), 10, 7, WaitPolicy{}); !errors.Is(err, ErrNotificationID) {
		t.Errorf("range past the slots: %v", err)
	}
	s.SetNotification(5, 42)
	id, err := s.WaitSome(context.Background(), 0, 16, WaitPolicy{Spin: time.Microsecond})
	if err != nil || id != 5 {
		t.Fatalf("WaitSome = %d, %v; want 5", id, err)
	}
	if v, _ := s.Notification(5); v != 42 {
		t.Fatalf("Notification(5) = %d: WaitSome must not consume", v)
	}
	if v, _ := s.ResetNotification(5); v != 42 {
		t.Fatalf("ResetNotification = %d, want 42", v)
	}
	if v, _ := s.ResetNotification(5); v != 0 {
		t.Fatalf("second reset = %d, want 0", v)
	}
}

func TestWaitSomeWakesTimesOutAndCloses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := New(1, 64, Options{Notifications: 8})
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan NotificationID, 1)
		go func() {
			id, _ := s.WaitSome(context.Background(), 2, 3, WaitPolicy{})
			got <- id
		}()
		synctest.Wait()
		s.SetNotification(0, 1) // outside the waited range: no wake-up result
		s.SetNotification(3, 9)
		if id := <-got; id != 3 {
			t.Fatalf("woke with %d, want 3", id)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if _, err := s.WaitSome(ctx, 5, 1, WaitPolicy{}); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("timed-out wait: %v", err)
		}
		errc := make(chan error, 1)
		go func() {
			_, err := s.WaitSome(context.Background(), 6, 1, WaitPolicy{})
			errc <- err
		}()
		synctest.Wait()
		s.Close()
		if err := <-errc; !errors.Is(err, ErrClosed) {
			t.Fatalf("wait across Close: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
	})
}

// A poll that yields keeps to its budget when every yield gives the CPU
// away for a time slice (a host with more runnable threads than CPUs):
// it looks at the clock after each one, and parks after the first that
// ran past the budget, instead of after the sixteenth.
func TestYieldingPollKeepsToItsBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		yields := 0
		defer func(y func()) { osYield = y }(osYield)
		osYield = func() {
			yields++
			time.Sleep(time.Millisecond) // another process's time slice
		}
		start := time.Now()
		if Poll(WaitPolicy{Spin: 20 * time.Microsecond, Yield: true}, func() bool { return false }) {
			t.Fatal("Poll reported a slot that was never set")
		}
		if yields != 1 || time.Since(start) != time.Millisecond {
			t.Fatalf("a 20us poll yielded %d times over %v, want once over 1ms", yields, time.Since(start))
		}
	})
}

// A waiter whose slot was stored without a wake-up (the writer died
// between its store and its wake) and then dropped by a newer epoch
// returns ErrDropped at that epoch instead of sleeping on; an epoch change
// that drops nothing in its range, or only what was older than the wait,
// leaves it waiting.
func TestWaitSomeReturnsWhenTheEpochDropsItsSlot(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s, err := New(1, 64, Options{Notifications: 8})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		setSlot(&s.notif[6], 5, 0) // set in epoch 0, dropped by epoch 1 before any wait
		s.SetEpoch(1)
		type result struct {
			id  NotificationID
			err error
		}
		got := make(chan result, 1)
		go func() {
			id, err := s.WaitSome(context.Background(), 2, 6, WaitPolicy{})
			got <- result{id, err}
		}()
		synctest.Wait()
		s.SetEpoch(2) // drops nothing the wait could have seen
		synctest.Wait()
		select {
		case r := <-got:
			t.Fatalf("an epoch change that dropped nothing of the wait's ended it: %d, %v", r.id, r.err)
		default:
		}
		setSlot(&s.notif[3], 9, 2) // stored, and no wake-up follows
		synctest.Wait()
		select {
		case r := <-got:
			t.Fatalf("a store without a wake-up woke the parked waiter: %d, %v", r.id, r.err)
		default:
		}
		s.SetEpoch(3)
		if r := <-got; !errors.Is(r.err, ErrDropped) {
			t.Fatalf("the view dropped the slot stored during the wait: WaitSome = %d, %v; want ErrDropped", r.id, r.err)
		}
		// Waiting again in the new epoch is an ordinary wait.
		go func() {
			id, err := s.WaitSome(context.Background(), 2, 6, WaitPolicy{})
			got <- result{id, err}
		}()
		synctest.Wait()
		if _, err := s.SetNotificationIn(4, 1, 3); err != nil {
			t.Fatal(err)
		}
		if r := <-got; r.err != nil || r.id != 4 {
			t.Fatalf("wait in the new epoch = %d, %v; want 4", r.id, r.err)
		}
	})
}

func TestFileBackingSharesMemory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "seg")
	a := newSeg(t, 8192, Options{Backing: FileBacking{Path: path}})
	b := newSeg(t, 8192, Options{Backing: FileBacking{Path: path}})
	copy(a.Bytes()[100:], "shared")
	if got := string(b.Bytes()[100:106]); got != "shared" {
		t.Fatalf("second mapping sees %q", got)
	}
}

// A sparse segment from HugePageThreshold up is backed by small pages:
// touching a byte at each end costs two pages, not two huge pages.
func TestSparseSegmentSmallPages(t *testing.T) {
	thp, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil || !bytes.Contains(thp, []byte("[always]")) && !bytes.Contains(thp, []byte("[madvise]")) {
		t.Skipf("transparent huge pages are off here (%q, %v): no segment gets them, sparse or not", thp, err)
	}
	for _, sparse := range []bool{false, true} {
		s, err := New(1, 2*HugePageThreshold, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if sparse {
			s.Sparse()
		}
		mem := s.Bytes()
		mem[0], mem[len(mem)-1] = 1, 1
		kb := anonHugeKB(t, mem)
		s.Close()
		t.Logf("sparse=%v: %d kB in huge pages", sparse, kb)
		if sparse && kb != 0 {
			t.Errorf("a sparse segment holds %d kB in huge pages after two one-byte stores", kb)
		}
	}
}

// anonHugeKB is the AnonHugePages of the mapping that holds mem, from
// /proc/self/smaps.
func anonHugeKB(t *testing.T, mem []byte) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Skipf("no /proc/self/smaps: %v", err)
	}
	start := uint64(uintptr(unsafe.Pointer(&mem[0])))
	in := false
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if lo, hi, ok := strings.Cut(f[0], "-"); ok && len(f) >= 5 {
			a, err1 := strconv.ParseUint(lo, 16, 64)
			z, err2 := strconv.ParseUint(hi, 16, 64)
			in = err1 == nil && err2 == nil && a <= start && start < z
			continue
		}
		if in && f[0] == "AnonHugePages:" {
			kb, _ := strconv.Atoi(f[1])
			return kb
		}
	}
	t.Fatalf("no mapping holds %#x in /proc/self/smaps", start)
	return 0
}
