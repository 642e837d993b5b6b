package pgas

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gaspigo/gaspigo/pgas/internal/samehost"
	"github.com/gaspigo/gaspigo/segments"
	"github.com/gaspigo/gaspigo/transport"
)

// Collectives in shared memory (docs/design.md §9.3.1). When every member
// of a group sits on this host (by host label), there are at most
// collShmMax of them and segments are shared (DirectShm), the group's
// barriers, allreduces and broadcasts meet in a collective area: a memfd
// of the group's lowest member (its owner), which the others map on
// their first such collective of the epoch. A member writes its block
// (when its vector fits one), the size it passed, then a stamp counting
// the group's collectives in the area, into its own line; then it waits
// until every member's stamp reached its own, compares the sizes, and
// reads what it needs: every member reduces all the blocks in the order
// of the flat algorithm (reduceLeaves: the bits of the frames' way), so
// there is no leader to wait for. A waiter polls for a while as
// NotifyWaitSome does (Runtime.notePoll), then sets its sleep word and
// parks; whoever stamps and sees the word sends it a frame (ctlCollWake).
//
// Whether a collective meets in the area depends only on what every
// member knows alike (the view, the host labels, the job's settings),
// never on the size passed: every member sees every size, so members
// that passed different sizes all return ErrInvalid, and a vector larger
// than a block meets only to compare sizes, then goes by frames.
//
// A member that cannot have the area (it could not map it, was handed a
// memfd it must not map, the owner did not hand it over, or, as the
// owner, could not make it) tells every other member so (ctlCollNoArea,
// the no-area mark) and runs the collective by frames. A member that
// holds the mark, of its own or received, runs every collective of that
// group in that epoch by frames; one that waits in the area and sees the
// mark arrive leaves the area and runs the same collective (same
// sequence number) by frames. Nobody can finish a collective in the area
// without the stamp of the member that has none, so every member makes
// the switch at the same collective, and the failure-free path costs
// nothing.
//
// Blocks and sizes are double-buffered by the stamp's parity: a member
// writes them for collective k+2 only after it saw every stamp of k+1,
// and a member stamps k+1 only after it read everything of k, so nothing
// is overwritten while someone reads it. A member that times out has
// stamped already, so a member that enters late completes, as over
// frames, where the early one's message was sent. Areas and marks belong
// to an epoch: the key a member asks for names it, and a view change
// retires the areas and marks of older epochs, so a process of an older
// epoch stamps where nobody waits.

// Frames of the collectives in shared memory.
const (
	ctlCollWake = 4 // a FrameControl: a stamp this process may wait for was stored
	// ctlCollNoArea: a FrameControl whose Off is the key (samehost.AreaKey)
	// of an area the sender does not have: the group goes by frames in
	// that epoch.
	ctlCollNoArea = 5
)

// groupShm is what a group (on one runtime) knows of its area in one
// epoch.
type groupShm struct {
	epoch  uint32
	area   *samehost.Area
	k      uint64    // the stamp of the group's last collective in the area
	nudged []bool    // members sent a frame already (nudge), by index
	sizes  [2]uint64 // the sizes this member last stored, by the stamp's parity (the area starts zeroed)

	// vecs and leaves are this member's scratch for a reduction (scratch).
	vecs, leaves [][]byte
}

// scratch returns the blocks of collective k of area a cut to size
// bytes, and leaves for reduceLeaves, made once per area: a group's
// collectives run one at a time.
func (st *groupShm) scratch(a *samehost.Area, k uint64, size int) (vecs, leaves [][]byte) {
	if st.vecs == nil {
		st.vecs = make([][]byte, a.Members())
		st.leaves = make([][]byte, leafCount(a.Members()))
		for v := range st.leaves {
			st.leaves[v] = asBytes(make([]uint64, segments.CollBlock/8))
		}
	}
	for i := range st.vecs {
		st.vecs[i] = a.Block(i, k)[:size]
	}
	for v := range st.leaves {
		st.leaves[v] = st.leaves[v][:size]
	}
	return st.vecs, st.leaves
}

// errNoArea is wrapped by mapArea when this member cannot have the area:
// the group goes by frames in that epoch.
var errNoArea = errors.New("no collective area")

// errByFrames is await's: the no-area mark arrived, the collective goes
// on by frames.
var errByFrames = errors.New("a member has no collective area")

