package pgas

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gaspigo/gaspigo/segments"
	"github.com/gaspigo/gaspigo/transport"
	"github.com/gaspigo/gaspigo/transport/mem"
)

// newJob starts n ranks over one in-memory network.
func newJob(t testing.TB, n int, seed int64, mut func(*Config)) ([]*Runtime, *mem.Network) {
	t.Helper()
	nw, err := mem.New(n, mem.Config{Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	rts := make([]*Runtime, n)
	for i := range rts {
		cfg := LocalConfig()
		cfg.Proc = transport.Proc(i)
		cfg.NumProcs, cfg.NumRanks = n, n
		cfg.Transport = nw.Endpoint(transport.Proc(i))
		if mut != nil {
			mut(&cfg)
		}
		rt, err := Init(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		rts[i] = rt
	}
	t.Cleanup(func() {
		for _, rt := range rts {
			rt.Close()
		}
		nw.Close()
	})
	return rts, nw
}

// each runs f on every rank concurrently and fails the test on any error.
// The first error closes every runtime: the other ranks, waiting in a
// collective for the one that failed, would otherwise wait for ever (in a
// synctest bubble the detector's timers keep fake time going, so it is no
// deadlock either), and the error would never be seen.
func each(t testing.TB, rts []*Runtime, f func(rt *Runtime) error) {
	t.Helper()
	errs := make([]error, len(rts))
	var wg sync.WaitGroup
	var first sync.Once
	for i, rt := range rts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[i] = f(rt); errs[i] != nil {
				first.Do(func() {
					t.Errorf("rank %d: %v (closing every runtime)", i, errs[i])
					for j, o := range rts {
						t.Logf("runtime %d: proc %d, rank %d, epoch %d, the program's %d", j, o.Proc(), o.Rank(), o.Epoch(), AppEpoch(o))
					}
					for _, o := range rts {
						o.Close()
					}
				})
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", i, err)
		}
	}
}

func createSeg(t *testing.T, rts []*Runtime, id segments.ID, size int64) {
	t.Helper()
	each(t, rts, func(rt *Runtime) error {
		_, err := rt.SegmentCreate(context.Background(), id, size, nil)
		return err
	})
}

// Rule: a notification is seen only after the data written before it.
// Writes are many small frames on randomly delayed links.
func TestWriteThenNotifyOrdering(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rts, nw := newJob(t, 3, 1, nil)
		nw.Delay(mem.Any, mem.Any, 50*time.Microsecond, 200*time.Microsecond)
		createSeg(t, rts, 1, 1<<16)
		ctx := context.Background()
		const rounds = 20
		each(t, rts, func(rt *Runtime) error {
			me := rt.Rank()
			seg, _ := rt.Segment(1)
			right, left := (me+1)%3, (me+2)%3
			for r := 1; r <= rounds; r++ {
				src := seg.Bytes()[32768:]
				for i := 0; i < 4096; i++ {
					src[i] = byte(r*7 + i + me)
				}
				// 16 writes of 256 bytes, then one notify.
				for c := 0; c < 16; c++ {
					if err := rt.Write(ctx, 0, right, Loc{1, int64(c * 256)}, Loc{1, 32768 + int64(c*256)}, 256); err != nil {
						return err
					}
				}
				if err := rt.Notify(ctx, 0, right, 1, 5, uint32(r)); err != nil {
					return err
				}
				if _, err := rt.NotifyWaitSome(ctx, 1, 5, 1); err != nil {
					return err
				}
				v, _ := rt.NotifyReset(1, 5)
				if v != uint32(r) {
					return fmt.Errorf("round %d: notification value %d", r, v)
				}
				for i := 0; i < 4096; i++ {
					if want := byte(r*7 + i + left); seg.Bytes()[i] != want {
						return fmt.Errorf("round %d: byte %d = %d before the notification's data, want %d", r, i, seg.Bytes()[i], want)
					}
				}
				if err := rt.Wait(ctx, 0); err != nil {
					return err
				}
				// The next round's writes must not overtake our reading.
				if err := rt.Barrier(ctx, nil); err != nil {
					return err
				}
			}
			return nil
		})
	})
}

