package proctest

import (
	"errors"
	"fmt"
	"net"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gaspigo/gaspigo/internal/testkit/procnet"
)

// FloodConfig shapes a Flood of unauthenticated connections.
type FloodConfig struct {
	// PerTarget is how many new connections per second each target gets.
	PerTarget int
	// Hold is how many connections to each target are held open, idle,
	// at once; past it the oldest is closed as a new one is made, so every
	// target sees both held connections and churn.
	Hold int
	// ChurnEvery: every ChurnEvery-th connection is closed at once instead
	// of held (a connect-and-close probe). 0: none.
	ChurnEvery int
	// Workers is the number of goroutines dialing each target, sharing
	// PerTarget and Hold (one connect at a time each: more workers reach
	// higher rates). 0 means 1.
	Workers int
}

// FloodStats count what a Flood did.
type FloodStats struct {
	Targets     int
	Dialed      uint64 // connections made
	DialErrors  uint64 // connects that failed (refused, timed out)
	MaxHeld     int64  // most connections held at once, over all targets
	Began, Last time.Time
}

// Flood makes and holds unauthenticated TCP connections to every target
// it is given, from the test's process, until Stop. Each target has one
// goroutine, owned by the Flood.
type Flood struct {
	cfg     FloodConfig
	mu      sync.Mutex
	targets map[string]bool
	began   time.Time
	done    chan struct{}
	wg      sync.WaitGroup

	dialed, dialErrs atomic.Uint64
	held, maxHeld    atomic.Int64
}

// NewFlood returns a Flood with no target yet.
func NewFlood(cfg FloodConfig) *Flood {
	return &Flood{cfg: cfg, targets: map[string]bool{}, done: make(chan struct{})}
}

// Add starts flooding addr, unless it is flooded already. It reports
// whether addr is new.
func (f *Flood) Add(addr string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.targets[addr] {
		return false
	}
	select {
	case <-f.done:
		return false
	default:
	}
	if len(f.targets) == 0 {
		f.began = time.Now()
	}
	f.targets[addr] = true
	w := max(f.cfg.Workers, 1)
	for range w {
		f.wg.Add(1)
		go f.target(addr, max(f.cfg.PerTarget/w, 1), f.cfg.Hold/w)
	}
	return true
}

// Began is when the first target was added (zero if none).
func (f *Flood) Began() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.began
}

// Stats returns the counters so far.
func (f *Flood) Stats() FloodStats {
	f.mu.Lock()
	st := FloodStats{Targets: len(f.targets), Began: f.began}
	f.mu.Unlock()
	st.Dialed, st.DialErrors, st.MaxHeld = f.dialed.Load(), f.dialErrs.Load(), f.maxHeld.Load()
	st.Last = time.Now()
	return st
}

func (s FloodStats) String() string {
	d := s.Last.Sub(s.Began).Seconds()
	rate := 0.0
	if d > 0 {
		rate = float64(s.Dialed) / d
	}
	return fmt.Sprintf("%d targets, %d connections (%.0f/s), %d failed connects, at most %d held at once",
		s.Targets, s.Dialed, rate, s.DialErrors, s.MaxHeld)
}

// Stop closes every connection and waits for the goroutines. Idempotent.
func (f *Flood) Stop() FloodStats {
	f.mu.Lock()
	select {
	case <-f.done:
	default:
		close(f.done)
	}
	f.mu.Unlock()
	f.wg.Wait()
	return f.Stats()
}

// target is one worker of addr: rate connections a second, hold held.
func (f *Flood) target(addr string, rate, hold int) {
	defer f.wg.Done()
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
		f.held.Add(-int64(len(held)))
	}()
	every := time.Second / time.Duration(rate)
	tick := time.NewTicker(every)
	defer tick.Stop()
	d := net.Dialer{Timeout: time.Second}
	for n := 1; ; n++ {
		select {
		case <-f.done:
			return
		case <-tick.C:
		}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			f.dialErrs.Add(1)
			continue
		}
		f.dialed.Add(1)
		if f.cfg.ChurnEvery > 0 && n%f.cfg.ChurnEvery == 0 {
			c.Close()
			continue
		}
		held = append(held, c)
		h := f.held.Add(1)
		if len(held) > hold {
			held[0].Close()
			held = held[1:]
			h = f.held.Add(-1)
		}
		for {
			m := f.maxHeld.Load()
			if h <= m || f.maxHeld.CompareAndSwap(m, h) {
				break
			}
		}
	}
}

// Follow adds, every interval until the returned stop, the listening
// addresses of the processes that pids returns (see procnet); stop also
// stops the flood and waits for it.
func (f *Flood) Follow(pids func() []int, interval time.Duration) (stop func()) {
	done, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			for _, a := range procnet.ListeningAddrs(pids()) {
				f.Add(a)
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() {
		close(done)
		<-finished
		f.Stop()
	}
}

var (
	injectAtRE = regexp.MustCompile(`\] inject: SIGKILL rank \d+ \(pid \d+\) after iteration \d+(?:, inside the checkpoint commit)? at (\S+)$`)
	restoredRE = regexp.MustCompile(`time=(\S+) level=INFO msg="checkpoint restored"`)
)

// KillToRestore reads a K-means job's output (gaspirun's, with PGAS_LOG at
// info) and returns the time of its first kill (the inject line) and the
// time from it to the last "checkpoint restored" record after it: the
// recovery time.
func KillToRestore(lines []string) (kill time.Time, recovery time.Duration, err error) {
	for _, l := range lines {
		if m := injectAtRE.FindStringSubmatch(l); m != nil {
			if kill, err = time.Parse(time.RFC3339Nano, m[1]); err != nil {
				return kill, 0, fmt.Errorf("inject line %q: %w", l, err)
			}
			break
		}
	}
	if kill.IsZero() {
		return kill, 0, errors.New("no inject line")
	}
	var last time.Time
	for _, l := range lines {
		if m := restoredRE.FindStringSubmatch(l); m != nil {
			at, err := time.Parse(time.RFC3339Nano, m[1])
			if err == nil && at.After(kill) && at.After(last) {
				last = at
			}
		}
	}
	if last.IsZero() {
		return kill, 0, errors.New("no checkpoint restored after the kill")
	}
	return kill, last.Sub(kill), nil
}
