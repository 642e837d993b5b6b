package ckpt

import (
	"context"
	"fmt"
	"hash/crc32"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gaspigo/gaspigo/obs"
	"github.com/gaspigo/gaspigo/pgas"
	"github.com/gaspigo/gaspigo/segments"
)

// Checkpointer takes coordinated in-memory checkpoints of registered
// regions, mirrored to other ranks. See the package documentation.
type Checkpointer struct {
	rt    *pgas.Runtime
	cfg   Config
	log   *slog.Logger
	slot  int64 // bytes per buffer or slot
	local segments.ID

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed atomic.Bool
	once   sync.Once

	mu           sync.Mutex
	changed      chan struct{} // closed and replaced on every state change
	regions      []region
	ready        bool // segments set up (New on a rank, or a restore)
	n, rank      int  // job size and this rank, at setup
	lay          *layout
	mirrorID     segments.ID
	mirrorCap    int
	bufs         [2]bufState
	committed    int // buffer holding the last committed checkpoint, or -1
	lastCommit   uint64
	lastStarted  uint64
	hasStarted   bool
	gen          uint64
	pending      *job      // push of the last Start, until Commit
	voteStart    time.Time // Vote's start, for CommitTime
	needsRestore bool
	failureAt    time.Time // first failure seen since the last restore
	queue        []*job    // jobs for the worker
	cur          *job      // job the worker runs
	outstanding  int       // jobs queued or running
	rebuild      *job      // last rebuild job
	wake         chan struct{}
	disk         diskState
	loss         diskLoss
	st           Stats
}

// region is one registered piece of state.
type region struct {
	name  string
	mem   []byte // Register, RegisterVar
	seg   segments.ID
	off   int64
	n     int64 // registered (largest) length
	isSeg bool
	used  func() int // RegisterVar: bytes of mem in use now
}

// bufState describes one local snapshot buffer.
type bufState struct {
	valid      bool // holds a complete snapshot
	id, gen    uint64
	hdrLen     int
	payloadLen int64
	busy       int // jobs (pushes, rebuilds, disk writes) reading it
}

type jobKind int

const (
	jobPush jobKind = iota
	jobRebuild
)

// job is one push of a local buffer to mirror slots, run by the worker.
type job struct {
	kind       jobKind
	id         uint64
	buf        int
	hdrLen     int
	payloadLen int64
	mirror     segments.ID
	targets    []target
	ctx        context.Context
	cancel     context.CancelFunc
	done       chan struct{}
	err        error     // set before done closes
	since      time.Time // rebuilds: start of the unprotected window
}

// target is a holder rank and the offset of the slot in its mirror segment.
type target struct {
	rank int
	off  int64
}

// Stats counts what a Checkpointer did. Durations are totals unless named
// Last or Max.
type Stats struct {
	Started      uint64        // Start calls that copied a snapshot
	Committed    uint64        // checkpoints committed
	Aborted      uint64        // Commit agreements that found a push had failed
	BytesPushed  uint64        // bytes written to mirror slots (pushes and rebuilds)
	PushTime     time.Duration // time the worker spent pushing (Start's background part)
	LastPushTime time.Duration
	CommitTime   time.Duration // time in Commit (waiting for the push, then the agreement)
	LastCommit   time.Duration
	Restores     uint64 // successful Restore and LoadFromDisk calls
	Fetched      uint64 // restores that read this rank's snapshot from a holder
	Rebuilds     uint64 // background rebuilds finished
	// Unprotected holds the most recent unprotected windows (up to 16,
	// oldest first): from the first failure this rank saw (or the start of
	// the restore) to the end of the rebuild of its mirrors.
	Unprotected    []time.Duration
	MaxUnprotected time.Duration
	DiskWrites     uint64 // snapshot files written
	DiskBytes      uint64
	DiskErrors     uint64
	DiskLost       uint64 // checkpoints the disk level lost (see DiskError); never reset
	Manifests      uint64 // manifests written (rank 0)
}

