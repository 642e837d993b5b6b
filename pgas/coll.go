package pgas

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/gaspigo/gaspigo/transport"
)

// Group is an ordered set of ranks that run collectives together. Every
// member must create it with the same tag and ranks, and call the same
// collectives on it in the same order.
type Group struct {
	tag   uint16
	ranks []int    // fixed members (NewGroup); nil for GroupAll
	rt    *Runtime // GroupAll: the members are the live ranks of the view

	// shape is what collectives derive from the view they run in,
	// computed once per view (groupShape).
	shape atomic.Pointer[groupShape]

	mu    sync.Mutex
	epoch uint32
	seq   uint64
	shm   *groupShm // its collective area in the latest epoch that ran one (collshm.go)
	// broken is the epoch in which a collective on the group ended with
	// ErrTimeout, plus one (0: never). Its peers may or may not have
	// finished that collective, so the group's sequence numbers no longer
	// pair up: later collectives in that epoch are refused.
	broken uint32
}

// GroupAll returns the group of all ranks (tag 0). In a job that shrank
// it leaves the vacant ranks out: each collective on it runs among the
// live ranks of the view it runs in (Runtime.LiveRanks), so no collective
// waits on a rank that no process holds. Until a rank is vacant that is
// every rank.
func (rt *Runtime) GroupAll() *Group {
	rt.groupOnce.Do(func() {
		rt.all = &Group{tag: 0, rt: rt}
	})
	return rt.all
}

// NewGroup makes a group of the given ranks with a tag from 1 to 65535
// that no other live group uses. Ranks are sorted; duplicates are an error.
func (rt *Runtime) NewGroup(tag uint16, ranks []int) (*Group, error) {
	if tag == 0 {
		return nil, fmt.Errorf("pgas: new_group: tag 0 is GroupAll's: %w", ErrInvalid)
	}
	rs := slices.Clone(ranks)
	slices.Sort(rs)
	for i, r := range rs {
		if r < 0 || r >= rt.Size() {
			return nil, fmt.Errorf("pgas: new_group: rank %d outside 0..%d: %w", r, rt.Size()-1, ErrInvalid)
		}
		if i > 0 && rs[i-1] == r {
			return nil, fmt.Errorf("pgas: new_group: rank %d twice: %w", r, ErrInvalid)
		}
	}
	if len(rs) == 0 {
		return nil, fmt.Errorf("pgas: new_group: no ranks: %w", ErrInvalid)
	}
	return &Group{tag: tag, ranks: rs}, nil
}

// members returns g's ranks in view v.
func (g *Group) members(v *view) []int {
	if g.rt != nil {
		return v.live
	}
	return g.ranks
}

// Size returns the number of ranks in g (for GroupAll, in the current
// view).
func (g *Group) Size() int { return len(g.current()) }

// Ranks returns g's ranks in order (for GroupAll, in the current view).
func (g *Group) Ranks() []int { return slices.Clone(g.current()) }

func (g *Group) current() []int {
	if g.rt != nil {
		return g.rt.view.Load().live
	}
	return g.ranks
}

// index returns rank's position in g, or -1.
func (g *Group) index(rank int) int { return indexOf(g.current(), rank) }

// indexOf returns rank's position in the ascending list ranks, or -1.
func indexOf(ranks []int, rank int) int {
	i, ok := slices.BinarySearch(ranks, rank)
	if !ok {
		return -1
	}
	return i
}

// next returns the sequence number of the group's next collective. The
// count restarts at each epoch, so survivors and a promoted spare agree.
func (g *Group) next(epoch uint32) (uint64, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.broken == epoch+1 {
		return 0, fmt.Errorf("pgas: group %d: an earlier collective timed out, so its members are out of step; use a new group (or Recover): %w", g.tag, ErrInvalid)
	}
	if g.epoch != epoch {
		g.epoch, g.seq = epoch, 0
	}
	g.seq++
	return g.seq, nil
}

