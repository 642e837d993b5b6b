package pgas

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gaspigo/gaspigo/segments"
	"github.com/gaspigo/gaspigo/transport"
)

// Collectives in shared memory (docs/design.md §9.3.1). When every member
// of a group sits on this host (by host label) and segments are shared
// (DirectShm), a barrier, a small allreduce or a small broadcast meets in
// a collective area: a memfd of the group's lowest member, which the
// others map on their first such collective of the epoch. A member writes
// its block, then a stamp counting the group's collectives in the area,
// into its own line; then it waits until every member's stamp reached its
// own, and reads what it needs: every member reduces all the blocks in the
// order of the flat algorithm (reduceInOrder: the bits of the frames'
// way), so there is no leader to wait for. A waiter polls for a while
// as NotifyWaitSome does (Runtime.notePoll), then sets its sleep
// word and parks; whoever stamps and sees the word sends it a frame
// (ctlCollWake).
//
// Blocks are double-buffered by the stamp's parity: a member writes its
// block for collective k+2 only after it saw every stamp of k+1, and a
// member stamps k+1 only after it read everything of k, so no block is
// overwritten while someone reads it. A member that times out has stamped
// already, so a member that enters late completes, as over frames, where
// the early one's message was sent.
//
// The decision to meet in an area depends only on what every member
// knows alike (the view, the host labels, the size, the job's settings),
// so all members go the same way. Areas belong to an epoch: the key a
// member asks for names it, and a view change retires the areas of older
// epochs, so a process of an older epoch stamps where nobody waits.

// Limits of the collectives in shared memory.
const (
	collShmMax   = 64      // members at most: above it the trees of frames scale better
	collBlock    = 4 << 10 // bytes of each member's block: larger vectors go by frames
	ctlCollWake  = 4       // a FrameControl: a stamp this process may wait for was stored
	collLineSize = 64
)

// collArea is the memory of one group's collectives in one epoch, as its
// owner (the group's lowest member; "leader" below) has it or another
// member maps it. Layout: a line unused, then one line per member (its
// stamp, then its sleep word), then two blocks per member (by the
// stamp's parity).
type collArea struct {
	mem     []byte
	n       int
	owned   *segments.Segment      // the leader's; nil for a member's mapping
	backing *segments.MemfdBacking // the leader's

	// vecs and leaves are this member's scratch for a reduction (scratch).
	vecs, leaves [][]byte

	users atomic.Int32 // collectives using mem now
	stale atomic.Bool  // retired: no new user; the last user frees it
	freed atomic.Bool
}

func collAreaSize(n int) int64 {
	return int64(collLineSize*(1+n) + 2*collBlock*n)
}

func (a *collArea) stamp(i int) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&a.mem[collLineSize*(1+i)]))
}

func (a *collArea) sleep(i int) *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&a.mem[collLineSize*(1+i)+8]))
}

// block is member i's block for the collective stamped k.
func (a *collArea) block(i int, k uint64) []byte {
	off := collLineSize*(1+a.n) + collBlock*(2*i+int(k&1))
	return a.mem[off : off+collBlock : off+collBlock]
}

// scratch returns the blocks of collective k cut to size bytes, and
// leaves for reduceLeaves, made once per area: a group's collectives run
// one at a time.
func (a *collArea) scratch(k uint64, size int) (vecs, leaves [][]byte) {
	if a.vecs == nil {
		a.vecs = make([][]byte, a.n)
		a.leaves = make([][]byte, leafCount(a.n))
		for v := range a.leaves {
			a.leaves[v] = asBytes(make([]uint64, collBlock/8))
		}
	}
	for i := range a.vecs {
		a.vecs[i] = a.block(i, k)[:size]
	}
	for v := range a.leaves {
		a.leaves[v] = a.leaves[v][:size]
	}
	return a.vecs, a.leaves
}

// use pins the area for one collective; false when it was retired.
func (a *collArea) use() bool {
	a.users.Add(1)
	if a.stale.Load() {
		a.done()
		return false
	}
	return true
}

