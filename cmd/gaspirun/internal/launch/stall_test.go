package launch

import (
	"context"
	"strings"
	"testing"
	"time"
)

// Rule (cmd/gaspirun, No silent stall): a note is due StallAfter into a
// stall and every StallEvery after, until something happens.
func TestStallWatch(t *testing.T) {
	t0 := time.Unix(1000, 0)
	w := newStallWatch(30*time.Second, time.Minute, t0)
	for _, c := range []struct {
		at       time.Duration
		progress bool
		due      bool
	}{
		{29 * time.Second, false, false},
		{30 * time.Second, false, true},
		{31 * time.Second, false, false},
		{89 * time.Second, false, false},
		{90 * time.Second, false, true},
		{100 * time.Second, true, false}, // progress: a new stall starts
		{129 * time.Second, false, false},
		{130 * time.Second, false, true},
	} {
		now := t0.Add(c.at)
		if c.progress {
			w.progress(now)
		}
		if got := w.due(now); got != c.due {
			t.Errorf("at %v: due %v, want %v", c.at, got, c.due)
		}
	}
	// Progress from the past (an older output line) changes nothing.
	w.progress(t0)
	if !w.due(t0.Add(190 * time.Second)) {
		t.Error("an old line ended the stall")
	}
}

func TestCommaInt(t *testing.T) {
	for n, want := range map[int]string{0: "0", 999: "999", 1000: "1,000", 1026: "1,026", 65536: "65,536", 1234567: "1,234,567", -4096: "-4,096"} {
		if got := commaInt(n); got != want {
			t.Errorf("commaInt(%d) = %q, want %q", n, got, want)
		}
	}
}

// A process that never registers: gaspirun says, without a terminal,
// which one the job waits for, and says it again while it waits.
func TestStallNamesUnregistered(t *testing.T) {
	cfg, out, errs := jobConfig("late1", 2, 0)
	cfg.StallAfter, cfg.StallEvery = 300*time.Millisecond, time.Second
	cfg.Timeout = 4 * time.Second
	res := run(t, context.Background(), cfg)
	if res.ExitCode != ExitTimeout {
		dump(t, out, errs)
		t.Fatalf("exit %d, want %d (the timeout)", res.ExitCode, ExitTimeout)
	}
	notes := 0
	for _, l := range strings.Split(errs.String(), "\n") {
		if strings.HasPrefix(l, "gaspirun: 1 of 2 processes registered with the rendezvous; waiting ") && strings.HasSuffix(l, " for process 1 on "+res.Procs[1].Host) {
			notes++
		}
	}
	if notes < 2 {
		dump(t, out, errs)
		t.Fatalf("%d notes naming process 1 as the one waited for, want at least 2 in 4s (one after 0.3s, then every 1s)", notes)
	}
}

// A formed job that prints nothing more: the note counts the processes by
// state and quotes the last line.
func TestStallAfterFormed(t *testing.T) {
	cfg, out, errs := jobConfig("hang", 2, 0)
	cfg.StallAfter, cfg.StallEvery = 500*time.Millisecond, time.Minute
	cfg.Timeout = 4 * time.Second
	cfg.Grace = 300 * time.Millisecond
	run(t, context.Background(), cfg)
	var notes []string
	for _, l := range strings.Split(errs.String(), "\n") {
		if strings.HasPrefix(l, "gaspirun: no progress seen for ") {
			notes = append(notes, l)
		}
	}
	if len(notes) != 1 || !strings.Contains(notes[0], " (no line, report or exit): 2 ranks: 2 running; 0 spares idle; the last line, ") || !strings.HasSuffix(notes[0], "] ready") {
		dump(t, out, errs)
		t.Fatalf("notes %q, want one (StallEvery is a minute) with the counts and the last line, a rank's \"ready\"", notes)
	}
	waitGone(t, grandchildren(t, out.String()))
}
