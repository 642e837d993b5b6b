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
// of a group sits on this host (by host label), there are at most
// collShmMax of them and segments are shared (DirectShm), the group's
// barriers, allreduces and broadcasts meet in a collective area: a memfd
// of the group's lowest member (its owner), which the others map on the
// group's first collective of the epoch. The members then agree, in a
// one-byte allreduce through frames, that every one of them has the area
// (openArea); if one has not (it could not map it, or its owner did not
// hand it over), the group's collectives go by frames for the rest of the
// epoch, on every member alike, so no member waits in an area for one
// that never comes.
//
// A collective writes this member's block (when its vector fits one),
// then its size, then a stamp counting the group's collectives in the
// area, into its own line; then it waits until every member's stamp
// reached its own. Every member compares the sizes (all see the same ones,
// so all fail alike with ErrInvalid when they differ) and reads what it
// needs: every member reduces all the blocks in the order of the flat
// algorithm (reduceLeaves: the bits of the frames' way), so there is no
// leader to wait for. A vector larger than a block goes by frames, after
// the members met in the area only to compare sizes: where one member's
// vector fits a block and another's does not, both learn it there rather
// than one waiting in the area and the other on frames. A waiter polls
// for a while as NotifyWaitSome does (Runtime.notePoll), then sets its
// sleep word and parks; whoever stamps and sees the word sends it a frame
// (ctlCollWake).
//
// Blocks and sizes are double-buffered by the stamp's parity: a member
// writes them for collective k+2 only after it saw every stamp of k+1,
// and a member stamps k+1 only after it read everything of k, so nothing
// is overwritten while someone reads it. A member that times out has
// stamped already, so a member that enters late completes, as over
// frames, where the early one's message was sent.
//
// Whether a group meets in an area depends only on what every member
// knows alike (the view, the host labels, the job's settings, and the
// agreement of the epoch's first collective), never on the size passed,
// so all members go the same way. Areas belong to an epoch: the key a
// member asks for names it, and a view change retires the areas of older
// epochs, so a process of an older epoch stamps where nobody waits.
//
// The area's memfd is sealed against shrinking and growing: a member
// given it cannot truncate it under the others' mappings (which would
// crash them with SIGBUS at their next access), and a member maps only a
// memfd of the area's size so sealed (mapCollArea).

// Limits of the collectives in shared memory.
const (
	collShmMax   = 64      // members at most: above it the trees of frames scale better
	collBlock    = 4 << 10 // bytes of each member's block: larger vectors go by frames
	ctlCollWake  = 4       // a FrameControl: a stamp this process may wait for was stored
	collLineSize = 64
	collSeals    = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL
)

// collArea is the memory of one group's collectives in one epoch, as its
// owner (the group's lowest member) has it or another member maps it.
// Layout: a line unused, then one line per member (its stamp, its sleep
// word, then its size by the stamp's parity), then two blocks per member
// (by the stamp's parity).
type collArea struct {
	mem []byte // the whole mapping of the memfd
	n   int
	fd  int // the owner's memfd; -1 for a member's mapping

	// vecs and leaves are this member's scratch for a reduction (scratch).
	vecs, leaves [][]byte

	users atomic.Int32 // collectives using it now, or a dup for a member
	stale atomic.Bool  // retired: no new user; the last user frees it
	freed atomic.Bool
}

// collAreaSize is the size of the memfd of an area of n members, in whole
// pages.
func collAreaSize(n int) int64 {
	b := int64(collLineSize*(1+n) + 2*collBlock*n)
	pg := int64(unix.Getpagesize())
	return (b + pg - 1) / pg * pg
}

func (a *collArea) stamp(i int) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&a.mem[collLineSize*(1+i)]))
}

func (a *collArea) sleep(i int) *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&a.mem[collLineSize*(1+i)+8]))
}

// size is where member i writes the bytes it passed to collective k.
func (a *collArea) size(i int, k uint64) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&a.mem[collLineSize*(1+i)+16+8*int(k&1)]))
}

// block is member i's block for the collective stamped k.
func (a *collArea) block(i int, k uint64) []byte {
	off := collLineSize*(1+a.n) + collBlock*(2*i+int(k&1))
	return a.mem[off : off+collBlock : off+collBlock]
}

