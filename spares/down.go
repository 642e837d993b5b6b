package spares

import (
	"sync"
	"time"
)

// downMarks are the processes this process's failure detector confirmed
// failed (reportFailure), each until when it counts as down. Until the
// state declares them failed (which removes them from the tree), a client
// of the voters-only mode asks none of them for news and drops the one it
// follows at once, and a proposal goes through none of them: a dial to a
// host that was cut off silently fails only at its time-out (RPCTimeout),
// and the leader and the tree parent a client knows of are the ones it
// learnt before the fault. (Issue 31: with ranks 0 and 1, the Raft
// leader and the tree's root on one host cut off, the spare on a third
// host dialled those two in turn for 54 s, learnt nothing of its
// promotion, and the recovery waited for it.)
//
// A mark is only a preference: it lasts at most a cut-off bound
// (downFor), after which a process wrongly reported, which the state then
// kept, is asked again. The zero value is ready to use.
type downMarks struct {
	mu       sync.Mutex
	until    map[uint32]time.Time
	watchers map[*downWatch]struct{}
}

type downWatch struct {
	proc uint32
	fn   func()
}

// downFor is how long a confirmed failure counts as down: the cut-off
// bound, by which a process cut off from the membership gives up anyway.
func downFor(c *Config) time.Duration {
	if c.CutOff > 0 {
		return c.CutOff
	}
	return defaultCutOff
}

// mark records proc as down until now+d and calls the watchers of proc.
func (m *downMarks) mark(proc uint32, now time.Time, d time.Duration) {
	m.mu.Lock()
	if m.until == nil {
		m.until = map[uint32]time.Time{}
	}
	if u := now.Add(d); u.After(m.until[proc]) {
		m.until[proc] = u
	}
	var fns []func()
	for w := range m.watchers {
		if w.proc == proc {
			fns = append(fns, w.fn)
			delete(m.watchers, w)
		}
	}
	m.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
}

// is reports whether proc is marked down at now.
func (m *downMarks) is(proc uint32, now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	u, ok := m.until[proc]
	if ok && !now.Before(u) {
		delete(m.until, proc)
		return false
	}
	return ok
}

// addTo extends the marks of bad (the follow loop's) with the down marks
// in force at now.
func (m *downMarks) addTo(bad map[uint32]time.Time, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for p, u := range m.until {
		if !now.Before(u) {
			delete(m.until, p)
			continue
		}
		if u.After(bad[p]) {
			bad[p] = u
		}
	}
}

// onMark calls fn once, at the next mark of proc (at once, from this
// goroutine, if proc is down already), unless stop comes first.
func (m *downMarks) onMark(proc uint32, fn func()) (stop func()) {
	m.mu.Lock()
	if u, ok := m.until[proc]; ok && time.Now().Before(u) {
		m.mu.Unlock()
		fn()
		return func() {}
	}
	w := &downWatch{proc: proc, fn: fn}
	if m.watchers == nil {
		m.watchers = map[*downWatch]struct{}{}
	}
	m.watchers[w] = struct{}{}
	m.mu.Unlock()
	return func() {
		m.mu.Lock()
		delete(m.watchers, w)
		m.mu.Unlock()
	}
}