// collMapHook, when set (tests), is asked before this process maps or
// makes an area: an error stands for a failed mapping.
var collMapHook func(rt *Runtime) error

// areaKey is the key of the area of c's group in c's epoch.
func (c *coll) areaKey() uint64 { return samehost.AreaKey(c.g.tag, len(c.ranks), c.v.epoch) }

// shmArea returns the area the collective c runs in, pinned (the caller
// calls meet, which unpins it), and c's stamp there; a nil area when it
// runs by frames: the group is not all on this host (by label), has more
// than samehost.MaxMembers members (samehost.AreaFits), or a member has no area in this epoch (the
// no-area mark, of this member's own or received).
func (c *coll) shmArea(ctx context.Context) (*samehost.Area, *groupShm, error) {
	rt := c.rt
	n := len(c.ranks)
	if !samehost.AreaFits(n, rt.directOn(), rt.cfg.Hosts != nil && len(c.topo.hosts) == 1) {
		return nil, nil, nil
	}
	key := c.areaKey()
	if rt.coll.NoArea(key) {
		return nil, nil, nil
	}
	c.g.mu.Lock()
	defer c.g.mu.Unlock()
	st := c.g.shm
	if st == nil || st.epoch != c.v.epoch {
		if st != nil {
			st.area.Retire()
			c.g.shm = nil
		}
		a, err := rt.mapArea(ctx, c, key)
		if errors.Is(err, errNoArea) {
			return nil, nil, nil // the mark is held: frames for the rest of the epoch
		}
		if errors.Is(err, ErrTimeout) {
			// The others may wait in the area: out of step, as after a
			// timeout in await (Group.timedOut; g.mu is held here).
			c.g.broken = c.v.epoch + 1
		}
		if err != nil {
			return nil, nil, err
		}
		st = &groupShm{epoch: c.v.epoch, area: a, nudged: make([]bool, n)}
		c.g.shm = st
	}
	if !st.area.Use() {
		return nil, nil, fmt.Errorf("pgas: %s: the collective area of epoch %d is retired: %w", c.op, c.v.epoch, ErrStaleEpoch)
	}
	st.k++
	return st.area, st, nil
}