// newCollArea makes the memfd of an area of n members, sealed against
// any change of size, and maps it.
func newCollArea(n int) (*collArea, error) {
	size := collAreaSize(n)
	fd, err := unix.MemfdCreate("gaspigo-coll", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("pgas: collective area: memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, size); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("pgas: collective area: size the memfd to %d bytes: %w", size, err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, collSeals); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("pgas: collective area: seal the memfd: %w", err)
	}
	mem, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("pgas: collective area: mmap: %w", err)
	}
	return &collArea{mem: mem, n: n, fd: fd}, nil
}

// mapCollArea maps the area of n members from fd, a descriptor its owner
// handed over (the caller still closes fd): only a memfd of the area's
// size, sealed against shrinking, so that no access to the mapping can
// fault, whatever the owner or another member does to the memfd.
func mapCollArea(fd, n int) (*collArea, error) {
	size := collAreaSize(n)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("fstat: %w", err)
	}
	if st.Size != size {
		return nil, fmt.Errorf("a descriptor of %d bytes for an area of %d members, want %d", st.Size, n, size)
	}
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		return nil, fmt.Errorf("read the seals (not a memfd?): %w", err)
	}
	if seals&unix.F_SEAL_SHRINK == 0 {
		return nil, fmt.Errorf("a descriptor not sealed against shrinking (seals %#x)", seals)
	}
	mem, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap: %w", err)
	}
	return &collArea{mem: mem, n: n, fd: -1}, nil
}