const keepWindows = 16

func (c *Checkpointer) goFunc(f func()) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		f()
	}()
}

// signalLocked wakes everything waiting for a state change. c.mu is held.
func (c *Checkpointer) signalLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
}

// waitFor blocks until cond (evaluated under c.mu) holds.
func (c *Checkpointer) waitFor(ctx context.Context, what string, cond func() bool) error {
	for {
		c.mu.Lock()
		ok, ch := cond(), c.changed
		c.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("ckpt: waiting for %s: %w (%w)", what, pgas.ErrTimeout, ctx.Err())
		case <-c.ctx.Done():
			return ErrClosed
		}
	}
}

// noteFailureLocked records when this rank first saw a failure, the start
// of the unprotected window.
func (c *Checkpointer) noteFailureLocked(err error) {
	if err != nil && pgas.NeedsRecovery(err) && c.failureAt.IsZero() {
		c.failureAt = time.Now()
	}
}

// usableLocked says whether Start and Commit may run. c.mu is held.
func (c *Checkpointer) usableLocked() error {
	switch {
	case c.closed.Load():
		return ErrClosed
	case !c.ready:
		return fmt.Errorf("ckpt: a promoted spare calls Restore (or LoadFromDisk) with the others first: %w", ErrNeedsRestore)
	case c.needsRestore:
		return fmt.Errorf("ckpt: an earlier commit's outcome is unknown: %w", ErrNeedsRestore)
	}
	return nil
}

