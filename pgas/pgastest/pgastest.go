// Package pgastest holds test support for programs and libraries built on
// package pgas: a membership that stands in for the Raft membership of
// package spares, so that fault-tolerant jobs run over transport/mem
// inside one test process (and inside a testing/synctest bubble).
//
// A reported failure becomes a new committed view at once: the first
// spare takes the failed rank; with no spare left the rank becomes vacant
// (SetShrink) or the view carries an error that stops the job. Join adds
// a process that joined the running job (View.Joined) to the end of the
// spare pool, as spares' Node.JoinSelf does. Every
// process gets a Handle (its pgas.Config.Membership); views reach the
// handles with latest-value semantics, as spares delivers them.
//
// Tests can delay views in two ways: Hold keeps every new view back until
// a number of failures has been reported (simultaneous failures become
// one view), and Handle.Pause keeps one process's views back (a process
// that learns of a new epoch late). Handle.Lose gives up on one process,
// as spares does for a process cut off from its quorum.
//
// Safe for concurrent use.
package pgastest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/gaspigo/gaspigo/pgas"
	"github.com/gaspigo/gaspigo/transport"
)

// ErrNoSpares is the error of the view that fails the job: a rank was
// lost with no spare left and the membership does not shrink.
var ErrNoSpares = errors.New("pgastest: no spares left")

// Membership is the shared state of a fake membership: the current view,
// the spares not yet promoted, and what the processes reported.
type Membership struct {
	mu       sync.Mutex
	cur      pgas.View
	spares   []transport.Proc
	handles  []*Handle
	reports  []transport.Proc // reported failures, in order, without repeats
	finished []transport.Proc // processes that called Finish
	shrink   bool
	held     bool
	want     int // while held: publish once this many processes failed
}

// New returns the membership of a job of procs processes where processes
// 0..ranks-1 hold ranks 0..ranks-1 and the others are spares, in epoch 0.
func New(ranks, procs int) *Membership {
	m := &Membership{}
	for r := 0; r < ranks; r++ {
		m.cur.Ranks = append(m.cur.Ranks, transport.Proc(r))
	}
	for p := ranks; p < procs; p++ {
		m.spares = append(m.spares, transport.Proc(p))
	}
	return m
}

// SetShrink says what becomes of a rank lost with no spare left: vacant
// (transport.NoProc) when shrink, else the view fails the job with
// ErrNoSpares.
func (m *Membership) SetShrink(shrink bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.shrink = shrink
}

// Handle returns the membership as process proc sees it.
func (m *Membership) Handle(proc transport.Proc) *Handle {
	m.mu.Lock()
	defer m.mu.Unlock()
	h := &Handle{m: m, proc: proc, ch: make(chan pgas.View, 1), lost: make(chan struct{})}
	m.handles = append(m.handles, h)
	return h
}

// Current returns the latest view, published or not.
func (m *Membership) Current() pgas.View {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cur
}

// Reports returns the processes reported failed, in the order of their
// first report.
func (m *Membership) Reports() []transport.Proc {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.reports)
}

// Finished returns the processes that called Finish, in order.
func (m *Membership) Finished() []transport.Proc {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.finished)
}

// Hold stops publishing views until Release is called and victims more
// processes have been reported failed; then the latest view is published
// alone. A test holds the membership across simultaneous kills so that
// they give one view (a spare promoted into an intermediate view would
// send to the other victim and see a late PeerDown), or until every
// survivor has seen the transport's PeerDown for a victim.
func (m *Membership) Hold(victims int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.held = true
	m.want = len(m.cur.Failed) + victims
}

// Release ends Hold: the latest view is published now if every expected
// failure is in it, else at the last one.
func (m *Membership) Release() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.held = false
	if len(m.cur.Failed) >= m.want {
		m.publishLocked()
	}
}

// Publish delivers the current view to every process now. Finish records
// the end of the job without publishing it (a process learns it at the
// next view, as one whose copy of the log lags); a test publishes it.
func (m *Membership) Publish() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.publishLocked()
}

// Advance commits a new epoch with the same ranks and failures (as a
// spare joining, or an idle spare lost, would) and publishes it; it
// returns the new epoch.
func (m *Membership) Advance() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := m.nextLocked()
	m.cur = v
	m.publishLocked()
	return v.Epoch
}

