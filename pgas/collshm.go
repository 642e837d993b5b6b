package pgas

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gaspigo/gaspigo/segments"
	"github.com/gaspigo/gaspigo/transport"
)

// Collectives in shared memory (docs/design.md §6.3). When every member
// of a group sits on this host and segments are shared (DirectShm), a
// barrier, a small allreduce or a small broadcast meets in a collective
// area: memory of the group's leader (its lowest member), which the other
// members map. Each member writes its block and then a stamp naming the
// collective (epoch and group sequence number) into its own line of the
// area; the leader waits for every stamp, reduces the blocks in the order
// of the flat algorithm (reduceInOrder: the result bits are those of the
// frames' way), writes the result and releases the members with its own
// stamp. A waiter polls for a while when the host has a CPU per rank
// (Runtime.noteSpin), then sets its sleep word and parks: whoever stores a
// stamp it waits for and sees the word sends it a frame (ctlCollWake).
//
// A member stores its stamp for a collective only after it has read the
// result of the one before, and the leader writes a result only after
// every stamp of its collective arrived, so a result is never overwritten
// before every member has it, and one area serves every collective of the
// group in an epoch.
//
// Areas belong to an epoch: the first eligible collective of a group in
// an epoch maps the leader's area, then the members agree (a one-word
// allreduce through frames, the one collective of the epoch that pays
// for it) that every one of them mapped it; if any could not, the group
// uses frames for the rest of the epoch. A view change retires the areas
// of older epochs: a process of an older epoch stores its stamps where
// nobody waits, and a stamp carries its epoch besides.

// Limits of the collectives in shared memory.
const (
	collShmMax   = 64      // members at most: above it the trees of frames scale better
	collBlock    = 4 << 10 // bytes of each member's block: larger vectors go by frames
	ctlCollWake  = 4       // a FrameControl: a stamp this process may wait for was stored
	collLineSize = 64
)

// collArea is the memory of one group's collectives in one epoch, as the
// leader owns it or a member maps it. Layout: the leader's release stamp,
// then one line per member (its stamp, then its sleep word), then the
// members' blocks, then the result block.
type collArea struct {
	mem     []byte
	n       int
	owned   *segments.Segment      // the leader's; nil for a member's mapping
	backing *segments.MemfdBacking // the leader's

	// vecs and leaves are the leader's scratch for a reduction (scratch).
	vecs, leaves [][]byte

	users atomic.Int32 // collectives using mem now
	stale atomic.Bool  // retired: no new user; the last user frees it
	freed atomic.Bool
}

func collAreaSize(n int) int64 {
	return int64(collLineSize*(1+n) + collBlock*(n+1))
}

func (a *collArea) release() *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&a.mem[0]))
}

// abort holds the stamp of a collective the leader gave up on, and lost
// the rank whose loss made it give up: the members it released then fail
// too, rather than wait for a result that will not come.
func (a *collArea) abort() *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&a.mem[8]))
}

func (a *collArea) lostRank() *atomic.Int64 {
	return (*atomic.Int64)(unsafe.Pointer(&a.mem[16]))
}

func (a *collArea) stamp(i int) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&a.mem[collLineSize*(1+i)]))
}

func (a *collArea) sleep(i int) *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&a.mem[collLineSize*(1+i)+8]))
}

func (a *collArea) block(i int) []byte {
	off := collLineSize*(1+a.n) + collBlock*i
	return a.mem[off : off+collBlock : off+collBlock]
}

func (a *collArea) result() []byte { return a.block(a.n) }