// timedOut marks g out of step after a collective in epoch ended with
// ErrTimeout.
func (g *Group) timedOut(epoch uint32) {
	g.mu.Lock()
	g.broken = epoch + 1
	g.mu.Unlock()
}

// groupShape is what a group's collectives derive from one view: the
// members, a vacant member if any, and how the members sit on hosts.
// Every collective in that view shares it, so a collective's own work is
// its messages, not a scan of the job.
type groupShape struct {
	v      *view
	hosts  *string // the host labels it was placed with (Config.Hosts)
	racks  *string // and the rack labels (Config.Racks)
	ranks  []int   // the group's members in v
	vacant int     // a member rank that no process holds in v, or -1
	topo   topology
}

// shapeIn returns g's shape in view v, computing it on the first
// collective of the view (O(members), then O(1)).
func (g *Group) shapeIn(rt *Runtime, v *view) *groupShape {
	if s := g.shape.Load(); s != nil && s.v == v {
		return s
	}
	hosts, racks := unsafe.SliceData(rt.cfg.Hosts), unsafe.SliceData(rt.cfg.Racks)
	if g.rt != nil {
		// GroupAll's shape depends on the view and the labels only: the
		// runtimes of one process that share the view share it too.
		if s := v.allShape.Load(); s != nil && s.hosts == hosts && s.racks == racks {
			g.shape.Store(s)
			return s
		}
	}
	s := &groupShape{v: v, hosts: hosts, racks: racks, ranks: g.members(v), vacant: -1}
	for _, r := range s.ranks {
		if r < len(v.ranks) && v.ranks[r] == transport.NoProc {
			s.vacant = r
			break
		}
	}
	s.topo = placeOnHosts(s.ranks, v, rt.cfg.Hosts)
	s.topo.placeOnRacks(s.ranks, v, rt.cfg.Racks)
	g.shape.Store(s)
	if g.rt != nil {
		v.allShape.Store(s)
	}
	return s
}

// coll is one collective call in progress.
type coll struct {
	rt    *Runtime
	g     *Group
	v     *view
	ranks []int    // g's members in view v
	me    int      // index of this rank in ranks
	topo  topology // how the members sit on hosts
	seq   uint64
	op    string
	round uint64
}

func (rt *Runtime) startColl(g *Group, op string) (*coll, error) {
	v, err := rt.current()
	if err != nil {
		return nil, err
	}
	if g == nil {
		g = rt.GroupAll()
	}
	sh := g.shapeIn(rt, v)
	me := indexOf(sh.ranks, v.rankOf[rt.self])
	if me < 0 {
		return nil, fmt.Errorf("pgas: %s: rank %d: %w", op, v.rankOf[rt.self], ErrNotMember)
	}
	if sh.vacant >= 0 {
		// Every member sees the same view, so all of them fail here at
		// once, rather than some waiting on others that the vacant rank
		// left waiting (two-level collectives route through leaders).
		return nil, fmt.Errorf("pgas: %s: rank %d: %w", op, sh.vacant, ErrVacant)
	}
	seq, err := g.next(v.epoch)
	if err != nil {
		return nil, err
	}
	return &coll{rt: rt, g: g, v: v, ranks: sh.ranks, me: me, topo: sh.topo, seq: seq, op: op}, nil
}

func (c *coll) send(ctx context.Context, idx int, round uint64, data []byte) error {
	rank := c.ranks[idx]
	proc, err := c.rt.procOf(c.v, rank, c.op)
	if err != nil {
		return err
	}
	h := transport.Header{Type: transport.FrameColl, Seg: c.g.tag, Off: c.seq, A: round, Epoch: c.v.epoch}
	c.rt.stampAck(proc, &h)
	c.rt.frames.to(proc).Sent(uint8(h.Type), len(data))
	err = c.rt.sendErr(ctx, c.rt.tr.Send(ctx, proc, &h, data), rank, proc, c.op)
	if errors.Is(err, ErrTimeout) {
		c.g.timedOut(c.v.epoch)
	}
	return err
}

