package kvjob

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Gate bounds how many ranks of one host compute at once (BDMPI's
// runnable ranks): Slots lock files in a directory every process of the
// host opens; a rank computes while it holds one (an exclusive flock)
// and must release it before any wait on other ranks (a collective, a
// checkpoint, the end of its stream), so a holder never waits on a rank
// that waits for a slot. Locks die with their process: a killed holder
// frees its slot at once. A nil *Gate bounds nothing.
type Gate struct {
	dir   string
	files []*os.File
	held  int // index of the slot held, -1: none
	home  int // the slot waited on when every slot is taken
	// acquired is where a waiting flock reports; the Gate owns the
	// goroutine and drains it when Acquire gives up.
	acquired chan error
	waiting  bool
	// Waited is the time Acquire spent waiting for a slot.
	Waited time.Duration
}

// OpenGate opens (creating) the slots dir/slot-0..n-1; rank spreads the
// ranks that find every slot taken over the slots they wait on.
func OpenGate(dir string, n, rank int) (*Gate, error) {
	if n < 1 {
		return nil, fmt.Errorf("runnable ranks %d: want at least 1", n)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("runnable ranks: %w", err)
	}
	g := &Gate{dir: dir, held: -1, home: rank % n, acquired: make(chan error, 1)}
	for i := range n {
		f, err := os.OpenFile(filepath.Join(dir, fmt.Sprintf("slot-%d", i)), os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			g.Close()
			return nil, fmt.Errorf("runnable ranks: %w", err)
		}
		g.files = append(g.files, f)
	}
	return g, nil
}

// Acquire takes a free slot, or waits for this rank's own slot.
func (g *Gate) Acquire(ctx context.Context) error {
	if g == nil || g.held >= 0 {
		return nil
	}
	t0 := time.Now()
	defer func() { g.Waited += time.Since(t0) }()
	if !g.waiting {
		for i, f := range g.files {
			if syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
				g.held = i
				return nil
			}
		}
		g.waiting = true
		fd := int(g.files[g.home].Fd())
		go func() { g.acquired <- syscall.Flock(fd, syscall.LOCK_EX) }()
	}
	select {
	case err := <-g.acquired:
		g.waiting = false
		if err != nil {
			return fmt.Errorf("runnable ranks: lock slot %d: %w", g.home, err)
		}
		g.held = g.home
		return nil
	case <-ctx.Done():
		return ctx.Err() // the flock goes on; a later Acquire or Close takes its outcome
	}
}

// Release frees the slot held, if any.
func (g *Gate) Release() {
	if g == nil || g.held < 0 {
		return
	}
	syscall.Flock(int(g.files[g.held].Fd()), syscall.LOCK_UN)
	g.held = -1
}

// Close releases the slot and closes the files; a flock still waiting
// ends when the files close (or when it gets the lock, freed at once).
func (g *Gate) Close() {
	if g == nil {
		return
	}
	g.Release()
	for _, f := range g.files {
		f.Close()
	}
}

// Remove deletes the slot files and the directory, if nothing else is
// in it: call it once no rank of the job needs a slot any more (after
// the job's Finalize). Errors are ignored: another process of the host
// may have removed them first.
func (g *Gate) Remove() {
	if g == nil {
		return
	}
	for _, f := range g.files {
		os.Remove(f.Name())
	}
	os.Remove(g.dir)
}

// PeakRSS is this process's peak resident set (VmHWM) as Linux reports
// it, or "?".
func PeakRSS() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "?"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			return strings.Join(strings.Fields(v), "")
		}
	}
	return "?"
}
