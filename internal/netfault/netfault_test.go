package netfault

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

func TestParse(t *testing.T) {
	text := `
# chaos schedule 7
proc=2 partition
proc=1 delay=20ms loss=0.25   # slow and lossy
proc=* rate=1000
proc=1 delay=5ms rate=500
`
	cases := map[uint32]Rule{
		0: {Rate: 1000},
		1: {Delay: 20 * time.Millisecond, Loss: 0.25, Rate: 500},
		2: {Partition: true, Rate: 1000},
	}
	for self, want := range cases {
		got, err := Parse(text, self)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("proc %d: %+v, want %+v", self, got, want)
		}
	}
	if r, err := Parse("", 0); err != nil || !r.IsZero() || r.String() != "none" {
		t.Errorf("empty file: %+v %v", r, err)
	}
	bad := map[string]string{
		"partition":           "does not start with proc=",
		"proc=x delay=1s":     "neither a process number nor *",
		"proc=1 delay=soon":   "delay=soon",
		"proc=1 delay=-1s":    "negative",
		"proc=1 loss=2":       "not in [0, 1]",
		"proc=1 rate=-5":      "negative",
		"proc=1 jitter=5ms":   "unknown setting",
		"proc=1\nproc=2 ping": "line 2",
	}
	for text, want := range bad {
		if _, err := Parse(text, 1); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v, want an error containing %q", text, err, want)
		}
	}
}

// pair returns a connection accepted through in's listener and the plain
// client end.
func pair(t *testing.T, in *Injector) (faulty, plain net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fl := in.Listener(ln)
	t.Cleanup(func() { fl.Close() })
	done := make(chan net.Conn, 1)
	go func() {
		c, err := fl.Accept()
		if err != nil {
			done <- nil
			return
		}
		done <- c
	}()
	plain, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	faulty = <-done
	if faulty == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { faulty.Close(); plain.Close() })
	return faulty, plain
}

func setRules(t *testing.T, dir, text string) {
	t.Helper()
	tmp := filepath.Join(dir, "rules.tmp")
	if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, RulesFile)); err != nil {
		t.Fatal(err)
	}
}

// waitRule polls (real time: the watcher reads a real file) until the
// injector has loaded want.
func waitRule(t *testing.T, in *Injector, want Rule) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for in.Rule() != want {
		if time.Now().After(deadline) {
			t.Fatalf("rule %+v never loaded; in force: %+v", want, in.Rule())
		}
		time.Sleep(PollInterval)
	}
}

// Rule: a partition holds bytes in both directions until it heals, and
// nothing is lost.
func TestPartitionHoldsBothWaysUntilHealed(t *testing.T) {
	dir := t.TempDir()
	in := New(dir, 3, nil)
	defer in.Close()
	faulty, plain := pair(t, in)
	setRules(t, dir, "proc=3 partition\n")
	waitRule(t, in, Rule{Partition: true})

	wrote := make(chan error, 1)
	go func() { _, err := faulty.Write([]byte("out")); wrote <- err }()
	if _, err := plain.Write([]byte("in")); err != nil {
		t.Fatal(err)
	}
	read := make(chan string, 1)
	go func() {
		b := make([]byte, 2)
		_, err := io.ReadFull(faulty, b)
		if err != nil {
			read <- err.Error()
			return
		}
		read <- string(b)
	}()
	// While partitioned, the peer gets nothing.
	plain.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if n, err := plain.Read(make([]byte, 8)); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read across a partition: %d bytes, %v", n, err)
	}
	select {
	case s := <-read:
		t.Fatalf("the partitioned side read %q", s)
	default:
	}
	setRules(t, dir, "")
	waitRule(t, in, Rule{})
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	if s := <-read; s != "in" {
		t.Fatalf("after healing the partitioned side read %q", s)
	}
	plain.SetReadDeadline(time.Now().Add(10 * time.Second))
	b := make([]byte, 3)
	if _, err := io.ReadFull(plain, b); err != nil || string(b) != "out" {
		t.Fatalf("after healing the peer read %q, %v", b, err)
	}
}

// Rule: a call held by a partition honours its deadline and Close.
func TestPartitionHonoursDeadlineAndClose(t *testing.T) {
	dir := t.TempDir()
	setRules(t, dir, "proc=* partition")
	in := New(dir, 0, nil)
	defer in.Close()
	faulty, _ := pair(t, in)
	faulty.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	_, err := faulty.Read(make([]byte, 1))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("held read at its deadline: %v, want a timeout", err)
	}
	faulty.SetWriteDeadline(time.Time{})
	wrote := make(chan error, 1)
	go func() { _, err := faulty.Write([]byte("x")); wrote <- err }()
	faulty.Close()
	if err := <-wrote; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("held write after Close: %v, want net.ErrClosed", err)
	}
}