// Join adds a process that joined the job after it formed (a joiner, as
// spares' Node.JoinSelf does): a new epoch lists it in View.Joined with addr
// (its transport's address: mem.Transport.Addr over transport/mem) and
// host, it goes to the end of the spare pool, and the view is published
// unless held (Hold). It returns the new epoch. Ids are the caller's to
// choose, from the job's process count on; one the job has or had is
// refused (process ids are never reused).
func (m *Membership) Join(proc transport.Proc, addr, host string) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if slices.Contains(m.cur.Ranks, proc) || slices.Contains(m.spares, proc) || slices.Contains(m.cur.Failed, proc) ||
		slices.ContainsFunc(m.cur.Joined, func(j pgas.Joiner) bool { return j.Proc == proc }) {
		return 0, fmt.Errorf("pgastest: proc %d is already in the job (or was): a process that joins needs a new id", proc)
	}
	v := m.nextLocked()
	i, _ := slices.BinarySearchFunc(v.Joined, proc, func(j pgas.Joiner, p transport.Proc) int { return cmp.Compare(j.Proc, p) })
	v.Joined = slices.Insert(v.Joined, i, pgas.Joiner{Proc: proc, Addr: addr, Host: host})
	m.spares = append(m.spares, proc)
	m.cur = v
	if !m.held && len(v.Failed) >= m.want {
		m.publishLocked()
	}
	return v.Epoch, nil
}

// nextLocked is the current view one epoch on, with tables of its own
// (the runtimes share views built from the same tables).
func (m *Membership) nextLocked() pgas.View {
	v := m.cur
	v.Epoch++
	v.Ranks, v.Failed, v.Joined = slices.Clone(v.Ranks), slices.Clone(v.Failed), slices.Clone(v.Joined)
	return v
}

func (m *Membership) publishLocked() {
	for _, h := range m.handles {
		h.push(m.cur)
	}
}

// Handle is one process's view of the membership: a pgas.Membership with
// the optional Finish and pgas.MembershipLoss.
type Handle struct {
	m      *Membership
	proc   transport.Proc
	ch     chan pgas.View
	paused bool       // under m.mu
	held   *pgas.View // under m.mu: the latest view kept back while paused

	lost    chan struct{} // closed by Lose
	lostErr error
}

var (
	_ pgas.Membership     = (*Handle)(nil)
	_ pgas.MembershipLoss = (*Handle)(nil)
)

// Current returns the latest view.
func (h *Handle) Current() pgas.View { return h.m.Current() }

// Watch returns the channel of published views.
func (h *Handle) Watch() <-chan pgas.View { return h.ch }

// ReportFailure turns the first report of proc into a new epoch in which
// the first spare holds proc's rank (see New and SetShrink). Later reports
// of proc are no-ops, and so is every report once the job finished
// (Finish) or cannot go on (the view's Err): as in package spares,
// membership changes stop then. An idle spare that learns of the end and
// leaves is reported by the processes still finalizing; a new epoch then
// would send them back to recover from a job that is over.
func (h *Handle) ReportFailure(ctx context.Context, proc transport.Proc, epoch uint64) error {
	m := h.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if slices.Contains(m.cur.Failed, proc) || m.cur.Finished || m.cur.Err != nil {
		return nil
	}
	m.reports = append(m.reports, proc)
	v := m.nextLocked()
	v.Failed = append(v.Failed, proc)
	m.spares = slices.DeleteFunc(m.spares, func(p transport.Proc) bool { return p == proc }) // an idle spare lost
	for r, p := range v.Ranks {
		if p != proc {
			continue
		}
		switch {
		case len(m.spares) > 0:
			v.Ranks[r] = m.spares[0]
			m.spares = m.spares[1:]
		case m.shrink:
			v.Ranks[r] = transport.NoProc
		default:
			v.Err = ErrNoSpares
		}
	}
	m.cur = v
	if !m.held && len(v.Failed) >= m.want {
		m.publishLocked()
	}
	return nil
}

// Finish records that the job finished and which process said so; the
// current view says Finished from then on (no new view is published).
func (h *Handle) Finish(ctx context.Context) error {
	m := h.m
	m.mu.Lock()
	defer m.mu.Unlock()
	m.finished = append(m.finished, h.proc)
	m.cur.Finished = true
	return nil
}

// Lost is closed once Lose was called.
func (h *Handle) Lost() <-chan struct{} { return h.lost }

// LostErr is the error given to Lose.
func (h *Handle) LostErr() error { return h.lostErr }

// Lose makes the membership give up on this process with err, as package
// spares does for a process cut off from its quorum. Call it once.
func (h *Handle) Lose(err error) {
	h.lostErr = err
	close(h.lost)
}

// Pause keeps this process's new views back while p holds; Pause(false)
// delivers the latest one kept back.
func (h *Handle) Pause(p bool) {
	h.m.mu.Lock()
	defer h.m.mu.Unlock()
	h.paused = p
	if !p && h.held != nil {
		v := *h.held
		h.held = nil
		h.push(v)
	}
}

// push delivers v with latest-value semantics, or keeps it while paused.
// Called with h.m.mu held.
func (h *Handle) push(v pgas.View) {
	if h.paused {
		h.held = &v
		return
	}
	select {
	case <-h.ch:
	default:
	}
	h.ch <- v
}