func TestWriteNotifyAndRead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rts, _ := newJob(t, 2, 2, nil)
		createSeg(t, rts, 3, 8192)
		ctx := context.Background()
		s0, _ := rts[0].Segment(3)
		copy(s0.Bytes()[4096:], "hello, one-sided world")
		if err := rts[0].WriteNotify(ctx, 1, 1, Loc{3, 100}, Loc{3, 4096}, 22, 9, 42); err != nil {
			t.Fatal(err)
		}
		if err := rts[0].Wait(ctx, 1); err != nil {
			t.Fatal(err)
		}
		id, err := rts[1].NotifyWaitSome(ctx, 3, 0, 16)
		if err != nil || id != 9 {
			t.Fatalf("NotifyWaitSome = %d, %v; want 9", id, err)
		}
		if v, _ := rts[1].NotifyReset(3, 9); v != 42 {
			t.Fatalf("reset returned %d, want 42", v)
		}
		if v, _ := rts[1].NotifyReset(3, 9); v != 0 {
			t.Fatalf("second reset returned %d, want 0", v)
		}
		s1, _ := rts[1].Segment(3)
		if got := string(s1.Bytes()[100:122]); got != "hello, one-sided world" {
			t.Fatalf("target holds %q", got)
		}
		// Read it back into rank 0 at another place.
		if err := rts[0].Read(ctx, 2, 1, Loc{3, 100}, Loc{3, 0}, 22); err != nil {
			t.Fatal(err)
		}
		if err := rts[0].Wait(ctx, 2); err != nil {
			t.Fatal(err)
		}
		if got := string(s0.Bytes()[:22]); got != "hello, one-sided world" {
			t.Fatalf("read got %q", got)
		}
	})
}

func TestQueueFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rts, _ := newJob(t, 2, 3, func(c *Config) { c.QueueDepth = 4 })
		createSeg(t, rts, 1, 1024)
		ctx := context.Background()
		for i := 0; i < 4; i++ {
			if err := rts[0].Write(ctx, 0, 1, Loc{1, 0}, Loc{1, 0}, 8); err != nil {
				t.Fatal(err)
			}
		}
		err := rts[0].Write(ctx, 0, 1, Loc{1, 0}, Loc{1, 0}, 8)
		if !errors.Is(err, ErrQueueFull) {
			t.Fatalf("fifth write: %v, want ErrQueueFull", err)
		}
		// Another queue is independent.
		if err := rts[0].Write(ctx, 1, 1, Loc{1, 0}, Loc{1, 0}, 8); err != nil {
			t.Fatalf("queue 1: %v", err)
		}
		if err := rts[0].Wait(ctx, 0); err != nil {
			t.Fatal(err)
		}
		if err := rts[0].Write(ctx, 0, 1, Loc{1, 0}, Loc{1, 0}, 8); err != nil {
			t.Fatalf("after Wait: %v", err)
		}
	})
}

func TestTimeoutIsNotFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rts, nw := newJob(t, 2, 4, nil)
		createSeg(t, rts, 1, 1024)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, err := rts[0].NotifyWaitSome(ctx, 1, 0, 4)
		var re *RankError
		if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) || errors.As(err, &re) {
			t.Fatalf("NotifyWaitSome: %v; want ErrTimeout and not a RankError", err)
		}
		// A partition holds frames: Wait and Barrier time out, nobody is declared failed.
		nw.Partition([]transport.Proc{0}, []transport.Proc{1})
		ctx2, cancel2 := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel2()
		if err := rts[0].Write(ctx2, 0, 1, Loc{1, 0}, Loc{1, 0}, 8); err != nil {
			t.Fatal(err)
		}
		if err := rts[0].Wait(ctx2, 0); !errors.Is(err, ErrTimeout) || errors.As(err, &re) {
			t.Fatalf("Wait under partition: %v; want ErrTimeout", err)
		}
		ctx3, cancel3 := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel3()
		if err := rts[0].Barrier(ctx3, nil); !errors.Is(err, ErrTimeout) || errors.As(err, &re) {
			t.Fatalf("Barrier under partition: %v; want ErrTimeout", err)
		}
		if sv := rts[0].StateVector(); sv[1].Suspect {
			t.Fatalf("partition alone made rank 1 suspect: %+v", sv)
		}
		// After healing, the retried Wait completes.
		nw.Heal()
		if err := rts[0].Wait(context.Background(), 0); err != nil {
			t.Fatalf("Wait after heal: %v", err)
		}
	})
}

func TestBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rts, _ := newJob(t, 2, 5, nil)
		ctx := context.Background()
		// Ranks create segment 1 with different sizes.
		each(t, rts, func(rt *Runtime) error {
			_, err := rt.SegmentCreate(ctx, 1, int64(1024*(rt.Rank()+1)), nil)
			return err
		})
		s1, _ := rts[1].Segment(1)
		before := append([]byte(nil), s1.Bytes()...)
		cases := []struct {
			name          string
			remote, local Loc
			size          int64
		}{
			{"remote past end", Loc{1, 2040}, Loc{1, 0}, 16},
			{"remote negative", Loc{1, -8}, Loc{1, 0}, 8},
			{"local past end", Loc{1, 0}, Loc{1, 1020}, 8},
			{"huge size", Loc{1, 0}, Loc{1, 0}, math.MaxInt64},
		}
		for _, c := range cases {
			err := rts[0].Write(ctx, 0, 1, c.remote, c.local, c.size)
			if !errors.Is(err, ErrBounds) {
				t.Errorf("%s: %v, want ErrBounds", c.name, err)
			}
		}
		// rank 1's segment is 2048 bytes, so this fits there though not at rank 0.
		if err := rts[0].Write(ctx, 0, 1, Loc{1, 1500}, Loc{1, 0}, 500); err != nil {
			t.Fatalf("in-bounds write to the larger remote segment: %v", err)
		}
		if err := rts[0].Wait(ctx, 0); err != nil {
			t.Fatal(err)
		}
		if err := rts[0].Write(ctx, 0, 1, Loc{9, 0}, Loc{1, 0}, 8); !errors.Is(err, ErrNoSegment) {
			// segment 9 is unknown here too: the local check refuses it.
			if err == nil {
				if err2 := rts[0].Wait(ctx, 0); !errors.Is(err2, ErrNoSegment) {
					t.Fatalf("write to a missing remote segment: %v / %v", err, err2)
				}
			}
		}
		if err := rts[0].Read(ctx, 0, 1, Loc{1, 2047}, Loc{1, 0}, 2); !errors.Is(err, ErrBounds) {
			t.Errorf("read past end: %v", err)
		}
		if _, err := rts[0].FetchAdd(ctx, 1, Loc{1, 4}, 1); !errors.Is(err, ErrInvalid) {
			t.Errorf("misaligned atomic: %v", err)
		}
		if err := rts[0].Write(ctx, 0, 7, Loc{1, 0}, Loc{1, 0}, 8); !errors.Is(err, ErrInvalid) {
			t.Errorf("rank 7: %v", err)
		}
		// Only the legal write changed rank 1's memory.
		after := s1.Bytes()
		for i := range after {
			if (i < 1500 || i >= 2000) && after[i] != before[i] {
				t.Fatalf("byte %d of rank 1 changed outside the legal write", i)
			}
		}
	})
}

// The target re-checks bounds: a frame that slipped past the sender's check
// (here: a segment unknown to the sender's size table) is refused, and
// Wait reports the refusal.
func TestTargetRefusesOutOfBounds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rts, _ := newJob(t, 2, 6, nil)
		ctx := context.Background()
		mismatchedSeg(rts, 2, 64)
		if err := rts[0].Write(ctx, 0, 1, Loc{2, 32}, Loc{2, 0}, 64); err != nil {
			t.Fatal(err)
		}
		if err := rts[0].Write(ctx, 0, 1, Loc{2, 0}, Loc{2, 0}, 8); err != nil {
			t.Fatal(err)
		}
		err := rts[0].Wait(ctx, 0)
		if !errors.Is(err, ErrRemote) || !errors.Is(err, ErrBounds) {
			t.Fatalf("Wait = %v, want remote bounds error", err)
		}
		if rts[1].Stats().FramesRejected == 0 {
			t.Fatal("target did not count the refused frame")
		}
	})
}