// Start begins checkpoint id: it copies the registered regions into a
// local snapshot buffer, then returns while a background push copies the
// snapshot into the mirror slots of this rank's holders. The regions may
// change as soon as Start returns. ids must increase from one Start to the
// next. Start blocks only while an earlier push or disk write still reads
// the buffer it reuses.
func (c *Checkpointer) Start(ctx context.Context, id uint64) error {
	defer phase("start", id)()
	c.mu.Lock()
	if err := c.usableLocked(); err != nil {
		c.mu.Unlock()
		return err
	}
	if c.hasStarted && id <= c.lastStarted {
		last := c.lastStarted
		c.mu.Unlock()
		return fmt.Errorf("ckpt: start %d: the last checkpoint started was %d; ids must increase: %w", id, last, ErrBadID)
	}
	b := 0
	if c.committed >= 0 {
		b = 1 - c.committed
	}
	regions := slices.Clone(c.regions)
	c.mu.Unlock()

	if err := c.waitFor(ctx, "the snapshot buffer", func() bool { return c.bufs[b].busy == 0 }); err != nil {
		return fmt.Errorf("ckpt: start %d: %w", id, err)
	}
	seg, err := c.rt.Segment(c.local)
	if err != nil {
		return fmt.Errorf("ckpt: start %d: %w", id, err)
	}
	c.mu.Lock()
	c.bufs[b].valid = false
	gen, n, rank := c.gen, c.n, c.rank
	c.mu.Unlock()

	buf := seg.Bytes()[c.bufOff(b) : c.bufOff(b)+c.slot]
	payload := buf[headerArea:]
	h := Header{ID: id, Gen: gen, Epoch: c.rt.Epoch(), Rank: uint32(rank), NumRanks: uint32(n), LayoutCRC: layoutCRC(regionNames(regions))}
	var off int64
	var crc uint32
	for _, r := range regions {
		src, err := c.resolve(r)
		if err != nil {
			return fmt.Errorf("ckpt: start %d: %w", id, err)
		}
		if r.used != nil {
			u := r.used()
			if u < 0 || u > len(src) {
				return fmt.Errorf("ckpt: start %d: region %q: %d bytes in use, registered %d: %w", id, r.name, u, len(src), ErrInvalid)
			}
			src = src[:u]
		}
		copy(payload[off:], src)
		crc = crc32.Update(crc, castagnoli, src)
		off += int64(len(src))
		h.Regions = append(h.Regions, uint64(len(src)))
	}
	h.PayloadCRC = crc
	hl, err := h.Encode(buf[:headerArea])
	if err != nil {
		return fmt.Errorf("ckpt: start %d: %w", id, err)
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	c.bufs[b] = bufState{valid: true, id: id, gen: gen, hdrLen: hl, payloadLen: off}
	c.lastStarted, c.hasStarted = id, true
	var ts []target
	for _, hr := range c.lay.holders[c.rank] {
		ts = append(ts, target{rank: hr, off: c.slotOff(c.lay.position(hr, c.rank), b)})
	}
	c.pending = c.enqueueLocked(jobPush, id, b, ts, time.Time{})
	c.st.Started++
	return nil
}

// enqueueLocked queues a push of buffer b for the worker. c.mu is held.
func (c *Checkpointer) enqueueLocked(kind jobKind, id uint64, b int, ts []target, since time.Time) *job {
	j := &job{kind: kind, id: id, buf: b, hdrLen: c.bufs[b].hdrLen, payloadLen: c.bufs[b].payloadLen,
		mirror: c.mirrorID, targets: ts, done: make(chan struct{}), since: since}
	j.ctx, j.cancel = context.WithCancel(c.ctx)
	c.bufs[b].busy++
	c.outstanding++
	c.queue = append(c.queue, j)
	select {
	case c.wake <- struct{}{}:
	default:
	}
	return j
}

// worker runs pushes and rebuilds one at a time on Config.Queue.
func (c *Checkpointer) worker() {
	for {
		c.mu.Lock()
		var j *job
		if len(c.queue) > 0 {
			j = c.queue[0]
			c.queue = c.queue[1:]
			c.cur = j
		}
		c.mu.Unlock()
		if j == nil {
			select {
			case <-c.wake:
				continue
			case <-c.ctx.Done():
				return
			}
		}
		c.run(j)
	}
}

func (c *Checkpointer) run(j *job) {
	t0 := time.Now()
	var pushed uint64
	err := j.ctx.Err()
	if err == nil {
		pushed, err = c.push(j)
	}
	j.cancel()
	dur := time.Since(t0)
	var window time.Duration
	c.mu.Lock()
	j.err = err
	c.bufs[j.buf].busy--
	c.outstanding--
	c.cur = nil
	c.st.BytesPushed += pushed
	if err != nil {
		c.noteFailureLocked(err)
	}
	if j.kind == jobPush {
		c.st.PushTime += dur
		c.st.LastPushTime = dur
	} else if err == nil {
		window = time.Since(j.since)
		c.st.Rebuilds++
		c.recordWindowLocked(window)
	}
	c.signalLocked()
	c.mu.Unlock()
	close(j.done)
	if err == nil {
		notePush(j.kind == jobPush, j.id, t0, pushed)
	}
	switch {
	case j.kind == jobRebuild && err == nil:
		c.log.Info("mirror rebuilt", "rank", c.rank, "id", j.id, "holders", len(j.targets), "bytes", pushed, "rebuild", dur, "unprotected", window)
	case j.kind == jobRebuild:
		c.log.Log(context.Background(), failureLevel(err), "mirror rebuild failed", "rank", c.rank, "id", j.id, "err", err)
	case err != nil && j.ctx.Err() == nil:
		c.log.Log(context.Background(), failureLevel(err), "checkpoint push failed", "rank", c.rank, "id", j.id, "err", err)
	}
}

func (c *Checkpointer) recordWindowLocked(w time.Duration) {
	obs.Unprotected.Observe(w.Seconds())
	c.st.Unprotected = append(c.st.Unprotected, w)
	if len(c.st.Unprotected) > keepWindows {
		c.st.Unprotected = c.st.Unprotected[1:]
	}
	c.st.MaxUnprotected = max(c.st.MaxUnprotected, w)
}

// push writes buffer j.buf into every target slot: the slot's header is
// cleared first, then the payload is written, then the header with a
// notification. Frames from one process to another are applied in order,
// so a slot shows a valid header only once its payload is complete, and a
// push cut short leaves an invalid slot, never a mix. It waits for remote
// completion.
func (c *Checkpointer) push(j *job) (uint64, error) {
	ctx, q := j.ctx, c.cfg.Queue
	src := c.bufOff(j.buf)
	var first error
	var bytes uint64
	for _, t := range j.targets {
		err := c.rt.Write(ctx, q, t.rank, pgas.Loc{Seg: j.mirror, Off: t.off}, pgas.Loc{Seg: c.local, Off: c.zeroOff()}, clearLen)
		if err == nil && j.payloadLen > 0 {
			err = c.rt.Write(ctx, q, t.rank, pgas.Loc{Seg: j.mirror, Off: t.off + headerArea}, pgas.Loc{Seg: c.local, Off: src + headerArea}, j.payloadLen)
		}
		if err == nil {
			nid := segments.NotificationID((t.off / c.slot) % segments.DefaultNotifications)
			val := uint32(j.id%math.MaxUint32) + 1
			err = c.rt.WriteNotify(ctx, q, t.rank, pgas.Loc{Seg: j.mirror, Off: t.off}, pgas.Loc{Seg: c.local, Off: src}, int64(j.hdrLen), nid, val)
		}
		if err != nil {
			first = err
			break
		}
		bytes += uint64(j.hdrLen) + uint64(j.payloadLen)
	}
	if err := c.rt.Wait(ctx, q); err != nil && first == nil {
		first = err
	}
	if first != nil {
		return 0, fmt.Errorf("ckpt: push of checkpoint %d: %w", j.id, first)
	}
	return bytes, nil
}

// LastCommitted returns the id of this rank's last committed checkpoint;
// ok is false before the first commit or restore.
func (c *Checkpointer) LastCommitted() (id uint64, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastCommit, c.committed >= 0
}

// Holders returns the ranks that hold rank's mirrors under the current
// placement (see Place), or nil before setup and for a vacant rank.
func (c *Checkpointer) Holders(rank int) []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lay == nil || rank < 0 || rank >= len(c.lay.holders) {
		return nil
	}
	return slices.Clone(c.lay.holders[rank])
}

