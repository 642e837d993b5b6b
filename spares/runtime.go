package spares

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/gaspigo/gaspigo/pgas"
	"github.com/gaspigo/gaspigo/transport"
)

// Membership adapts a Node to pgas.Membership: the runtime reads committed
// views from it and reports confirmed failures to it.
type Membership struct {
	node *Node

	once sync.Once
	ch   chan pgas.View
}

var (
	_ pgas.Membership     = (*Membership)(nil)
	_ pgas.MembershipLoss = (*Membership)(nil)
	_ pgas.Finisher       = (*Membership)(nil)
	_ pgas.Leading        = (*Membership)(nil)
	_ pgas.LeaderMover    = (*Membership)(nil)
)

// NewMembership wraps a running node.
func NewMembership(n *Node) *Membership { return &Membership{node: n} }

// Node returns the wrapped node.
func (m *Membership) Node() *Node { return m.node }

// Current returns the locally applied state as a view.
func (m *Membership) Current() pgas.View { return m.toView(m.node.view()) }

// Watch converts the node's states to views. Only one reader may use it.
func (m *Membership) Watch() <-chan pgas.View {
	m.once.Do(func() {
		m.ch = make(chan pgas.View, 1)
		src := m.node.watch()
		go func() {
			defer close(m.ch)
			for st := range src {
				v := m.toView(st)
				select {
				case <-m.ch: // keep only the latest
				default:
				}
				m.ch <- v
			}
		}()
	})
	return m.ch
}

// ReportFailure proposes declareFailed for proc through the leader
// (pgas.Membership).
func (m *Membership) ReportFailure(ctx context.Context, proc transport.Proc, epoch uint64) error {
	_, err := m.node.reportFailure(ctx, uint32(proc), m.node.proc(), epoch)
	return err
}

// Finish marks the job finished, so idle spares stop waiting and exit.
func (m *Membership) Finish(ctx context.Context) error {
	_, err := m.node.propose(ctx, finish{})
	return err
}

// Close shuts the node down.
func (m *Membership) Close() error { return m.node.Shutdown() }

// Leader returns the process that leads the membership, as this node
// knows it (pgas.Leading).
func (m *Membership) Leader() (transport.Proc, bool) {
	p, ok := m.node.leader()
	return transport.Proc(p), ok
}

// MoveLeaderToRank moves the Raft leadership onto a rank: a leader that
// holds one stays, else the lowest live voter that holds a rank takes
// over (Node.TransferLeadership with noProc; pgas.LeaderMover).
func (m *Membership) MoveLeaderToRank(ctx context.Context) (transport.Proc, error) {
	p, err := m.node.transferLeadership(ctx, noProc)
	return transport.Proc(p), err
}

// Lost is closed when the node gives up on this process (Node.lost): the
// runtime then stops with LostErr (pgas.MembershipLoss).
func (m *Membership) Lost() <-chan struct{} { return m.node.lost() }

// LostErr is why (Node.lostErr).
func (m *Membership) LostErr() error { return m.node.lostErr() }

// toView converts a state to the runtime's view. The joiners are the
// processes whose ids are past the node's original member table (the
// rendezvous numbers the first processes 0..len(Members)-1 and every
// joiner after them, never reusing an id). A rank that awaits a joiner is
// still held by its failed process, so the runtime sees that process
// failed and not replaced yet.
//
// The view's Ranks is shared with the other views of the same rank table
// (viewRanks): the runtime never writes a View's tables (pgastest hands
// one View to every runtime alike).
func (m *Membership) toView(st state) pgas.View {
	v := pgas.View{Epoch: st.Epoch, Ranks: viewRanks(st.Ranks), Finished: st.Status == statusFinished, Err: st.Err()}
	for _, p := range st.FailedProcs() {
		v.Failed = append(v.Failed, transport.Proc(p))
	}
	v.Joined = joinersOf(&st, uint32(len(m.node.cfg.Members)))
	return v
}

// joinersOf lists the processes of st with an id from first on, in id
// order, failed ones included.
func joinersOf(st *state, first uint32) []pgas.Joiner {
	if st.Procs.len() == 0 || st.Procs.top() < first {
		return nil // nobody joined: O(1), not a pass over every process
	}
	var ids []uint32
	for p := range st.Procs.all() {
		if p >= first {
			ids = append(ids, p)
		}
	}
	slices.Sort(ids)
	var out []pgas.Joiner
	for _, p := range ids {
		info := st.Procs.info(p)
		out = append(out, pgas.Joiner{Proc: transport.Proc(p), Addr: info.Addr, Host: info.Host})
	}
	return out
}

// lastRanks is the rank table last converted by viewRanks, process-wide.
var lastRanks atomic.Pointer[rankView]

type rankView struct {
	t     rankTable
	ranks []transport.Proc // read-only
}

// viewRanks returns t as the runtime's rank table. The nodes of one
// process that convert the same table in turn (a simulation of N nodes,
// each handing its runtime every view) share the last one converted,
// rather than each making an O(N) copy at the same moment; a real job's
// process keeps one table more.
func viewRanks(t rankTable) []transport.Proc {
	if rv := lastRanks.Load(); rv != nil && rv.t == t {
		return rv.ranks
	}
	out := make([]transport.Proc, t.len())
	for r, p := range t.all() {
		out[r] = transport.Proc(p)
	}
	lastRanks.Store(&rankView{t: t, ranks: out})
	return out
}