// scratch returns the blocks cut to size bytes, and leaves for
// reduceLeaves, made once per area: the leader's collectives of a group
// run one at a time.
func (a *collArea) scratch(size int) (vecs, leaves [][]byte) {
	if a.vecs == nil {
		a.vecs = make([][]byte, a.n)
		a.leaves = make([][]byte, leafCount(a.n))
		for v := range a.leaves {
			a.leaves[v] = asBytes(make([]uint64, collBlock/8))
		}
	}
	for i := range a.vecs {
		a.vecs[i] = a.block(i)[:size]
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
	epoch uint32
	area  *collArea // nil: frames this epoch
}

// collAreas are the areas this process leads, by key, for provideMemory.
type collAreas struct {
	mu    sync.Mutex
	owned map[uint64]*collArea
	wake  chan struct{} // closed and replaced by wakeColl
}

// shmArea returns the area the collective c runs in, pinned (the caller
// calls a.done), or nil when it runs by frames: the group is not all on
// this host, has more than collShmMax members, size (the bytes of each
// member's vector) exceeds a block, or a member could not map the area.
func (c *coll) shmArea(ctx context.Context, size int) (*collArea, error) {
	rt := c.rt
	n := len(c.ranks)
	if n < 2 || n > collShmMax || size > collBlock || !rt.directOn() || rt.cfg.Hosts == nil || len(c.topo.hosts) != 1 {
		return nil, nil
	}
	c.g.mu.Lock()
	st := c.g.shm
	c.g.mu.Unlock()
	if st != nil && st.epoch == c.v.epoch {
		if st.area == nil || !st.area.use() {
			return nil, nil
		}
		return st.area, nil
	}
	a, err := rt.mapArea(c)
	if err != nil {
		rt.log.Debug("collective area not mapped: the group uses frames this epoch", "tag", c.g.tag, "epoch", c.v.epoch, "err", err)
	}
	// Every member must go the same way: agree, through frames, that all
	// of them mapped the area.
	flag := make([]byte, 8)
	if a != nil {
		binary.LittleEndian.PutUint64(flag, 1)
	}
	ac, err := rt.startColl(c.g, "allreduce")
	if err != nil {
		if a != nil {
			a.retire()
		}
		return nil, err
	}
	err = ac.allreduceFrames(ctx, flag, func(dst, src []byte) {
		binary.LittleEndian.PutUint64(dst, min(binary.LittleEndian.Uint64(dst), binary.LittleEndian.Uint64(src)))
	})
	if err == nil && binary.LittleEndian.Uint64(flag) == 0 && a != nil {
		a.retire()
		a = nil
	}
	if err != nil {
		if a != nil {
			a.retire()
		}
		return nil, err
	}
	c.g.mu.Lock()
	if old := c.g.shm; old != nil && old.area != nil {
		old.area.retire()
	}
	c.g.shm = &groupShm{epoch: c.v.epoch, area: a}
	c.g.mu.Unlock()
	if a == nil || !a.use() {
		return nil, nil
	}
	return a, nil
}

// mapArea makes (the leader) or maps (a member) the area of c's group in
// c's epoch.
func (rt *Runtime) mapArea(c *coll) (*collArea, error) {
	n := len(c.ranks)
	key := collKey(c.g.tag, n, c.v.epoch)
	if c.me == 0 {
		return rt.ownArea(key, n)
	}
	leader, err := rt.procOf(c.v, c.ranks[0], c.op)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(rt.life, shareTimeout)
	fd, _, err := rt.tr.(transport.MemorySharer).FetchMemory(ctx, leader, key)
	cancel()
	if err != nil {
		return nil, err
	}
	mem, err := segments.MapFD(fd, collAreaSize(n))
	unix.Close(fd)
	if err != nil {
		return nil, err
	}
	return &collArea{mem: mem, n: n}, nil
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
	if uint32(key>>32) != epoch || n < 2 || n > collShmMax {
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

// stampOf names collective c in its area: epoch, then group sequence.
func (c *coll) stampOf() uint64 { return uint64(c.v.epoch)<<40 | c.seq }

// wakeMember tells member i that a stamp it may wait for is stored, if
// it sleeps.
func (c *coll) wakeMember(ctx context.Context, a *collArea, i int) {
	if a.sleep(i).Load() == 0 {
		return
	}
	if p, err := c.rt.procOf(c.v, c.ranks[i], c.op); err == nil {
		h := transport.Header{Type: transport.FrameControl, A: ctlCollWake}
		c.rt.send(ctx, p, &h, nil)
	}
}

// await waits until w holds at least s, as member me of the area: it
// polls, then sleeps until woken; it fails when a member's connection is
// lost, the view changes, ctx ends or the runtime closes.
func (c *coll) await(ctx context.Context, a *collArea, w *atomic.Uint64, s uint64) error {
	rt := c.rt
	if w.Load() >= s {
		return nil
	}
	if spin := rt.noteSpin; spin > 0 {
		deadline := time.Now().Add(spin)
		for i := 1; ; i++ {
			if w.Load() >= s {
				return nil
			}
			if i&255 == 0 {
				if time.Now().After(deadline) || i >= 1<<16 {
					break
				}
				if i&4095 == 0 {
					runtime.Gosched()
				}
			}
		}
	}
	sleep := a.sleep(c.me)
	defer sleep.Store(0)
	for {
		ch := rt.collWakeChan()
		sleep.Store(1)
		if w.Load() >= s {
			return nil
		}
		if err := c.lost(); err != nil {
			return err
		}
		select {
		case <-ch:
		case <-ctx.Done():
			c.g.timedOut(c.v.epoch)
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

// meet runs one collective in area a: each member puts its block (put,
// may be nil) and its stamp; the leader waits for all of them, makes the
// result (lead, may be nil) and releases the members, which then take it
// (take, may be nil). a is pinned, and unpinned on return.
func (c *coll) meet(ctx context.Context, a *collArea, put func(block []byte), lead func(a *collArea), take func(result []byte)) error {
	defer a.done()
	c.rt.stats.ShmCollectives.Add(1)
	s := c.stampOf()
	if c.me != 0 {
		if put != nil {
			put(a.block(c.me))
		}
		a.stamp(c.me).Store(s)
		c.wakeMember(ctx, a, 0)
		if err := c.await(ctx, a, a.release(), s); err != nil {
			return err
		}
		if a.abort().Load() == s {
			return &RankError{Rank: int(a.lostRank().Load()), Op: c.op, Err: ErrRankFailed}
		}
		if take != nil {
			take(a.result())
		}
		return nil
	}
	if put != nil {
		put(a.block(0))
	}
	for i := 1; i < a.n; i++ {
		if err := c.await(ctx, a, a.stamp(i), s); err != nil {
			var re *RankError
			if errors.As(err, &re) {
				// Release the others with the news.
				a.lostRank().Store(int64(re.Rank))
				a.abort().Store(s)
				c.releaseAll(ctx, a, s)
			}
			return err
		}
	}
	if lead != nil {
		lead(a)
	}
	c.releaseAll(ctx, a, s)
	if take != nil {
		take(a.result())
	}
	return nil
}

// releaseAll stores the leader's stamp s and wakes the members that sleep.
func (c *coll) releaseAll(ctx context.Context, a *collArea, s uint64) {
	a.release().Store(s)
	for i := 1; i < a.n; i++ {
		c.wakeMember(ctx, a, i)
	}
}

func (c *coll) shmBarrier(ctx context.Context, a *collArea) error {
	return c.meet(ctx, a, nil, nil, nil)
}

// shmAllreduce combines in the order of the flat algorithm, so that the
// bits are those of allreduceFrames.
func (c *coll) shmAllreduce(ctx context.Context, a *collArea, buf []byte, combine func(dst, src []byte)) error {
	return c.meet(ctx, a,
		func(block []byte) { copy(block, buf) },
		func(a *collArea) {
			vecs, leaves := a.scratch(len(buf))
			copy(a.result(), reduceLeaves(leaves, vecs, combine))
		},
		func(result []byte) { copy(buf, result) })
}

func (c *coll) shmBcast(ctx context.Context, a *collArea, buf []byte, root int) error {
	return c.meet(ctx, a,
		func(block []byte) {
			if c.me == root {
				copy(block, buf)
			}
		},
		func(a *collArea) { copy(a.result(), a.block(root)[:len(buf)]) },
		func(result []byte) { copy(buf, result) })
}
