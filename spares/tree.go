package spares

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"time"
	"weak"

	"github.com/gaspigo/gaspigo/spares/internal/follow"
	"github.com/gaspigo/gaspigo/spares/internal/tree"
)

// newTree lays out the dissemination tree of st with fan-out k (package
// tree): the live voters are its roots, the other live processes that can
// take requests (CtlAddr set) hang below them. A tree is read-only, and
// the nodes of one process whose states have the same processes, voters
// and failures share it (trees): a simulation of N nodes in one process
// holds one, not N, and finds it in O(voters + failed) rather than O(N).
func newTree(st *state, k int) *tree.Tree {
	var voters []uint32
	for _, v := range st.Voters {
		if _, failed := st.Failed[v]; !failed {
			voters = append(voters, v)
		}
	}
	key := treeKey{procs: st.Procs.base, k: k, voters: u32s(voters), failed: u32s(st.FailedProcs())}
	if w, ok := trees.Load(key); ok {
		if t := w.(weak.Pointer[tree.Tree]).Value(); t != nil {
			return t
		}
	}
	t := layTree(st, voters, k)
	w := weak.Make(t)
	if prev, loaded := trees.LoadOrStore(key, w); loaded {
		if pt := prev.(weak.Pointer[tree.Tree]).Value(); pt != nil {
			return pt
		}
		trees.Store(key, w)
	}
	runtime.AddCleanup(t, func(e treeEntry) { trees.CompareAndDelete(e.key, e.w) }, treeEntry{key, w})
	return t
}

// treeKey is what a tree is a function of: the process table (shared
// by content, so its identity is its content), the live voters in
// order, the failed processes in order, the fan-out.
type treeKey struct {
	procs          *procBase
	k              int
	voters, failed string
}

type treeEntry struct {
	key treeKey
	w   weak.Pointer[tree.Tree]
}

// trees maps a treeKey to the tree laid out from it while that tree lives.
var trees sync.Map // treeKey -> weak.Pointer[tree.Tree]

// u32s encodes ps as a string, for a map key.
func u32s(ps []uint32) string {
	b := make([]byte, 0, 4*len(ps))
	for _, p := range ps {
		b = binary.LittleEndian.AppendUint32(b, p)
	}
	return string(b)
}

// layTree is newTree without the sharing.
func layTree(st *state, voters []uint32, k int) *tree.Tree {
	var others []uint32
	for p, info := range st.Procs.all() {
		if _, failed := st.Failed[p]; failed || info.CtlAddr == "" || slices.Contains(voters, p) {
			continue
		}
		others = append(others, p)
	}
	return tree.New(voters, others, k)
}

// tree returns the dissemination tree of the applied state with fan-out
// k, computed once per version, and the channel closed at the next change.
func (f *fsm) tree(k int) (*tree.Tree, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.treeCache == nil || f.treeAt != f.news.version || f.treeCache.Fanout() != k {
		f.treeCache, f.treeAt = newTree(&f.st, k), f.news.version
	}
	return f.treeCache, f.changed
}

// following reports whether this node learns its state from the tree: a
// client, or a promoted voter whose Raft has not received anything yet.
func (n *Node) following() bool {
	r := n.raftNode()
	return r == nil || r.LastIndex() == 0
}

// upstream is whom this node asks for news, best first (Tree.Upstream).
// A joiner its state does not list yet (joining) knows only the voters of
// the job's first state, and all of them may have been replaced since:
// after them it asks the other processes of its state in tree order, any
// of which answers with the news. That list is O(N), built per answer,
// but only until the joiner's state lists it.
func (n *Node) upstream(tr *tree.Tree) []uint32 {
	up := tr.Upstream(n.cfg.Proc)
	joining := false
	var later []uint32
	n.fsm.read(func(st *state, _ uint64) {
		if joining = n.joining(st); joining {
			later = n.unlistedContacts(st)
		}
	})
	if !joining {
		return up
	}
	// The voters of the first state, then those who joined before this
	// process (Config.Contacts: the likeliest to be alive when the first
	// processes are gone), then the others of the first state.
	up = append(up, later...)
	return append(up, tr.Clients()...)
}

// treeSide is the node as the tree's network side (package follow) sees
// it: the applied state, Raft, the failure detector's marks and the
// control connections.
type treeSide struct{ n *Node }

func (s treeSide) Following() bool { return s.n.following() }
func (s treeSide) MaybeStartRaft() { s.n.maybeStartRaft() }

func (s treeSide) StartsRaft() bool {
	start := false
	s.n.fsm.read(func(st *state, _ uint64) { start = s.n.shouldStartRaft(st) })
	return start
}

func (s treeSide) Upstream() ([]uint32, <-chan struct{}) {
	tr, changed := s.n.fsm.tree(s.n.cfg.TreeFanout)
	return s.n.upstream(tr), changed
}

func (s treeSide) SkipDown(bad map[uint32]time.Time, now time.Time) { s.n.down.addTo(bad, now) }
func (s treeSide) OnDown(proc uint32, f func()) func()              { return s.n.down.onMark(proc, f) }

func (s treeSide) Dial(ctx context.Context, proc uint32) (follow.Conn, error) {
	var addr string
	s.n.fsm.read(func(st *state, _ uint64) { addr = s.n.ctlAddrOf(st, proc) })
	if addr == "" {
		return nil, fmt.Errorf("%w: proc %d has no control address", errProtocol, proc)
	}
	c, err := s.n.dialCtl(ctx, addr)
	if err != nil {
		return nil, err
	}
	return c, nil
}

func (s treeSide) Request(payload []byte) ([]byte, error) {
	return encodeCtlRequest(ctlOpFollow, payload)
}

func (s treeSide) Next(c follow.Conn) ([]byte, error) {
	req, err := readFrame(c)
	var op uint64
	var payload []byte
	if err == nil {
		op, payload, err = decodeCtlRequest(req)
	}
	if err == nil && op != ctlOpFollow {
		err = fmt.Errorf("%w: op %d on a follow connection", errProtocol, op)
	}
	return payload, err
}

func (s treeSide) Version() uint64         { return s.n.fsm.version() }
func (s treeSide) Apply(u update) error    { return s.n.fsm.applyUpdate(u) }
func (s treeSide) CodeOf(err error) string { return codeOf(err) }

func (s treeSide) News(have uint64, full bool) (update, <-chan struct{}, error) {
	return s.n.fsm.newsFor(have, full)
}

func (s treeSide) Leader() (uint32, bool)              { return s.n.leader() }
func (s treeSide) ContactTime(now time.Time) time.Time { return s.n.contactTime(now) }
func (s treeSide) InContact(now time.Time) bool        { return s.n.inContact(now) }