func (c *coll) recv(ctx context.Context, idx int, round uint64) ([]byte, error) {
	rank := c.ranks[idx]
	proc, err := c.rt.procOf(c.v, rank, c.op)
	if err != nil {
		return nil, err
	}
	k := mailKey{epoch: c.v.epoch, tag: c.g.tag, seq: c.seq, round: round, from: proc}
	d, err := c.rt.mail.wait(ctx, c.rt, k, rank, c.op)
	if errors.Is(err, ErrTimeout) {
		c.g.timedOut(c.v.epoch)
	}
	return d, err
}

// exchange sends data to idx and receives what idx sent in the same round.
func (c *coll) exchange(ctx context.Context, idx int, data []byte) ([]byte, error) {
	c.round++
	if err := c.send(ctx, idx, c.round, data); err != nil {
		return nil, err
	}
	return c.recv(ctx, idx, c.round)
}

// Barrier returns once every member of g has entered it: dissemination
// (ceil(log2 n) rounds of one message each), or from treeMin members on
// up and down a binomial tree (2 messages each); among host leaders only
// when the members share hosts (see hier.go).
func (rt *Runtime) Barrier(ctx context.Context, g *Group) error {
	defer collStart("barrier").done()
	c, err := rt.startColl(g, "barrier")
	if err != nil {
		return err
	}
	if a, st, err := c.shmArea(ctx); err != nil {
		return err
	} else if a != nil {
		if done, err := c.shmBarrier(ctx, a, st); done || err != nil {
			return err
		}
	}
	if t := c.topo; t.twoLevel() {
		if _, err := c.hostGather(ctx, t, []byte{}); err != nil {
			return err
		}
		_, err := c.hostDown(ctx, t, nil)
		return err
	}
	n := len(c.ranks)
	if n >= treeMin {
		// Up a binomial tree to position 0, then down it: 2 messages per
		// member where dissemination sends log2 n.
		t := c.groupTree()
		if err := c.treeUp(ctx, t, nil, nil); err != nil {
			return err
		}
		return c.binomial(ctx, t, 0, nil, roundTreeDown)
	}
	for d := 1; d < n; d *= 2 {
		c.round++
		if err := c.send(ctx, (c.me+d)%n, c.round, nil); err != nil {
			return err
		}
		if _, err := c.recv(ctx, (c.me-d+n)%n, c.round); err != nil {
			return err
		}
	}
	return nil
}

// AllreduceBytes combines buf across g in place with combine, which must
// set dst to "dst op src" where dst is always the operand of the lower
// group position. The order of combination depends only on the group size,
// never on timing, placement or transport, so every member gets the same
// bits, run after run (recursive doubling, with the ranks above the largest
// power of two folded into their lower neighbours first). When the members
// share hosts and the vectors are small (group size x len(buf) at most 256
// KiB), it runs in two levels: the host leaders gather the vectors and
// each reduces them in that same order (see hier.go).
func (rt *Runtime) AllreduceBytes(ctx context.Context, g *Group, buf []byte, combine func(dst, src []byte)) error {
	_, err := rt.allreduceRanks(ctx, g, buf, combine)
	return err
}

// allreduceRanks is AllreduceBytes that also returns the members, in
// group order (the view's table: read-only).
func (rt *Runtime) allreduceRanks(ctx context.Context, g *Group, buf []byte, combine func(dst, src []byte)) ([]int, error) {
	defer collStart("allreduce").done()
	c, err := rt.startColl(g, "allreduce")
	if err != nil {
		return nil, err
	}
	if len(c.ranks) == 1 {
		return c.ranks, nil
	}
	if a, st, err := c.shmArea(ctx); err != nil {
		return nil, err
	} else if a != nil {
		if done, err := c.shmAllreduce(ctx, a, st, buf, combine); done || err != nil {
			return c.ranks, err
		}
	}
	return c.ranks, c.allreduceFrames(ctx, buf, combine)
}