// done unpins it, freeing it when it was retired meanwhile.
func (a *collArea) done() {
	if a.users.Add(-1) == 0 && a.stale.Load() {
		a.free()
	}
}

// retire stops new users; the memory goes with the last one.
func (a *collArea) retire() {
	a.stale.Store(true)
	if a.users.Load() == 0 {
		a.free()
	}
}

func (a *collArea) free() {
	if !a.freed.CompareAndSwap(false, true) {
		return
	}
	if a.owned != nil {
		a.owned.Close()
	} else {
		segments.UnmapShared(a.mem)
	}
}

// collKey names an area in a memory request: the group's tag, the
// number of members, the epoch, and collKind.
func collKey(tag uint16, n int, epoch uint32) uint64 {
	return uint64(tag) | collKind | uint64(n)<<18 | uint64(epoch)<<32
}

const collKind = 2 << 16

// groupShm is what a group (on one runtime) knows of its area in one
// epoch.
type groupShm struct {
	epoch  uint32
	area   *collArea
	k      uint64 // the stamp of the group's last collective in the area
	nudged []bool // members sent a frame already (nudge), by index
}

// collAreas are the areas this process leads, by key, for provideMemory.
type collAreas struct {
	mu    sync.Mutex
	owned map[uint64]*collArea
	wake  chan struct{} // closed and replaced by wakeColl
}

// shmArea returns the area the collective c runs in, pinned (the caller
// calls a.done), and c's stamp there; a nil area when it runs by frames:
// the group is not all on this host (by label), has more than
// collShmMax members, or size (the bytes of each member's vector)
// exceeds a block. A member that cannot map the area fails the
// collective: the others meet there.
func (c *coll) shmArea(ctx context.Context, size int) (*collArea, *groupShm, error) {
	rt := c.rt
	n := len(c.ranks)
	if n < 2 || n > collShmMax || size > collBlock || !rt.directOn() || rt.cfg.Hosts == nil || len(c.topo.hosts) != 1 {
		return nil, nil, nil
	}
	c.g.mu.Lock()
	defer c.g.mu.Unlock()
	st := c.g.shm
	if st == nil || st.epoch != c.v.epoch {
		a, err := rt.mapArea(ctx, c)
		if err != nil {
			return nil, nil, err
		}
		if st != nil {
			st.area.retire()
		}
		st = &groupShm{epoch: c.v.epoch, area: a, nudged: make([]bool, n)}
		c.g.shm = st
	}
	if !st.area.use() {
		return nil, nil, fmt.Errorf("pgas: %s: the collective area of epoch %d is retired: %w", c.op, c.v.epoch, ErrStaleEpoch)
	}
	st.k++
	return st.area, st, nil
}

// mapArea makes (the leader) or maps (a member) the area of c's group in
// c's epoch.
func (rt *Runtime) mapArea(ctx context.Context, c *coll) (*collArea, error) {
	n := len(c.ranks)
	key := collKey(c.g.tag, n, c.v.epoch)
	if c.me == 0 {
		return rt.ownArea(key, n)
	}
	leader, err := rt.procOf(c.v, c.ranks[0], c.op)
	if err != nil {
		return nil, err
	}
	// The leader refuses a process it does not see holding a rank: one
	// promoted in a view it has not applied yet. Ask again until it has,
	// as a frame from a sender ahead waits in its mailbox.
	pause, giveUp := time.Millisecond, time.Now().Add(shareTimeout)
	for {
		fctx, cancel := context.WithTimeout(ctx, shareTimeout)
		fd, _, ferr := rt.tr.(transport.MemorySharer).FetchMemory(fctx, leader, key)
		cancel()
		if ferr == nil {
			mem, err := segments.MapFD(fd, collAreaSize(n))
			unix.Close(fd)
			if err != nil {
				return nil, fmt.Errorf("pgas: %s: map the collective area of rank %d: %w", c.op, c.ranks[0], err)
			}
			return &collArea{mem: mem, n: n}, nil
		}
		if errors.Is(ferr, transport.ErrPeerDown) {
			return nil, rt.sendErr(ctx, ferr, c.ranks[0], leader, c.op)
		}
		if err := c.lost(); err != nil {
			return nil, err
		}
		if time.Now().After(giveUp) {
			return nil, fmt.Errorf("pgas: %s: rank %d did not hand over its collective area for %v (set PGAS_SHM_SEGMENTS=0 to run collectives through frames): %w", c.op, c.ranks[0], shareTimeout, ferr)
		}
		select {
		case <-time.After(pause):
			pause = min(2*pause, 100*time.Millisecond)
		case <-ctx.Done():
			return nil, ctxError(ctx, c.op)
		case <-rt.closed:
			return nil, ErrClosed
		}
		rt.log.Debug("collective area refused; asking again", "leader", leader, "err", ferr)
	}
}