// WaitProtected blocks until the background rebuild started by the last
// Restore (if any) has finished, and returns its error.
func (c *Checkpointer) WaitProtected(ctx context.Context) error {
	c.mu.Lock()
	j := c.rebuild
	c.mu.Unlock()
	if j == nil {
		return nil
	}
	select {
	case <-j.done:
		return j.err
	case <-ctx.Done():
		return fmt.Errorf("ckpt: waiting for the rebuild: %w (%w)", pgas.ErrTimeout, ctx.Err())
	case <-c.ctx.Done():
		return ErrClosed
	}
}

// Stats returns a copy of the counters.
func (c *Checkpointer) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.st
	s.Unprotected = slices.Clone(c.st.Unprotected)
	return s
}

// Close stops the background work (pushes, rebuilds, disk writes) and
// waits for it. It is idempotent. The checkpointer's segments stay
// allocated until the runtime closes: other ranks may still be writing
// into them, and freeing segment memory under a peer's write is not safe.
//
// Close returns the *DiskError of a lost disk checkpoint (ErrDiskLost), if
// this rank lost one, so that a lost checkpoint is never silent; nil
// otherwise.
func (c *Checkpointer) Close() error {
	c.once.Do(func() {
		c.closed.Store(true)
		c.cancel()
		c.wg.Wait()
		c.releaseFDs()
		c.mu.Lock()
		c.signalLocked()
		c.mu.Unlock()
	})
	return c.DiskErr()
}
