package ckpt

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/gaspigo/gaspigo/pgas"
)

// Memory layout.
//
// Local segment (SegmentID), the same size on every rank:
//
//	[0, slot)            buffer 0: header area, then payload
//	[slot, 2*slot)       buffer 1
//	[2*slot, +64)        zeros (source of the header-clearing write)
//	[2*slot+64, +64)     this rank's outgoing disk record
//	[2*slot+128, ...)    disk board (read on rank 0): 4 records per rank
//	then                 the restore's inbox and outbox (inbox.go)
//
// Mirror segment (SegmentID+1 or +2) on holder h: for each source rank
// (ascending) a pair of slots laid out like the local buffers. A rank's
// snapshot in local buffer b always goes to slot b of its pair, so one
// index names one checkpoint everywhere.
const (
	headerArea  = 4096 // bytes reserved for the header in a buffer or slot
	clearLen    = 64   // bytes zeroed at a slot's start before it is rewritten
	recordLen   = 32   // one disk record
	recordRing  = 4    // disk records per rank on the board
	boardNotify = 0    // notification id (local segment) for board updates
)

// New creates a Checkpointer over rt. On the ranks of a starting job it is
// collective (it creates the checkpoint segments on every rank). On a
// promoted spare (rt.StartedAsSpare) it is local: the spare joins the
// collective setup in Restore (or LoadFromDisk), which every rank calls
// after a recovery. Survivors keep their Checkpointer across a recovery.
//
// When a rank fails during the collective setup, New returns the
// Checkpointer together with the error (pgas.NeedsRecovery holds for it):
// register the regions, call Recover, and Restore finishes the setup with
// the promoted spare, as after any failure (it finds no checkpoint,
// ErrNoCheckpoint, so the program starts over). Any other error returns a
// nil Checkpointer.
func New(ctx context.Context, rt *pgas.Runtime, cfg Config) (*Checkpointer, error) {
	return newCheckpointer(ctx, rt, cfg, false)
}

// NewJoining is New for a process that joins a recovery under way: it is
// local, as New is on a promoted spare, and the collective setup happens
// in the Restore (or LoadFromDisk) that every rank of the new view calls.
// A rank uses it when an earlier collective step of its program's setup
// failed (pgas.NeedsRecovery) before it created its Checkpointer: the
// other ranks are recovering, or will fail in their next collective, and
// every rank meets in Restore.
func NewJoining(ctx context.Context, rt *pgas.Runtime, cfg Config) (*Checkpointer, error) {
	return newCheckpointer(ctx, rt, cfg, true)
}

// newCheckpointer is New, and NewJoining when joining.
func newCheckpointer(ctx context.Context, rt *pgas.Runtime, cfg Config, joining bool) (*Checkpointer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if rt == nil {
		return nil, fmt.Errorf("ckpt: new: nil runtime: %w", ErrInvalid)
	}
	log := cfg.Logger
	if log == nil {
		log = rt.Logger()
	}
	c := &Checkpointer{
		rt:        rt,
		cfg:       cfg,
		log:       log.With("component", "ckpt"),
		slot:      headerArea + (cfg.MaxBytes+63)/64*64,
		local:     cfg.SegmentID,
		committed: -1,
		changed:   make(chan struct{}),
		wake:      make(chan struct{}, 1),
	}
	c.disk.wake = make(chan struct{}, 1)
	c.ctx, c.cancel = context.WithCancel(context.Background())
	if !joining && !rt.StartedAsSpare() {
		if _, err := rt.Segment(c.local); err == nil {
			c.cancel()
			return nil, fmt.Errorf("ckpt: new: segment %d already exists: another Checkpointer used it (one per runtime and SegmentID; survivors keep theirs across a recovery) or it collides with the program's: %w", c.local, ErrInvalid)
		}
		if err := c.setup(ctx); err != nil {
			if !pgas.NeedsRecovery(err) {
				c.cancel()
				return nil, err
			}
			c.startWorkers()
			return c, err
		}
	}
	c.startWorkers()
	return c, nil
}