// mismatchedSeg creates segment id on ranks 0 and 1 without the
// collective exchange: rank 1's holds size bytes, rank 0's 4 KiB, so that
// rank 0 can post writes rank 1 must refuse.
func mismatchedSeg(rts []*Runtime, id segments.ID, size int64) {
	small, _ := segments.New(id, size, segments.Options{})
	rts[1].segMu.Lock()
	rts[1].segs[id] = &segInfo{seg: small}
	rts[1].segMu.Unlock()
	big, _ := segments.New(id, 4096, segments.Options{})
	rts[0].segMu.Lock()
	rts[0].segs[id] = &segInfo{seg: big}
	rts[0].segMu.Unlock()
}

// A peer that dies turns every operation waiting on it into a *RankError,
// promptly and without any timeout.
func TestPeerDeathGivesRankError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rts, nw := newJob(t, 3, 10, nil)
		createSeg(t, rts, 1, 1024)
		ctx := context.Background()
		nw.Partition([]transport.Proc{0, 1}, []transport.Proc{2}) // hold rank 2's frames
		if err := rts[0].Write(ctx, 0, 2, Loc{1, 0}, Loc{1, 0}, 8); err != nil {
			t.Fatal(err)
		}
		errs := make(chan error, 4)
		go func() { errs <- rts[0].Wait(ctx, 0) }()
		go func() { errs <- rts[0].Barrier(ctx, nil) }()
		go func() { errs <- rts[1].Barrier(ctx, nil) }()
		go func() {
			_, err := rts[1].FetchAdd(ctx, 2, Loc{1, 0}, 1)
			errs <- err
		}()
		synctest.Wait()
		nw.Kill(2)
		for i := 0; i < 4; i++ {
			err := <-errs
			var re *RankError
			if !errors.As(err, &re) || !errors.Is(err, ErrRankFailed) {
				t.Fatalf("blocked op returned %v, want *RankError", err)
			}
			if re.Rank != 2 && re.Rank != 0 {
				t.Fatalf("RankError names rank %d", re.Rank)
			}
		}
		if sv := rts[0].StateVector(); !sv[2].Suspect {
			t.Fatalf("state vector after death: %+v", sv)
		}
	})
}

// Rule: a connection that ends while this process is closing is the job
// ending, not a lost peer. Rank 0 begins Close (its goodbye to rank 1 is
// held, so Close waits for the ack); rank 1's process dies meanwhile.
// Rank 0 must not log "peer lost", which tools read as a failure.
func TestPeerEndingDuringCloseIsNoLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logMu sync.Mutex
		var logged bytes.Buffer
		rts, nw := newJob(t, 2, 11, func(c *Config) {
			if c.Proc == 0 {
				c.Logger = slog.New(slog.NewTextHandler(lockedWriter{&logMu, &logged}, &slog.HandlerOptions{Level: slog.LevelDebug}))
			}
		})
		// They talk first: a goodbye goes only to peers talked to.
		each(t, rts, func(rt *Runtime) error { return rt.Barrier(context.Background(), nil) })
		nw.Partition([]transport.Proc{0}, []transport.Proc{1}) // hold the goodbye and its ack
		done := make(chan struct{})
		go func() { rts[0].Close(); close(done) }()
		synctest.Wait() // rank 0 waits for the goodbye's ack
		nw.Kill(1)
		<-done
		logMu.Lock()
		defer logMu.Unlock()
		if strings.Contains(logged.String(), "peer lost") {
			t.Fatalf("rank 0 reported a lost peer while closing:\n%s", logged.String())
		}
		if !strings.Contains(logged.String(), "peer left") {
			t.Fatalf("rank 0 did not see rank 1's connection end (the test lost its point):\n%s", logged.String())
		}
	})
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