// ownArea returns the area this process leads under key, made on first
// use (by its own collective or a member's request).
func (rt *Runtime) ownArea(key uint64, n int) (*collArea, error) {
	rt.coll.mu.Lock()
	defer rt.coll.mu.Unlock()
	if a := rt.coll.owned[key]; a != nil {
		return a, nil
	}
	b := segments.NewMemfdBacking()
	seg, err := segments.New(0, collAreaSize(n), segments.Options{Backing: b, Notifications: 1})
	if err != nil {
		return nil, err
	}
	a := &collArea{mem: seg.Bytes(), n: n, owned: seg, backing: b}
	if rt.coll.owned == nil {
		rt.coll.owned = map[uint64]*collArea{}
	}
	rt.coll.owned[key] = a
	return a, nil
}

// provideArea answers a member's request for an area this process leads
// (provideMemory, key of collKind); the caller checked that the member
// holds a rank in the current view.
func (rt *Runtime) provideArea(key uint64, epoch uint32) (int, uint64, error) {
	n := int(key>>18) & 0x3fff
	if uint32(key>>32) < epoch || n < 2 || n > collShmMax {
		// (A member ahead of this process is fine: the area waits for it.)
		return -1, 0, fmt.Errorf("pgas: no collective area of %d members in epoch %d (this process is in %d): %w", n, uint32(key>>32), epoch, ErrStaleEpoch)
	}
	a, err := rt.ownArea(key, n)
	if err != nil {
		return -1, 0, err
	}
	fd, err := a.backing.Dup(a.mem)
	return fd, 0, err
}

// retireAreas retires the areas of epochs before epoch (applyView; all
// of them at Close, epoch ^0).
func (rt *Runtime) retireAreas(epoch uint32) {
	rt.coll.mu.Lock()
	for k, a := range rt.coll.owned {
		if uint32(k>>32) < epoch || epoch == ^uint32(0) {
			a.retire()
			delete(rt.coll.owned, k)
		}
	}
	rt.coll.mu.Unlock()
	rt.wakeColl()
}

// wakeColl wakes this process's collectives waiting in an area, to look
// again (a stamp stored, a peer lost, a view applied).
func (rt *Runtime) wakeColl() {
	rt.coll.mu.Lock()
	if rt.coll.wake != nil {
		close(rt.coll.wake)
		rt.coll.wake = nil
	}
	rt.coll.mu.Unlock()
}

func (rt *Runtime) collWakeChan() <-chan struct{} {
	rt.coll.mu.Lock()
	defer rt.coll.mu.Unlock()
	if rt.coll.wake == nil {
		rt.coll.wake = make(chan struct{})
	}
	return rt.coll.wake
}

// nudge sends member i a frame (ctlCollWake): to wake it when it
// sleeps, and, once per member and area, to find out whether it is
// there at all: a member this process never exchanged frames with has no
// connection whose loss would tell.
func (c *coll) nudge(ctx context.Context, i int) {
	rank := c.ranks[i]
	p, err := c.rt.procOf(c.v, rank, c.op)
	if err != nil {
		return
	}
	h := transport.Header{Type: transport.FrameControl, A: ctlCollWake}
	c.rt.sendErr(ctx, c.rt.send(ctx, p, &h, nil), rank, p, c.op) // a lost peer is noted there
}