// dup returns a new descriptor of the owner's memfd, close-on-exec, for a
// member (the caller closes it); it fails once the area is retired.
func (a *collArea) dup() (int, error) {
	if !a.use() {
		return -1, fmt.Errorf("pgas: the collective area is retired: %w", ErrStaleEpoch)
	}
	defer a.done()
	fd, err := unix.FcntlInt(uintptr(a.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("pgas: dup the collective area's memfd: %w", err)
	}
	return fd, nil
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
	unix.Munmap(a.mem)
	if a.fd >= 0 {
		unix.Close(a.fd)
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
	area   *collArea // nil: a member had no area, the group uses frames in this epoch
	k      uint64    // the stamp of the group's last collective in the area
	nudged []bool    // members sent a frame already (nudge), by index
}

// collAreas are the areas this process owns, by key, for provideMemory.
type collAreas struct {
	mu    sync.Mutex
	owned map[uint64]*collArea
	wake  chan struct{} // closed and replaced by wakeColl
}

// errNoArea marks why a member has no collective area (mapArea): its
// group then uses frames for the epoch, once the members agreed on it.
var errNoArea = errors.New("no collective area")

// shmArea returns the area the collective c meets in, pinned (the caller
// calls a.done), and c's stamp there; a nil area when it runs by frames:
// the group is not all on this host (by label), has more than
// collShmMax members, or a member had no area in this epoch. The first
// collective of the group in an epoch opens the area (openArea).
func (c *coll) shmArea(ctx context.Context) (*collArea, *groupShm, error) {
	rt := c.rt
	n := len(c.ranks)
	if n < 2 || n > collShmMax || !rt.directOn() || rt.cfg.Hosts == nil || len(c.topo.hosts) != 1 {
		return nil, nil, nil
	}
	c.g.mu.Lock()
	st := c.g.shm
	if st == nil || st.epoch != c.v.epoch {
		// (Unlocked: the agreement is a collective of the group, which
		// takes a sequence number.)
		c.g.mu.Unlock()
		nst, err := c.openArea(ctx)
		if err != nil {
			return nil, nil, err
		}
		c.g.mu.Lock()
		if old := c.g.shm; old != nil && old.area != nil {
			old.area.retire()
		}
		st = nst
		c.g.shm = st
	}
	defer c.g.mu.Unlock()
	if st.area == nil {
		return nil, nil, nil
	}
	if !st.area.use() {
		return nil, nil, fmt.Errorf("pgas: %s: the collective area of epoch %d is retired: %w", c.op, c.v.epoch, ErrStaleEpoch)
	}
	st.k++
	return st.area, st, nil
}

// openArea makes (the owner) or maps (a member) the area of c's group in
// c's epoch, then has the members agree, in a one-byte allreduce through
// frames (a collective of its own, with the next sequence number), that
// every one of them has it. If one has not, every member records that
// the group uses frames in this epoch: nobody waits in an area on a
// member that is not there. An error (a member lost, ctx ended, a newer
// view) fails the collective as one through frames would.
func (c *coll) openArea(ctx context.Context) (*groupShm, error) {
	rt := c.rt
	a, err := rt.mapArea(ctx, c)
	why := err
	if errors.Is(err, errNoArea) {
		err = nil
	}
	if err != nil {
		return nil, err
	}
	all, err := c.agree(ctx, a != nil)
	if err != nil || !all {
		if a != nil {
			a.retire() // a member unmaps; the owner's refuses requests until the next view drops it
		}
		if err != nil {
			return nil, err
		}
		if why != nil {
			rt.log.Warn("no collective area: the group's collectives go through frames in this epoch (set PGAS_SHM_SEGMENTS=0 to stop trying)",
				"group", c.g.tag, "epoch", c.v.epoch, "err", why)
		} else {
			rt.log.Debug("a member has no collective area: the group's collectives go through frames in this epoch",
				"group", c.g.tag, "epoch", c.v.epoch)
		}
		return &groupShm{epoch: c.v.epoch}, nil
	}
	return &groupShm{epoch: c.v.epoch, area: a, nudged: make([]bool, len(c.ranks))}, nil
}

// agree returns whether every member of c's group has its area (mine
// says whether this one has), by an allreduce of one byte through frames
// under the group's next sequence number: every member runs it on the
// same collective, the group's first in the epoch that meets in an area.
func (c *coll) agree(ctx context.Context, mine bool) (bool, error) {
	seq, err := c.g.next(c.v.epoch)
	if err != nil {
		return false, err
	}
	ag := &coll{rt: c.rt, g: c.g, v: c.v, ranks: c.ranks, me: c.me, topo: c.topo, seq: seq, op: c.op}
	w := []byte{0}
	if mine {
		w[0] = 1
	}
	if err := ag.allreduceFrames(ctx, w, func(dst, src []byte) { dst[0] &= src[0] }); err != nil {
		return false, err
	}
	return w[0] == 1, nil
}

// collMapHook, when set (tests), is asked before this process maps or
// makes an area: an error stands for a failed mapping.
var collMapHook func(rt *Runtime) error

// mapArea makes (the owner) or maps (a member) the area of c's group in
// c's epoch. An error that wraps errNoArea means this member could not
// have it (a failed memfd or mapping, a descriptor that is not a sealed
// memfd of the area's size, an owner that did not hand it over within
// shareTimeout); any other error fails the collective.
func (rt *Runtime) mapArea(ctx context.Context, c *coll) (*collArea, error) {
	n := len(c.ranks)
	key := collKey(c.g.tag, n, c.v.epoch)
	if h := collMapHook; h != nil {
		if err := h(rt); err != nil {
			return nil, fmt.Errorf("pgas: %s: %w: %w", c.op, errNoArea, err)
		}
	}
	if c.me == 0 {
		a, err := rt.ownArea(key, n)
		if err != nil {
			return nil, fmt.Errorf("pgas: %s: %w: %w", c.op, errNoArea, err)
		}
		return a, nil
	}
	owner, err := rt.procOf(c.v, c.ranks[0], c.op)
	if err != nil {
		return nil, err
	}
	// The owner refuses a process it does not see holding a rank: one
	// promoted in a view it has not applied yet. Ask again until it has,
	// as a frame from a sender ahead waits in its mailbox.
	pause, giveUp := time.Millisecond, time.Now().Add(shareTimeout)
	for {
		fctx, cancel := context.WithTimeout(ctx, shareTimeout)
		fd, _, ferr := rt.tr.(transport.MemorySharer).FetchMemory(fctx, owner, key)
		cancel()
		if ferr == nil {
			a, err := mapCollArea(fd, n)
			unix.Close(fd)
			if err != nil {
				return nil, fmt.Errorf("pgas: %s: map the collective area of rank %d: %w: %w", c.op, c.ranks[0], errNoArea, err)
			}
			return a, nil
		}
		if errors.Is(ferr, transport.ErrPeerDown) {
			return nil, rt.sendErr(ctx, ferr, c.ranks[0], owner, c.op)
		}
		if err := c.lost(); err != nil {
			return nil, err
		}
		if time.Now().After(giveUp) {
			return nil, fmt.Errorf("pgas: %s: rank %d did not hand over its collective area for %v: %w: %w", c.op, c.ranks[0], shareTimeout, errNoArea, ferr)
		}
		select {
		case <-time.After(pause):
			pause = min(2*pause, 100*time.Millisecond)
		case <-ctx.Done():
			return nil, ctxError(ctx, c.op)
		case <-rt.closed:
			return nil, ErrClosed
		}
		rt.log.Debug("collective area refused; asking again", "owner", owner, "err", ferr)
	}
}

// ownArea returns the area this process owns under key, made on first
// use (by its own collective or a member's request).
func (rt *Runtime) ownArea(key uint64, n int) (*collArea, error) {
	rt.coll.mu.Lock()
	defer rt.coll.mu.Unlock()
	return rt.ownAreaLocked(key, n)
}

func (rt *Runtime) ownAreaLocked(key uint64, n int) (*collArea, error) {
	if a := rt.coll.owned[key]; a != nil && !a.stale.Load() {
		return a, nil
	}
	a, err := newCollArea(n)
	if err != nil {
		return nil, err
	}
	if rt.coll.owned == nil {
		rt.coll.owned = map[uint64]*collArea{}
	}
	rt.coll.owned[key] = a
	return a, nil
}

// provideArea answers a member's request for an area this process owns
// (provideMemory, key of collKind); the caller checked that the member
// holds a rank in the current view.
func (rt *Runtime) provideArea(key uint64, epoch uint32) (int, uint64, error) {
	n := int(key>>18) & 0x3fff
	if uint32(key>>32) < epoch || n < 2 || n > collShmMax {
		// (A member ahead of this process is fine: the area waits for it.)
		return -1, 0, fmt.Errorf("pgas: no collective area of %d members in epoch %d (this process is in %d): %w", n, uint32(key>>32), epoch, ErrStaleEpoch)
	}
	rt.coll.mu.Lock()
	defer rt.coll.mu.Unlock()
	a, err := rt.ownAreaLocked(key, n)
	if err != nil {
		return -1, 0, err
	}
	fd, err := a.dup()
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
// may be nil), the size it passed and its stamp, wakes the members that
// sleep, waits for every member's stamp, checks that every member passed
// size, then reads (take, may be nil). a is pinned, and unpinned on
// return. Every member sees the same sizes, so when they differ every
// one returns ErrInvalid, and the group stays in step.
func (c *coll) meet(ctx context.Context, a *collArea, st *groupShm, size int, put func(block []byte), take func(k uint64)) error {
	defer a.done()
	if size <= collBlock {
		c.rt.stats.ShmCollectives.Add(1)
	}
	k := st.k
	if put != nil {
		put(a.block(c.me, k))
	}
	a.size(c.me, k).Store(uint64(size))
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
	for i := range a.n {
		if got := a.size(i, k).Load(); got != uint64(size) {
			return fmt.Errorf("pgas: %s: %d bytes at rank %d, %d here: every member must pass the same size: %w", c.op, got, c.ranks[i], size, ErrInvalid)
		}
	}
	if take != nil {
		take(k)
	}
	return nil
}

func (c *coll) shmBarrier(ctx context.Context, a *collArea, st *groupShm) error {
	return c.meet(ctx, a, st, 0, nil, nil)
}

// shmAllreduce: every member combines every block in the order of the
// flat algorithm, so that the bits are those of allreduceFrames. A buf
// larger than a block only meets in the area to compare sizes; false
// says that the allreduce goes on through frames.
func (c *coll) shmAllreduce(ctx context.Context, a *collArea, st *groupShm, buf []byte, combine func(dst, src []byte)) (bool, error) {
	if len(buf) > collBlock {
		return false, c.meet(ctx, a, st, len(buf), nil, nil)
	}
	return true, c.meet(ctx, a, st, len(buf),
		func(block []byte) { copy(block, buf) },
		func(k uint64) {
			vecs, leaves := a.scratch(k, len(buf))
			copy(buf, reduceLeaves(leaves, vecs, combine))
		})
}

// shmBcast copies the root's block; like shmAllreduce, a buf larger than
// a block only compares sizes (false: go on through frames).
func (c *coll) shmBcast(ctx context.Context, a *collArea, st *groupShm, buf []byte, root int) (bool, error) {
	if len(buf) > collBlock {
		return false, c.meet(ctx, a, st, len(buf), nil, nil)
	}
	return true, c.meet(ctx, a, st, len(buf),
		func(block []byte) {
			if c.me == root {
				copy(block, buf)
			}
		},
		func(k uint64) { copy(buf, a.block(root, k)[:len(buf)]) })
}
