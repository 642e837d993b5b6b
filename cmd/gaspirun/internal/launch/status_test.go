package launch

import (
	"bytes"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Rule: with a status line, every line printed first erases it and then
// draws it again, so the line never mixes with output; it shows the
// lowest rank's last line, the epoch and the spares; closing erases it.
// Without a terminal (a buffer) there is no status line at all.
func TestLiveLine(t *testing.T) {
	if s := newLiveLine(&bytes.Buffer{}, 4, 1); s != nil {
		t.Fatal("a status line on a writer that is no terminal")
	}
	var term bytes.Buffer
	o := newOutput(&term, &term)
	o.status = &liveLine{w: &term, width: 100, start: time.Now(), epoch: 1, lastRank: -1,
		counts: jobCounts{ranks: 4, running: 4, spares: 1}}
	o.line(streamStdout, 1, "r1", []byte("iter 3\n"))
	o.line(streamStdout, 0, "r0", []byte("iter 4\n"))
	o.status.setState(2, jobCounts{ranks: 4, running: 3, finished: 1, spares: 0, ended: 1})
	o.notice("spare process 4 now holds rank 2 (epoch 2)")
	got := term.String()
	for _, want := range []string{
		"[r1] iter 3\n\r\x1b[K\x1b[7m[4 ranks: 4 running; 1 spare idle; epoch 1;",
		"\r\x1b[K[r0] iter 4\n",
		"r0: iter 4\x1b[0m",
		"\r\x1b[Kgaspirun: spare process 4 now holds rank 2 (epoch 2)\n\r\x1b[K\x1b[7m[4 ranks: 3 running, 1 done; 0 spares idle; 1 other process ended; epoch 2;",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("terminal output lacks %q:\n%q", want, got)
		}
	}
	term.Reset()
	o.endStatus()
	o.notice("done")
	if got := term.String(); got != "\r\x1b[Kgaspirun: done\n" {
		t.Errorf("after the end: %q", got)
	}
}

// Rule: the status line counts the processes by state, whatever their
// number: ranks running, done and lost, idle spares, other ended ones.
func TestStatusCounts(t *testing.T) {
	tr := newTracker(4, 6, DeathContinue)
	tr.onFormed()
	step := func(what string, want jobCounts) {
		t.Helper()
		if _, got := tr.statusState(); got != want {
			t.Errorf("%s: %+v, want %+v", what, got, want)
		}
	}
	step("start", jobCounts{ranks: 4, running: 4, spares: 2})
	tr.onExit(1, exitInfo{Code: -1, Signal: syscall.SIGKILL})
	step("rank 1 killed", jobCounts{ranks: 4, running: 3, lost: 1, spares: 2, ended: 1})
	tr.onRole(4, 1, 2)
	step("spare 4 holds rank 1", jobCounts{ranks: 4, running: 4, spares: 1, ended: 1})
	tr.onExit(0, exitInfo{})
	step("rank 0 done", jobCounts{ranks: 4, running: 3, finished: 1, spares: 1, ended: 1})
	if got := (jobCounts{ranks: 4, running: 3, finished: 1, lost: 0, spares: 1, ended: 1}).String(); got != "4 ranks: 3 running, 1 done; 1 spare idle; 1 other process ended" {
		t.Errorf("text %q", got)
	}
}