// await waits until member i's stamp reached k: it polls, then sleeps
// until woken; it fails when a member's connection is lost, the view
// changes, ctx ends or the runtime closes.
func (c *coll) await(ctx context.Context, a *collArea, st *groupShm, i int, k uint64) error {
	rt := c.rt
	w := a.stamp(i)
	if w.Load() >= k {
		return nil
	}
	if segments.Poll(rt.notePoll, func() bool { return w.Load() >= k }) {
		return nil
	}
	if !st.nudged[i] {
		st.nudged[i] = true
		c.nudge(ctx, i)
	}
	sleep := a.sleep(c.me)
	defer sleep.Store(0)
	for {
		ch := rt.collWakeChan()
		sleep.Store(1)
		if w.Load() >= k {
			return nil
		}
		if err := c.lost(); err != nil {
			return err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			if err := c.lost(); err != nil {
				return err // what ended ctx, most likely (a program that cancels on a failure)
			}
			c.g.timedOut(c.v.epoch)
			if rt.det != nil {
				rt.det.Hint(c.v.ranks[c.ranks[i]]) // a timed-out collective is a hint, never a verdict
			}
			return ctxError(ctx, c.op)
		case <-rt.closed:
			return ErrClosed
		}
	}
}

// lost says why a collective in an area cannot finish: a member's
// connection lost, or a newer view.
func (c *coll) lost() error {
	rt := c.rt
	if err := rt.halted(); err != nil {
		return err
	}
	if rt.member != nil && rt.view.Load().epoch != c.v.epoch {
		return fmt.Errorf("pgas: %s: epoch %d ended during the collective: %w", c.op, c.v.epoch, ErrStaleEpoch)
	}
	for _, r := range c.ranks {
		p := c.v.ranks[r]
		if p != rt.self && rt.peers.get(p).downFlag.Load() {
			return &RankError{Rank: r, Op: c.op, Err: ErrRankFailed}
		}
	}
	return nil
}

// meet runs collective k of the area: this member writes its block (put,
// may be nil) and its stamp, wakes the members that sleep, waits for
// every member's stamp, then reads (take, may be nil). a is pinned, and
// unpinned on return.
func (c *coll) meet(ctx context.Context, a *collArea, st *groupShm, put func(block []byte), take func(k uint64)) error {
	defer a.done()
	c.rt.stats.ShmCollectives.Add(1)
	k := st.k
	if put != nil {
		put(a.block(c.me, k))
	}
	a.stamp(c.me).Store(k)
	for i := range a.n {
		if i != c.me && a.sleep(i).Load() != 0 {
			c.nudge(ctx, i)
		}
	}
	for i := range a.n {
		if i == c.me {
			continue
		}
		if err := c.await(ctx, a, st, i, k); err != nil {
			return err
		}
	}
	if take != nil {
		take(k)
	}
	return nil
}

func (c *coll) shmBarrier(ctx context.Context, a *collArea, st *groupShm) error {
	return c.meet(ctx, a, st, nil, nil)
}

// shmAllreduce: every member combines every block in the order of the
// flat algorithm, so that the bits are those of allreduceFrames.
func (c *coll) shmAllreduce(ctx context.Context, a *collArea, st *groupShm, buf []byte, combine func(dst, src []byte)) error {
	return c.meet(ctx, a, st,
		func(block []byte) { copy(block, buf) },
		func(k uint64) {
			vecs, leaves := a.scratch(k, len(buf))
			copy(buf, reduceLeaves(leaves, vecs, combine))
		})
}

func (c *coll) shmBcast(ctx context.Context, a *collArea, st *groupShm, buf []byte, root int) error {
	return c.meet(ctx, a, st,
		func(block []byte) {
			if c.me == root {
				copy(block, buf)
			}
		},
		func(k uint64) { copy(buf, a.block(root, k)[:len(buf)]) })
}
