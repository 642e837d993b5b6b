package ckpt

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"syscall"
	"time"

	"github.com/gaspigo/gaspigo/pgas"
)

// A disk checkpoint that cannot be written is never silent: the write is
// retried while the failure looks transient (the process ran out of file
// descriptors), then the loss is logged at Error, counted (Stats.DiskLost)
// and kept: FlushDisk, VerifyDisk and Close return a *DiskError from then
// on, even when later checkpoints were written.

// diskAttempts is how many times a snapshot write is tried when it fails
// for want of file descriptors; diskRetryPause the first pause (doubled
// each time).
const (
	diskAttempts   = 5
	diskRetryPause = 50 * time.Millisecond
	maxLostIDs     = 16
	diskReserveFDs = 2
)

// diskLoss is the sticky record of lost disk checkpoints, under c.mu.
type diskLoss struct {
	n     uint64   // writes (and, on rank 0, manifests) lost
	ids   []uint64 // the first maxLostIDs checkpoint ids lost
	first error    // the first cause
	// reserve holds a few descriptors open, released when a write fails
	// for want of descriptors so that its retry can get them.
	reserve []*os.File
}

// fdExhausted reports whether err says the process or system has no
// descriptor left.
func fdExhausted(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}

// reserveFDs takes the descriptor reserve, if it is not held.
func (c *Checkpointer) reserveFDs() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.loss.reserve) < diskReserveFDs {
		f, err := os.Open(os.DevNull)
		if err != nil {
			return
		}
		c.loss.reserve = append(c.loss.reserve, f)
	}
}

// releaseFDs gives the reserve back to the process.
func (c *Checkpointer) releaseFDs() {
	c.mu.Lock()
	r := c.loss.reserve
	c.loss.reserve = nil
	c.mu.Unlock()
	for _, f := range r {
		f.Close()
	}
}

// writeSnapRetrying is writeSnap, retried when the process has run out of
// file descriptors (after releasing the reserve), within diskAttempts.
func (c *Checkpointer) writeSnapRetrying(j diskJob) (int64, uint32, error) {
	pause := diskRetryPause
	for attempt := 1; ; attempt++ {
		size, crc, err := c.writeSnap(j)
		if err == nil {
			c.reserveFDs()
			return size, crc, nil
		}
		if !fdExhausted(err) || attempt == diskAttempts {
			return 0, 0, err
		}
		c.releaseFDs()
		c.log.Warn("disk checkpoint write: out of file descriptors; retrying", "rank", c.rank, "id", j.id, "attempt", attempt, "retry_in", pause, "err", err)
		select {
		case <-time.After(pause):
		case <-c.ctx.Done():
			return 0, 0, err
		}
		pause *= 2
	}
}

// noteLostLocked records that checkpoint id could not be written (what:
// "write" or "manifest"); the caller logs it with logLost once c.mu is
// released. c.mu is held.
func (c *Checkpointer) noteLostLocked(id uint64, err error) {
	c.loss.n++
	if len(c.loss.ids) < maxLostIDs && !slices.Contains(c.loss.ids, id) {
		c.loss.ids = append(c.loss.ids, id)
	}
	if c.loss.first == nil {
		c.loss.first = err
	}
	c.st.DiskLost = c.loss.n
	c.signalLocked()
}

// logLost says at Error that a disk checkpoint was lost.
func (c *Checkpointer) logLost(rank int, id uint64, what string, err error) {
	c.log.Error("disk checkpoint LOST: the disk level does not have it", "rank", rank, "id", id, "step", what, "err", err)
}

// diskErrLocked is the sticky *DiskError, or nil. c.mu is held.
func (c *Checkpointer) diskErrLocked() error {
	if c.loss.n == 0 {
		return nil
	}
	return &DiskError{Rank: c.rank, Lost: c.loss.n, IDs: slices.Clone(c.loss.ids), Dir: c.cfg.Dir, Err: c.loss.first}
}

// DiskErr returns a *DiskError when this rank has lost a disk checkpoint
// since New, and nil otherwise (also without a disk level).
func (c *Checkpointer) DiskErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.diskErrLocked()
}

// VerifyDisk is collective: every rank waits until its disk writes of the
// checkpoints committed so far are done, then the ranks agree whether any
// of them lost one. If one did, every rank returns an error wrapping
// ErrDiskLost (this rank's *DiskError, when it lost one itself);
// otherwise rank 0 waits for the manifest of the last checkpoint, so that
// the directory is complete when VerifyDisk returns nil. With no disk level
// it returns nil at once on every rank (no collective runs). An
// application calls it before it reports success.
func (c *Checkpointer) VerifyDisk(ctx context.Context) error {
	if c.cfg.Dir == "" {
		return nil
	}
	if err := c.waitFor(ctx, "this rank's disk writes", func() bool {
		return len(c.disk.jobs) == 0 && !c.disk.running
	}); err != nil {
		return err
	}
	c.mu.Lock()
	own := c.diskErrLocked()
	lost := c.loss.n
	c.mu.Unlock()
	vals := []uint64{lost}
	if err := pgas.Allreduce(ctx, c.rt, nil, vals, pgas.OpSum); err != nil {
		return fmt.Errorf("ckpt: verify disk: agreeing on lost checkpoints: %w", err)
	}
	if own != nil {
		return own
	}
	if vals[0] > 0 {
		return fmt.Errorf("%w: %d disk checkpoint writes failed on other ranks (their logs name the checkpoints); the checkpoints in %s are incomplete",
			ErrDiskLost, vals[0], c.cfg.Dir)
	}
	return c.FlushDisk(ctx)
}