// allreduceFrames is AllreduceBytes through frames.
func (c *coll) allreduceFrames(ctx context.Context, buf []byte, combine func(dst, src []byte)) error {
	n, i := len(c.ranks), c.me
	if t := c.topo; t.twoLevel() && n*len(buf) <= hierGatherMax {
		blocks, err := c.hostGather(ctx, t, buf)
		if err != nil {
			return err
		}
		if blocks != nil {
			copy(buf, reduceInOrder(blocks, combine))
		}
		out, err := c.hostDown(ctx, t, buf)
		if err != nil {
			return err
		}
		if len(out) != len(buf) {
			return c.sizeErr(len(out), len(buf))
		}
		copy(buf, out)
		return nil
	}
	p := 1
	for p*2 <= n {
		p *= 2
	}
	rem := n - p
	const foldRound, finalRound = 1 << 32, 1<<32 + 1
	check := func(d []byte) error {
		if len(d) != len(buf) {
			return fmt.Errorf("pgas: allreduce: %d bytes from a peer, %d here: every member must pass the same size: %w", len(d), len(buf), ErrInvalid)
		}
		return nil
	}
	var v int
	if i < 2*rem {
		if i%2 == 1 {
			if err := c.send(ctx, i-1, foldRound, buf); err != nil {
				return err
			}
			d, err := c.recv(ctx, i-1, finalRound)
			if err != nil {
				return err
			}
			if err := check(d); err != nil {
				return err
			}
			copy(buf, d)
			return nil
		}
		d, err := c.recv(ctx, i+1, foldRound)
		if err != nil {
			return err
		}
		if err := check(d); err != nil {
			return err
		}
		combine(buf, d)
		v = i / 2
	} else {
		v = i - rem
	}
	if n >= treeMin {
		// The same combinations as recursive doubling, over a binomial
		// tree: up to virtual position 0 (at step m, position v with
		// v%2m == 0 combines its [v, v+m) with v+m's [v+m, v+2m), the
		// lower operand dst), then the result down the tree. 2 messages
		// per member where recursive doubling sends log2 n.
		virt := tree{n: p, me: v, at: func(w int) int { // virtual position -> group position
			if w < rem {
				return 2 * w
			}
			return w + rem
		}}
		if err := c.treeUp(ctx, virt, buf, func(d []byte) error {
			if err := check(d); err != nil {
				return err
			}
			combine(buf, d)
			return nil
		}); err != nil {
			return err
		}
		if err := c.binomial(ctx, virt, 0, buf, roundTreeDown); err != nil {
			return err
		}
	} else {
		if err := c.doubling(ctx, v, p, rem, buf, combine, check); err != nil {
			return err
		}
	}
	if i < 2*rem {
		return c.send(ctx, i+1, finalRound, buf)
	}
	return nil
}

// doubling is the recursive doubling of AllreduceBytes among the p
// virtual positions (v is this member's), after the fold of rem members.
func (c *coll) doubling(ctx context.Context, v, p, rem int, buf []byte, combine func(dst, src []byte), check func([]byte) error) error {
	var tmp []byte
	for mask := 1; mask < p; mask <<= 1 {
		pv := v ^ mask
		pi := pv + rem
		if pv < rem {
			pi = pv * 2
		}
		d, err := c.exchange(ctx, pi, buf)
		if err != nil {
			return err
		}
		if err := check(d); err != nil {
			return err
		}
		if v < pv {
			combine(buf, d)
		} else {
			if tmp == nil {
				tmp = make([]byte, len(buf))
			}
			copy(tmp, d)
			combine(tmp, buf)
			copy(buf, tmp)
		}
	}
	return nil
}

