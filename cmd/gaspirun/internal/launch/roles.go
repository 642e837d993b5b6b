package launch

import (
	"time"

	"github.com/gaspigo/gaspigo/internal/bootstrap"
)

// heldRoles orders a role report after the exit it follows from. A spare
// that takes rank R reports its role as soon as the membership committed
// the failure of R's holder, and that report can reach gaspirun before
// the holder's exit does (the kernel's word on a killed child comes
// through a pipe's end and a wait, the report through a socket, and a
// loaded machine orders them as it likes). Applied first, the report
// makes the holder a replaced process, and its death then reads "killed
// after it was replaced" instead of "rank R was killed". So a role report
// that replaces a holder gaspirun started, whose exit it has not seen, is
// held for at most Config.ExitSettle, the bound exits are held for the
// other way round: the holder's exit, when it comes, is judged first and
// the report applied after it; a holder that does not exit meanwhile (cut
// off, not dead) gets the report then. Only the loop goroutine uses it.
type heldRoles struct {
	wait    time.Duration
	by      map[int][]bootstrap.Report // by the holder they replace
	due     chan int                   // a holder whose reports' wait ended
	settled <-chan struct{}            // closed when the loop ends
	timers  []*time.Timer
}

func newHeldRoles(wait time.Duration, settled <-chan struct{}) *heldRoles {
	return &heldRoles{wait: wait, by: map[int][]bootstrap.Report{}, due: make(chan int, 16), settled: settled}
}

// hold keeps r, which replaces holder old, until old's exit or the wait.
func (h *heldRoles) hold(old int, r bootstrap.Report) {
	if len(h.by[old]) == 0 {
		h.timers = append(h.timers, time.AfterFunc(h.wait, func() {
			select {
			case h.due <- old:
			case <-h.settled:
			}
		}))
	}
	h.by[old] = append(h.by[old], r)
}

// has says whether reports wait for old's exit.
func (h *heldRoles) has(old int) bool { return len(h.by[old]) > 0 }

// release returns the reports that waited for old, in order, and forgets
// them.
func (h *heldRoles) release(old int) []bootstrap.Report {
	rs := h.by[old]
	delete(h.by, old)
	return rs
}

// releaseAll returns every held report, and forgets them.
func (h *heldRoles) releaseAll() []bootstrap.Report {
	var rs []bootstrap.Report
	for old := range h.by {
		rs = append(rs, h.release(old)...)
	}
	return rs
}

// stop stops the timers.
func (h *heldRoles) stop() {
	for _, t := range h.timers {
		t.Stop()
	}
}
