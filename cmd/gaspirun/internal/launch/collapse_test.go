package launch

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestFormatLabels(t *testing.T) {
	cases := []struct {
		in   []string
		want string
	}{
		{[]string{"r3"}, "r3"},
		{[]string{"r0", "r1", "r2", "r3"}, "r0-3"},
		{[]string{"r12", "r0", "r9", "r1", "r10", "r7", "r2", "r11", "r3"}, "r0-3,7,9-12"},
		{[]string{"r1", "r3", "r5"}, "r1,3,5"},
		{[]string{"r0", "r1"}, "r0-1"},
		{[]string{"s9", "r1", "r0", "p4", "s8"}, "r0-1,s8-9,p4"},
		{[]string{"r2", "r2", "r3"}, "r2-3"},
		{[]string{"x", "r0", "r1"}, "r0-1,x"},
	}
	for _, c := range cases {
		if got := formatLabels(c.in); got != c.want {
			t.Errorf("formatLabels(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	var all []string
	for r := 255; r >= 0; r-- {
		all = append(all, fmt.Sprintf("r%d", r))
	}
	if got := formatLabels(all); got != "r0-255" {
		t.Errorf("256 ranks: %q", got)
	}
}

// ev is one step of a collapser script: a line from proc at ms, or (proc
// -1) a tick of the clock to ms.
type ev struct {
	ms   int
	proc int
	text string
}

func runCollapser(c *collapser, evs []ev) []string {
	t0 := time.Unix(1000, 0)
	var out []string
	emit := func(ls []collapsedLine) {
		for _, l := range ls {
			out = append(out, fmt.Sprintf("%d [%s] %s", l.stream, l.labels, l.text))
		}
	}
	for _, e := range evs {
		now := t0.Add(time.Duration(e.ms) * time.Millisecond)
		if e.proc < 0 {
			emit(c.expire(now, nil))
			continue
		}
		emit(c.add(now, e.proc, fmt.Sprintf("r%d", e.proc), streamStdout, e.text))
	}
	emit(c.flushAll(nil))
	return out
}

// Rules of collapser (collapse.go), one case each.
func TestCollapser(t *testing.T) {
	cases := []struct {
		name     string
		window   int // ms
		nprocs   int
		maxBytes int
		evs      []ev
		want     []string
	}{
		{"lines within the window of each other collapse", 200, 8, 1 << 20,
			[]ev{{0, 0, "a"}, {150, 1, "a"}, {300, 3, "a"}, {450, 2, "a"}, {649, -1, ""}, {651, -1, ""}, {700, 4, "a"}},
			[]string{"0 [r0-3] a", "0 [r4] a"}},
		{"a group stays open at most maxHoldWindows windows", 200, 8, 1 << 20,
			[]ev{{0, 0, "a"}, {190, 1, "a"}, {380, 2, "a"}, {570, 3, "a"}, {760, 4, "a"}, {950, 5, "a"}, {999, -1, ""}, {1000, -1, ""}, {1001, 6, "a"}},
			[]string{"0 [r0-5] a", "0 [r6] a"}},
		{"a group due waits for an older one, within the older one's bound", 200, 8, 1 << 20,
			[]ev{{0, 0, "a"}, {10, 1, "b"}, {150, 2, "a"}, {300, 3, "a"}, {349, -1, ""}, {400, 4, "b"}, {500, -1, ""}},
			// b is due at 210 but a (older) at 500: b waits, still open,
			// and r4's b joins it; both print when a falls due.
			[]string{"0 [r0,2-3] a", "0 [r1,4] b"}},
		{"a line after the window opens a new group", 200, 8, 1 << 20,
			[]ev{{0, 0, "a"}, {250, 1, "a"}},
			[]string{"0 [r0] a", "0 [r1] a"}},
		{"different texts are different groups, printed in the order opened", 200, 8, 1 << 20,
			[]ev{{0, 0, "a"}, {1, 1, "b"}, {2, 1, "a"}, {3, 0, "b"}},
			// r1 printed b before a, so its a cannot join a's group (opened
			// before b's); r0's b can join b's group.
			[]string{"0 [r0] a", "0 [r0-1] b", "0 [r1] a"}},
		{"a process's repeated line opens a new group", 200, 8, 1 << 20,
			[]ev{{0, 0, "tick"}, {1, 0, "tick"}, {2, 1, "tick"}},
			[]string{"0 [r0] tick", "0 [r0-1] tick"}},
		{"lockstep iterations collapse per iteration", 200, 4, 1 << 20,
			[]ev{{0, 0, "iter 1"}, {1, 0, "iter 2"}, {2, 1, "iter 1"}, {3, 2, "iter 1"}, {4, 1, "iter 2"}, {5, 2, "iter 2"}},
			[]string{"0 [r0-2] iter 1", "0 [r0-2] iter 2"}},
		{"a group every process joined is printed at once, after the older ones", 1000, 3, 1 << 20,
			[]ev{{0, 0, "x"}, {1, 1, "a"}, {2, 0, "a"}, {3, 2, "a"}, {4, 2, "y"}},
			[]string{"0 [r0] x", "0 [r0-2] a", "0 [r2] y"}},
		{"the byte bound prints the oldest groups early", 10000, 8, 2*(groupOverhead+labelOverhead+1) + labelOverhead,
			[]ev{{0, 0, "a"}, {1, 1, "b"}, {2, 2, "b"}, {3, 3, "c"}},
			[]string{"0 [r0] a", "0 [r1-2] b", "0 [r3] c"}},
		{"window 0 prints at once", 0, 8, 1 << 20,
			[]ev{{0, 0, "a"}, {0, 1, "a"}},
			[]string{"0 [r0] a", "0 [r1] a"}},
		{"one process prints at once", 200, 1, 1 << 20,
			[]ev{{0, 0, "a"}, {1, 0, "a"}},
			[]string{"0 [r0] a", "0 [r0] a"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			col := newCollapser(time.Duration(c.window)*time.Millisecond, c.nprocs, c.maxBytes)
			got := runCollapser(col, c.evs)
			if !slices.Equal(got, c.want) {
				t.Errorf("got  %q\nwant %q", got, c.want)
			}
			if col.bytes != 0 || len(col.open) != 0 {
				t.Errorf("after flushAll: %d bytes, %d open groups", col.bytes, len(col.open))
			}
		})
	}
}

// Rule: whatever the interleaving, no line is lost or duplicated, each
// process's lines come out in its order, no line is held past the window,
// and the pending bytes stay bounded. Random scripts, seed in the name.
func TestCollapserKeepsOrderAndBounds(t *testing.T) {
	for seed := uint64(1); seed <= 40; seed++ {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			const nprocs, window = 6, 200 * time.Millisecond
			maxBytes := 4 * (groupOverhead + labelOverhead + 8)
			if seed%2 == 0 {
				maxBytes = 1 << 20
			}
			col := newCollapser(window, nprocs, maxBytes)
			t0 := time.Unix(0, 0)
			now := t0
			sent := make([][]string, nprocs)
			got := make([][]string, nprocs)
			emitAt := func(ls []collapsedLine) {
				for _, l := range ls {
					for _, p := range labelsToProcs(t, l.labels) {
						got[p] = append(got[p], l.text)
					}
				}
			}
			for step := 0; step < 400; step++ {
				now = now.Add(time.Duration(rng.IntN(60)) * time.Millisecond)
				if rng.IntN(5) == 0 {
					emitAt(col.expire(now, nil))
				} else {
					p := rng.IntN(nprocs)
					text := fmt.Sprintf("line %d", rng.IntN(4))
					sent[p] = append(sent[p], text)
					emitAt(col.add(now, p, fmt.Sprintf("r%d", p), streamStdout, text))
				}
				if col.bytes > maxBytes {
					t.Fatalf("step %d: %d bytes pending, bound %d", step, col.bytes, maxBytes)
				}
				if at, ok := col.next(); ok && at.Before(now) {
					t.Fatalf("step %d: a group due at %v is still pending at %v", step, at.Sub(t0), now.Sub(t0))
				}
			}
			emitAt(col.flushAll(nil))
			for p := range nprocs {
				if !slices.Equal(got[p], sent[p]) {
					t.Fatalf("process %d: got %q\nsent %q", p, got[p], sent[p])
				}
			}
		})
	}
}

// labelsToProcs reads back a collapsed prefix of r labels.
func labelsToProcs(t *testing.T, labels string) []int {
	t.Helper()
	var ps []int
	for _, part := range strings.Split(strings.TrimPrefix(labels, "r"), ",") {
		var lo, hi int
		if n, _ := fmt.Sscanf(part, "%d-%d", &lo, &hi); n == 2 {
			for p := lo; p <= hi; p++ {
				ps = append(ps, p)
			}
			continue
		}
		if _, err := fmt.Sscanf(part, "%d", &lo); err != nil {
			t.Fatalf("bad labels %q", labels)
		}
		ps = append(ps, lo)
	}
	return ps
}

// Rule: output drives the collapser with the real clock: identical lines
// from several pumps come out as one line once the window has passed,
// and flush prints what is pending.
func TestOutputCollapses(t *testing.T) {
	var out syncBuffer
	o := newOutput(&out, &out)
	o.collapse(time.Hour, 4, nil)
	for p := range 3 {
		o.pump(strings.NewReader("same\n"), streamStdout, p, func() string { return fmt.Sprintf("r%d", p) }, nil)
	}
	if got := out.String(); got != "" {
		t.Fatalf("printed before the window or the flush: %q", got)
	}
	o.pump(strings.NewReader("same\n"), streamStdout, 3, func() string { return "s3" }, nil)
	if got := out.String(); got != "[r0-2,s3] same\n" {
		t.Fatalf("a line every process printed: %q", got)
	}
	o.pump(strings.NewReader("last\n"), streamStderr, 1, func() string { return "r1" }, nil)
	o.event(0, "r0", "restored checkpoint 3")
	o.event(2, "r2", "restored checkpoint 3")
	o.alert("rank 1 failed")
	o.flush()
	if got := out.String(); got != "[r0-2,s3] same\n[r1] last\ngaspirun: [r0,2] restored checkpoint 3\ngaspirun: rank 1 failed\n" {
		t.Fatalf("after the alert: %q", got)
	}
}

// syncBuffer is a bytes.Buffer safe for the timer's goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
