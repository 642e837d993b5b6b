package launch

import (
	"fmt"
	"strings"
	"time"
)

// A job that makes no visible progress is not silent: once nothing has
// happened for Config.StallAfter (no line from any process, no
// registration, report or exit; checked every stallTick), gaspirun says
// in one line what it waits for, and again every Config.StallEvery while
// nothing happens, on
// stderr, with or without a terminal. Before the job formed that is the
// processes that have not registered with the rendezvous (the usual
// stall: a process that never started, or was stopped); after, the
// processes by state and the last line any of them printed.

// stallWatch decides when a stall note is due. Only the loop goroutine
// uses it; the time of the last output line comes from output.
type stallWatch struct {
	after, every time.Duration
	last         time.Time // the last progress
	noted        time.Time // the last note of the current stall; zero: none yet
	regs         int       // processes registered, as last counted
}

// stallTick is how often the loop checks for a stall: often enough that
// a note comes within a few seconds of falling due.
func stallTick(after time.Duration) time.Duration {
	return min(max(after/4, 10*time.Millisecond), 5*time.Second)
}

func newStallWatch(after, every time.Duration, now time.Time) *stallWatch {
	return &stallWatch{after: after, every: every, last: now}
}

// progress: something happened at t; a stall, if any, is over.
func (w *stallWatch) progress(t time.Time) {
	if t.After(w.last) {
		w.last = t
		w.noted = time.Time{}
	}
}

// due says, at now, whether a note is due: the first StallAfter into a
// stall, then every StallEvery. It records the note as given.
func (w *stallWatch) due(now time.Time) bool {
	if now.Sub(w.last) < w.after {
		return false
	}
	if !w.noted.IsZero() && now.Sub(w.noted) < w.every {
		return false
	}
	w.noted = now
	return true
}

// stallCheck is the loop's tick: it takes registrations, and once the job
// formed the last output line, as progress, and prints a note when one is
// due.
func (j *job) stallCheck(w *stallWatch, now time.Time) {
	regs := j.registeredCount()
	if regs != w.regs {
		w.regs = regs
		w.progress(now)
	}
	lineAt, line := j.out.lastLine()
	formed := j.formed()
	if formed {
		// Before, the processes' lines are their own notes that they
		// wait for the member table: no progress.
		w.progress(lineAt)
	}
	if !w.due(now) || j.tr.phase != running {
		return
	}
	j.out.notice(j.stallNote(formed, now.Sub(w.last).Round(time.Second), regs, now.Sub(lineAt).Round(time.Second), line))
}

// formed says whether every process has registered: the rendezvous
// completed the member table.
func (j *job) formed() bool { return complete(j.srv) }

// registeredCount is how many of the processes gaspirun started are
// registered with the rendezvous (or were, before they ended).
func (j *job) registeredCount() int {
	n := 0
	for _, pr := range j.procs {
		if j.tr.registered[pr.id] || j.srv.Connected(uint32(pr.id)) {
			n++
		}
	}
	return n
}

// stallNote says what a job that made no progress for idle waits for.
func (j *job) stallNote(formed bool, idle time.Duration, regs int, sinceLine time.Duration, line string) string {
	if !formed {
		var missing []string
		for _, pr := range j.procs {
			if j.tr.registered[pr.id] || j.srv.Connected(uint32(pr.id)) {
				continue
			}
			if len(missing) == stallNamed {
				break
			}
			what := fmt.Sprintf("process %d", pr.id)
			if pr.host != "" {
				what += " on " + pr.host
			}
			missing = append(missing, what)
		}
		waiting := strings.Join(missing, ", ")
		if rest := len(j.procs) - regs - len(missing); rest > 0 {
			waiting += fmt.Sprintf(" and %d more", rest)
		}
		return fmt.Sprintf("%s of %s processes registered with the rendezvous; waiting %v for %s",
			commaInt(regs), commaInt(len(j.procs)), idle, waiting)
	}
	_, c := j.tr.statusState()
	last := "no process has printed a line yet"
	if line != "" {
		last = fmt.Sprintf("the last line, %v ago: %s", sinceLine, line)
	}
	return fmt.Sprintf("no progress seen for %v (no line, report or exit): %s; %s", idle, c, last)
}

// stallNamed is how many unregistered processes a note names.
const stallNamed = 3

// commaInt writes n with thousands separators: 1,026.
func commaInt(n int) string {
	s := fmt.Sprint(n)
	if n < 0 {
		return "-" + commaInt(-n)
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
