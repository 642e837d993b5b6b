package launch

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// liveLine is the status line gaspirun keeps at the bottom of a terminal:
// the processes counted by state (never one entry per process, so it
// reads the same at 4 or 4,000 processes), the epoch, the elapsed time
// and the last progress line of the lowest rank that printed. Every line
// printed above it first erases it and then draws it again (under
// output's lock), so it never mixes with the processes' output. Without a
// terminal there is none.
type liveLine struct {
	w     io.Writer // the terminal (gaspirun's stderr)
	width int
	start time.Time

	mu       sync.Mutex // guards the fields below; taken inside output.mu
	counts   jobCounts
	epoch    uint64
	last     string // last line of the lowest live rank's output
	lastRank int    // the rank that printed last
	drawn    bool
	closed   bool
}

// jobCounts are the processes of a job by state, as the status line shows
// them.
type jobCounts struct {
	ranks    int // ranks of the job
	running  int // ranks whose holder is running
	finished int // ranks whose holder exited 0
	lost     int // ranks without a holder, waiting for a spare (or vacant)
	spares   int // spares running that hold no rank
	ended    int // other processes that ended: failed, killed, replaced, or spares stopped
}

func (c jobCounts) String() string {
	parts := []string{fmt.Sprintf("%d ranks: %d running", c.ranks, c.running)}
	if c.finished > 0 {
		parts = append(parts, fmt.Sprintf("%d done", c.finished))
	}
	if c.lost > 0 {
		parts = append(parts, fmt.Sprintf("%d lost", c.lost))
	}
	t := strings.Join(parts, ", ")
	t += fmt.Sprintf("; %d %s idle", c.spares, plural(c.spares, "spare", "spares"))
	if c.ended > 0 {
		t += fmt.Sprintf("; %d other %s ended", c.ended, plural(c.ended, "process", "processes"))
	}
	return t
}

// isTerminal reports whether w is a terminal, and its width.
func isTerminal(w io.Writer) (bool, int) {
	f, ok := w.(*os.File)
	if !ok {
		return false, 0
	}
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return false, 0
	}
	return true, int(ws.Col)
}

// newLiveLine returns the status line for stderr, nil when stderr is no
// terminal (output redirected: plain lines only).
func newLiveLine(stderr io.Writer, ranks, spares int) *liveLine {
	ok, width := isTerminal(stderr)
	if !ok {
		return nil
	}
	if width < 20 {
		width = 80
	}
	return &liveLine{w: stderr, width: width, start: time.Now(), epoch: 1, lastRank: -1,
		counts: jobCounts{ranks: ranks, running: ranks, spares: spares}}
}

// text is the line's content, cut to the terminal's width.
func (s *liveLine) text() string {
	t := fmt.Sprintf("[%s; epoch %d; %s]", s.counts, s.epoch, time.Since(s.start).Round(100*time.Millisecond))
	if s.last != "" && s.lastRank >= 0 {
		t += fmt.Sprintf(" r%d: %s", s.lastRank, s.last)
	}
	if r := []rune(t); len(r) > s.width-1 {
		t = string(r[:s.width-1])
	}
	return t
}

// erase removes the line from the terminal; the caller holds output.mu.
func (s *liveLine) erase() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.drawn {
		io.WriteString(s.w, "\r\x1b[K")
		s.drawn = false
	}
}

// draw writes the line (reverse video, no newline); the caller holds
// output.mu.
func (s *liveLine) draw() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	io.WriteString(s.w, "\r\x1b[K\x1b[7m"+s.text()+"\x1b[0m")
	s.drawn = true
}

// progress notes a line printed by rank's process (label rN); the lowest
// rank that prints is the one shown.
func (s *liveLine) progress(label string, text []byte) {
	if s == nil {
		return
	}
	var rank int
	if _, err := fmt.Sscanf(label, "r%d", &rank); err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lastRank < 0 || rank <= s.lastRank {
		s.lastRank = rank
		s.last = strings.TrimSpace(string(text))
	}
}

// setState updates the counts and the epoch (from the tracker).
func (s *liveLine) setState(epoch uint64, counts jobCounts) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if epoch > s.epoch {
		s.epoch = epoch
		s.lastRank = -1 // the lowest live rank may have changed
	}
	s.counts = counts
}

// close erases the line for good.
func (s *liveLine) close() {
	if s == nil {
		return
	}
	s.erase()
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
}

// statusState is what the status line shows of t: the highest epoch a
// rank was reported in, and the processes by state.
func (t *tracker) statusState() (uint64, jobCounts) {
	epoch := slices.Max(t.rankEpoch)
	c := jobCounts{ranks: t.nRanks}
	for r, h := range t.holder {
		switch {
		case h < 0 || t.vacant[r]:
			c.lost++
		case !t.exited[h]:
			c.running++
		case t.exit[h].ok():
			c.finished++
		default:
			c.lost++
		}
	}
	for p := range t.nProcs {
		switch {
		case t.absent[p]:
		case t.rankOf[p] >= 0:
		case !t.exited[p] && t.heldRank[p] < 0:
			c.spares++
		default:
			c.ended++
		}
	}
	return epoch, c
}

// startStatus starts the status line when stderr is a terminal (and not
// --quiet), redrawn every half second; the function it returns erases it
// and stops its goroutine.
func startStatus(out *output, cfg Config) (stop func()) {
	s := newLiveLine(out.stderr, cfg.Ranks, cfg.Spares)
	if s == nil || cfg.Quiet {
		return func() {}
	}
	out.mu.Lock()
	out.status = s
	out.mu.Unlock()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				out.redraw()
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
		out.endStatus()
	}
}