// mapArea makes (the owner) or maps (a member) the area of c's group in
// c's epoch, under key. When this member cannot have it, it sends the
// no-area mark (markNoArea) and returns an error wrapping errNoArea, as
// it does when a member's mark arrives while it asks the owner; any other
// error fails the collective.
func (rt *Runtime) mapArea(ctx context.Context, c *coll, key uint64) (*samehost.Area, error) {
	n := len(c.ranks)
	if h := collMapHook; h != nil {
		if err := h(rt); err != nil {
			return nil, c.markNoArea(key, err)
		}
	}
	if c.me == 0 {
		a, err := rt.coll.Own(key, n)
		if err != nil {
			return nil, c.markNoArea(key, err)
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
	pause, giveUp := time.Millisecond, time.Now().Add(samehost.ShareTimeout)
	for {
		fctx, cancel := context.WithTimeout(ctx, samehost.ShareTimeout)
		fd, _, ferr := rt.tr.(transport.MemorySharer).FetchMemory(fctx, owner, key)
		cancel()
		if ferr == nil {
			a, err := samehost.MapArea(fd, n)
			unix.Close(fd)
			if err != nil {
				return nil, c.markNoArea(key, fmt.Errorf("map the collective area of rank %d: %w", c.ranks[0], err))
			}
			return a, nil
		}
		if errors.Is(ferr, transport.ErrPeerDown) {
			return nil, rt.sendErr(ctx, ferr, c.ranks[0], owner, c.op)
		}
		if errors.Is(ferr, transport.ErrNoSharedMemory) {
			// Labelled the same host, but no shared memory reaches it
			// (pods of one node, each in a container of its own): asking
			// until ShareTimeout held every collective of the epoch for
			// that long (10 s at a job's start on Kubernetes).
			return nil, c.markNoArea(key, fmt.Errorf("rank %d: %w", c.ranks[0], ferr))
		}
		if err := c.lost(); err != nil {
			return nil, err
		}
		wake := rt.coll.WakeChan() // closed when a mark arrives
		if rt.coll.NoArea(key) {
			return nil, fmt.Errorf("pgas: %s: %w", c.op, errNoArea) // a member has none: stop asking
		}
		if time.Now().After(giveUp) {
			return nil, c.markNoArea(key, fmt.Errorf("rank %d did not hand over its collective area for %v: %w", c.ranks[0], samehost.ShareTimeout, ferr))
		}
		select {
		case <-time.After(pause):
			pause = min(2*pause, 100*time.Millisecond)
		case <-wake:
		case <-ctx.Done():
			return nil, ctxError(ctx, c.op)
		case <-rt.closed:
			return nil, ErrClosed
		}
		rt.log.Debug("collective area refused; asking again", "owner", owner, "err", ferr)
	}
}

// markNoArea records that this member has no area under key (why says
// why), tells every other member of c's group (ctlCollNoArea), and
// returns an error wrapping errNoArea. The frames go out under the
// runtime's life, not the collective's ctx: the members waiting in the
// area must hear of it even when this caller gives up.
func (c *coll) markNoArea(key uint64, why error) error {
	rt := c.rt
	rt.log.Warn("no collective area: the group's collectives go through frames in this epoch (set PGAS_SHM_SEGMENTS=0 to stop trying)",
		"group", c.g.tag, "epoch", c.v.epoch, "op", c.op, "err", why)
	rt.recordNoArea(key)
	ctx, cancel := context.WithTimeout(rt.life, samehost.ShareTimeout)
	defer cancel()
	for i, r := range c.ranks {
		if i == c.me {
			continue
		}
		p, err := rt.procOf(c.v, r, c.op)
		if err != nil {
			continue // a member gone: the others learn that from the view
		}
		h := transport.Header{Type: transport.FrameControl, A: ctlCollNoArea, Off: key}
		rt.sendErr(ctx, rt.send(ctx, p, &h, nil), r, p, c.op) // a lost peer is noted there
	}
	return fmt.Errorf("pgas: %s: %w: %w", c.op, errNoArea, why)
}

// recordNoArea holds the no-area mark of key (from this member, or a
// peer's ctlCollNoArea) until a view retires its epoch (samehost.Areas.Mark).
func (rt *Runtime) recordNoArea(key uint64) { rt.coll.Mark(key, rt.view.Load().epoch) }

// provideArea answers a member's request for an area this process owns
// (provideMemory, key of samehost.CollKind); the caller checked that the
// member holds a rank in the current view.
func (rt *Runtime) provideArea(key uint64, epoch uint32) (int, uint64, error) {
	n, e, ok := samehost.KeyArea(key)
	if e < epoch || !ok {
		// (A member ahead of this process is fine: the area waits for it.)
		return -1, 0, fmt.Errorf("pgas: no collective area of %d members in epoch %d (this process is in %d): %w", n, e, epoch, ErrStaleEpoch)
	}
	a, err := rt.coll.Own(key, n)
	if err != nil {
		return -1, 0, err
	}
	fd, err := a.Dup()
	return fd, 0, err
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
	if ctx.Err() != nil {
		// This member stored its stamp after its caller gave up: the
		// member that sleeps on it must still hear of it, or it would
		// sleep until its own context ends (a lost wake-up).
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(c.rt.life, samehost.ShareTimeout)
		defer cancel()
	}
	h := transport.Header{Type: transport.FrameControl, A: ctlCollWake}
	c.rt.sendErr(ctx, c.rt.send(ctx, p, &h, nil), rank, p, c.op) // a lost peer is noted there
}

// await waits until member i's stamp reached k: it polls, then sleeps
// until woken; it fails when a member's connection is lost, the view
// changes, ctx ends or the runtime closes, and returns errByFrames when
// a member's no-area mark arrived.
func (c *coll) await(ctx context.Context, a *samehost.Area, st *groupShm, i int, k uint64) error {
	rt := c.rt
	w := a.Stamp(i)
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
	sleep := a.Sleep(c.me)
	defer sleep.Store(0)
	for {
		ch := rt.coll.WakeChan()
		sleep.Store(1)
		if w.Load() >= k {
			return nil
		}
		if err := c.lost(); err != nil {
			return err
		}
		if rt.coll.NoArea(c.areaKey()) {
			return errByFrames
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

// holdFaults holds the collective while Config.Faults says (a partition
// of this process: see there), and no longer than the collective could
// last otherwise: until ctx ends, the view changes or this process stops
// (a process partitioned for good must still end by itself: its cut-off
// stops it).
func (c *coll) holdFaults(ctx context.Context, size int) error {
	f := c.rt.cfg.Faults
	if f == nil {
		return nil
	}
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	vch := c.rt.viewChan() // closes at the next view, and when this process stops
	go func() {
		select {
		case <-vch:
		case <-c.rt.closed:
		case <-hctx.Done():
		}
		cancel()
	}()
	if f.Hold(hctx, size, true) == nil {
		return nil
	}
	if ctx.Err() != nil {
		return ctxError(ctx, c.op)
	}
	if err := c.lost(); err != nil {
		return err
	}
	if c.rt.isClosed() {
		return ErrClosed
	}
	return fmt.Errorf("pgas: %s: epoch %d ended during the collective: %w", c.op, c.v.epoch, ErrStaleEpoch)
}

// meet runs collective k of the area: this member writes its block (put,
// may be nil; only when size fits a block), the size it passed and its
// stamp, wakes the members that sleep, waits for every member's stamp,
// checks that every member passed size, then reads (take, may be nil). a
// is pinned, and unpinned on return. done is false, with a nil error,
// when the collective goes on by frames: size exceeds a block (the
// members met only to compare sizes), or a member's no-area mark arrived
// while this one waited. Every member sees the same sizes, so when they
// differ every one returns ErrInvalid, and the group stays in step.
func (c *coll) meet(ctx context.Context, a *samehost.Area, st *groupShm, size int, put func(block []byte), take func(k uint64)) (done bool, err error) {
	defer a.Done()
	if err := c.holdFaults(ctx, size); err != nil {
		return false, err
	}
	k := st.k
	if put != nil && size <= segments.CollBlock {
		put(a.Block(c.me, k))
	}
	// The size shares the line the others poll for the stamp: it is
	// stored only when it changed since the collective of the same
	// parity (never, for barriers in a row), and each member's is read
	// right after its stamp was seen, before that member can move on and
	// take the line back for its next stamp. (Stored and compared as the
	// first version did, a barrier of two took 0.42 µs instead of 0.33.)
	if p := k & 1; st.sizes[p] != uint64(size) {
		a.Size(c.me, k).Store(uint64(size))
		st.sizes[p] = uint64(size)
	}
	a.Stamp(c.me).Store(k)
	for i := range a.Members() {
		if i != c.me && a.Sleep(i).Load() != 0 {
			c.nudge(ctx, i)
		}
	}
	differs := -1
	for i := range a.Members() {
		if i == c.me {
			continue
		}
		if err := c.await(ctx, a, st, i, k); errors.Is(err, errByFrames) {
			c.rt.log.Debug("a member has no collective area: the group's collectives go through frames in this epoch",
				"group", c.g.tag, "epoch", c.v.epoch, "op", c.op)
			return false, nil
		} else if err != nil {
			return false, err
		}
		if differs < 0 && a.Size(i, k).Load() != uint64(size) {
			differs = i
		}
	}
	if differs >= 0 {
		return true, fmt.Errorf("pgas: %s: %d bytes at rank %d, %d here: every member must pass the same size: %w", c.op, a.Size(differs, k).Load(), c.ranks[differs], size, ErrInvalid)
	}
	if size > segments.CollBlock {
		return false, nil
	}
	if take != nil {
		take(k)
	}
	c.rt.stats.ShmCollectives.Add(1)
	return true, nil
}

func (c *coll) shmBarrier(ctx context.Context, a *samehost.Area, st *groupShm) (bool, error) {
	return c.meet(ctx, a, st, 0, nil, nil)
}

// shmAllreduce: every member combines every block in the order of the
// flat algorithm, so that the bits are those of allreduceFrames.
func (c *coll) shmAllreduce(ctx context.Context, a *samehost.Area, st *groupShm, buf []byte, combine func(dst, src []byte)) (bool, error) {
	return c.meet(ctx, a, st, len(buf),
		func(block []byte) { copy(block, buf) },
		func(k uint64) {
			vecs, leaves := st.scratch(a, k, len(buf))
			copy(buf, reduceLeaves(leaves, vecs, combine))
		})
}

func (c *coll) shmBcast(ctx context.Context, a *samehost.Area, st *groupShm, buf []byte, root int) (bool, error) {
	return c.meet(ctx, a, st, len(buf),
		func(block []byte) {
			if c.me == root {
				copy(block, buf)
			}
		},
		func(k uint64) { copy(buf, a.Block(root, k)[:len(buf)]) })
}