func (c *Checkpointer) startWorkers() {
	c.goFunc(c.worker)
	if c.cfg.Dir != "" {
		c.goFunc(c.diskWriter)
	}
}

// setup creates the segments at job start.
func (c *Checkpointer) setup(ctx context.Context) error {
	if err := c.createLocal(ctx); err != nil {
		return err
	}
	lay := c.layoutNow()
	id := c.cfg.SegmentID + 1
	cp := lay.capacity(c.rt.Rank())
	if _, err := c.rt.SegmentCreate(ctx, id, c.mirrorSize(cp), nil); err != nil {
		return fmt.Errorf("ckpt: new: mirror segment %d: %w", id, err)
	}
	c.mu.Lock()
	c.lay, c.mirrorID, c.mirrorCap, c.ready = lay, id, cp, true
	c.mu.Unlock()
	c.startManifester()
	if len(lay.holders[c.rank]) == 0 {
		// A job of one rank has nobody to mirror to, and nothing to
		// recover it with: said, but it is no warning (the simplest run
		// printed one).
		log := c.log.Warn
		if len(lay.holders) == 1 {
			log = c.log.Info
		}
		log("no mirrors: a single rank keeps its checkpoints only locally", "rank", c.rank)
	}
	return nil
}

// createLocal creates (or, for a survivor, rejoins) the local segment.
func (c *Checkpointer) createLocal(ctx context.Context) error {
	n, rank := c.rt.Size(), c.rt.Rank()
	if err := c.clearInbox(); err != nil {
		return fmt.Errorf("ckpt: local segment %d: %w", c.local, err)
	}
	seg, err := c.rt.SegmentCreate(ctx, c.local, c.localSize(n), nil)
	if err != nil {
		return fmt.Errorf("ckpt: local segment %d: %w", c.local, err)
	}
	// The disk board (a few records per rank, used on rank 0 with a disk
	// level) makes it O(N) bytes, nearly all of them never touched.
	seg.Sparse()
	c.mu.Lock()
	c.n, c.rank = n, rank
	c.mu.Unlock()
	return nil
}

// layoutNow is sharedLayout for the runtime's placement now (its live
// ranks and their hosts). The checkpointers of one process that ask for
// the same placement in turn (the ranks of a simulation, one after the
// other) take the last layout built, without reading every rank's host
// and encoding the inputs again: O(1) each, not O(N).
func (c *Checkpointer) layoutNow() *layout {
	at := c.rt.Placement()
	if m := lastPlaced.Load(); m != nil && m.at == at && m.k == c.cfg.Mirrors {
		return m.lay
	}
	lay := sharedLayout(c.hosts(), c.cfg.Mirrors, c.rt.LiveRanks())
	if c.rt.Placement() == at { // no other view came in between
		lastPlaced.Store(&placedLayout{at: at, k: c.cfg.Mirrors, lay: lay})
	}
	return lay
}

// placedLayout is the layout last built for a placement and mirror count.
type placedLayout struct {
	at  pgas.Placement
	k   int
	lay *layout
}

var lastPlaced atomic.Pointer[placedLayout]

func (c *Checkpointer) hosts() []string {
	n := c.rt.Size()
	hs := make([]string, n)
	for r := range hs {
		hs[r] = c.rt.Host(r)
	}
	return hs
}

func (c *Checkpointer) localSize(n int) int64 {
	return c.boardOff() + int64(n)*recordRing*recordLen + 8 + (inboxCap+outboxCap)*reportLen // inbox.go
}
func (c *Checkpointer) zeroOff() int64     { return 2 * c.slot }
func (c *Checkpointer) recordOff() int64   { return 2*c.slot + 64 }
func (c *Checkpointer) boardOff() int64    { return 2*c.slot + 128 }
func (c *Checkpointer) bufOff(b int) int64 { return int64(b) * c.slot }

func (c *Checkpointer) mirrorSize(capacity int) int64 {
	return max(int64(capacity)*2*c.slot, 64)
}

func (c *Checkpointer) slotOff(pos, s int) int64 { return int64(pos*2+s) * c.slot }