// Bcast copies root's buf into buf on every member of g. root is a rank;
// every member passes a buf of the same size. A large buf (256 KiB and
// more, over more than two members) goes as a pipeline of chunks along a
// chain ordered by host; a smaller one down a binomial tree, in two levels
// (across hosts, then inside each) when the members share hosts.
func (rt *Runtime) Bcast(ctx context.Context, g *Group, buf []byte, root int) error {
	defer collStart("broadcast").done()
	c, err := rt.startColl(g, "bcast")
	if err != nil {
		return err
	}
	n := len(c.ranks)
	ri := indexOf(c.ranks, root)
	if ri < 0 {
		return fmt.Errorf("pgas: bcast: root %d not in group: %w", root, ErrInvalid)
	}
	if a, st, err := c.shmArea(ctx); err != nil {
		return err
	} else if a != nil {
		if done, err := c.shmBcast(ctx, a, st, buf, ri); done || err != nil {
			return err
		}
	}
	t := c.topo
	switch {
	case n > 2 && len(buf) >= pipelineMin:
		return c.bcastPipeline(ctx, t, buf, ri)
	case t.twoLevel():
		return c.bcastHosts(ctx, t, buf, ri)
	}
	return c.binomial(ctx, c.groupTree(), ri, buf, 0)
}

// AllgatherBytes concatenates every member's block, in group order, into
// out, which must hold Size()*len(block) bytes: in two levels when the
// members share hosts and out is small (at most 256 KiB), otherwise by a
// ring ordered by host.
func (rt *Runtime) AllgatherBytes(ctx context.Context, g *Group, block, out []byte) error {
	_, _, err := rt.allgather(ctx, g, block, func(int) []byte { return out })
	return err
}

// allgather is AllgatherBytes with the output allocated by alloc(number of
// members) once the members are known, and the members returned with it:
// GroupAll's members are those of the view the collective runs in.
func (rt *Runtime) allgather(ctx context.Context, g *Group, block []byte, alloc func(n int) []byte) ([]byte, []int, error) {
	defer collStart("allgather").done()
	c, err := rt.startColl(g, "allgather")
	if err != nil {
		return nil, nil, err
	}
	n, b := len(c.ranks), len(block)
	out := alloc(n)
	if len(out) != n*b {
		return nil, nil, fmt.Errorf("pgas: allgather: out holds %d bytes, want %d: %w", len(out), n*b, ErrInvalid)
	}
	copy(out[c.me*b:], block)
	t := c.topo
	if t.twoLevel() && n*b <= hierGatherMax {
		blocks, err := c.hostGather(ctx, t, block)
		if err != nil {
			return nil, nil, err
		}
		for i, d := range blocks {
			copy(out[i*b:], d)
		}
		d, err := c.hostDown(ctx, t, out)
		if err != nil {
			return nil, nil, err
		}
		if len(d) != len(out) {
			return nil, nil, fmt.Errorf("pgas: allgather: %d bytes from the host's leader, want %d: %w", len(d), len(out), ErrInvalid)
		}
		copy(out, d)
		return out, c.ranks, nil
	}
	switch {
	case n*b <= hierGatherMax && n >= treeMin:
		return out, c.ranks, c.treeGather(ctx, out, b)
	case n*b <= hierGatherMax:
		return out, c.ranks, c.bruck(ctx, out, b)
	}
	// A ring ordered by host, rack by rack: it crosses each host (and
	// rack) boundary once.
	ring := make([]int, 0, n)
	for _, h := range t.hostsByRack(0) {
		ring = append(ring, t.hosts[h]...)
	}
	pos := 0
	for i, m := range ring {
		if m == c.me {
			pos = i
		}
	}
	for s := 0; s < n-1; s++ {
		sendIdx := ring[(pos-s+n)%n]
		recvIdx := ring[(pos-s-1+n)%n]
		if err := c.send(ctx, ring[(pos+1)%n], uint64(s), out[sendIdx*b:(sendIdx+1)*b]); err != nil {
			return nil, nil, err
		}
		d, err := c.recv(ctx, ring[(pos-1+n)%n], uint64(s))
		if err != nil {
			return nil, nil, err
		}
		if len(d) != b {
			return nil, nil, fmt.Errorf("pgas: allgather: block of %d bytes from a peer, %d here: %w", len(d), b, ErrInvalid)
		}
		copy(out[recvIdx*b:], d)
	}
	return out, c.ranks, nil
}