// Rule: a delay applies to the process it names and to no other.
func TestDelayOnlyForNamedProcess(t *testing.T) {
	dir := t.TempDir()
	setRules(t, dir, "proc=1 delay=150ms")
	for self, slow := range map[uint32]bool{1: true, 2: false} {
		in := New(dir, self, nil)
		faulty, plain := pair(t, in)
		start := time.Now()
		if _, err := faulty.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(plain, make([]byte, 1)); err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		if slow && took < 150*time.Millisecond {
			t.Errorf("proc %d: write took %v with delay=150ms", self, took)
		}
		if !slow && took >= 150*time.Millisecond {
			t.Errorf("proc %d: write took %v though the rule names proc 1", self, took)
		}
		in.Close()
	}
}

// Rule: a rules file that does not parse leaves the old rules in force,
// and the next good one is picked up at the next poll. Fake time: the
// watcher's ticker runs in the synctest bubble, so every Sleep below is an
// exact number of polls.
func TestBadRulesKeepOld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		setRules(t, dir, "proc=0 delay=1ms")
		in := New(dir, 0, nil)
		defer in.Close()
		if r := in.Rule(); r != (Rule{Delay: time.Millisecond}) {
			t.Fatalf("rule after New: %+v, want the file's delay=1ms", r)
		}
		setRules(t, dir, "proc=0 delay=banana")
		time.Sleep(5 * PollInterval)
		synctest.Wait()
		if r := in.Rule(); r != (Rule{Delay: time.Millisecond}) {
			t.Fatalf("a bad rules file replaced the rule: %+v", r)
		}
		setRules(t, dir, "proc=0 delay=2ms")
		time.Sleep(PollInterval)
		synctest.Wait()
		if r := in.Rule(); r != (Rule{Delay: 2 * time.Millisecond}) {
			t.Fatalf("a good rules file after a bad one: %+v in force, want delay=2ms", r)
		}
	})
}

func TestNilInjectorWrapsNothing(t *testing.T) {
	var in *Injector
	c, _ := net.Pipe()
	if in.Wrap(c) != c {
		t.Error("nil injector wrapped a conn")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if in.Listener(ln) != ln {
		t.Error("nil injector wrapped a listener")
	}
}

// Rule: Hold (transfers that go through no connection: shared-memory
// rings) waits while the process is partitioned, until the partition
// heals or ctx ends, and a send waits the delay and the rate's time. Fake
// time: the watcher's ticker runs in the synctest bubble.
func TestHoldFollowsTheRule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		setRules(t, dir, "proc=0 partition")
		in := New(dir, 0, nil)
		defer in.Close()
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		start := time.Now()
		if err := in.Hold(ctx, 8, true); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Hold while partitioned: %v, want DeadlineExceeded", err)
		}
		cancel()
		if d := time.Since(start); d != time.Second {
			t.Fatalf("Hold while partitioned returned after %v, want the ctx's 1s", d)
		}
		done := make(chan error, 1)
		start = time.Now()
		go func() { done <- in.Hold(t.Context(), 8, false) }()
		time.Sleep(10 * PollInterval)
		setRules(t, dir, "")
		if err := <-done; err != nil {
			t.Fatalf("Hold after the heal: %v", err)
		}
		if d := time.Since(start); d < 10*PollInterval || d > 12*PollInterval {
			t.Fatalf("Hold returned %v after it began, want at the first poll after the heal (%v)", d, 10*PollInterval)
		}
		setRules(t, dir, "proc=0 delay=30ms rate=1000")
		time.Sleep(PollInterval)
		synctest.Wait()
		start = time.Now()
		if err := in.Hold(t.Context(), 100, true); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != 130*time.Millisecond {
			t.Fatalf("a 100-byte send waited %v, want 30ms delay + 100ms at 1000 B/s", d)
		}
		start = time.Now()
		if err := in.Hold(t.Context(), 100, false); err != nil || time.Since(start) != 30*time.Millisecond {
			t.Fatalf("a delivery waited %v (%v), want the 30ms delay only", time.Since(start), err)
		}
	})
}
