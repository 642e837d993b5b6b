package terasort

// The distributed sort's checkpoints and recovery.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/gaspigo/gaspigo/apps/internal/recovery"
	"github.com/gaspigo/gaspigo/ckpt"
	"github.com/gaspigo/gaspigo/kvshuffle"
)

// stateBytes bounds a shuffle state: the names of the spill files, plus
// the in-memory data (at most the budget) when checkpoints carry it.
func (j *sortJob) stateBytes() int64 {
	if !j.c.CkptInMemory {
		return 8 + 4<<20
	}
	return 8 + j.c.Shuffle.MemoryBudget + j.c.Shuffle.MemoryBudget/4 + 1<<20
}

// errStartOver: a rank failed before checkpoint 1 was committed; every
// rank (the promoted spare too, the choice is collective in Restore)
// samples again and starts the shuffle over.
var errStartOver = errors.New("terasort: no checkpoint committed yet: start over")

func (j *sortJob) newCheckpoints(ctx context.Context) error {
	n := j.rt.Size()
	minCount := j.total / int64(n) // the fewest records a rank has
	// Checkpoints c = C, 2C, ... below every rank's record count.
	j.maxCk = (minCount - 1) / j.c.CkptRecords * j.c.CkptRecords
	j.state = make([]byte, j.stateBytes())
	j.phase = make([]byte, 24)
	cfg := ckpt.DefaultConfig()
	cfg.Mirrors = j.c.Mirrors
	cfg.MaxBytes = int64(len(j.hdr) + len(j.state) + len(j.phase))
	ck, err := ckpt.New(ctx, j.rt, cfg)
	if ck == nil {
		return err
	}
	// ck with an error: a rank failed during the setup; Restore finishes it.
	// The state region is variable: a checkpoint saves and mirrors its
	// length prefix and the state in use, not the whole bound.
	used := func() int { return 8 + int(binary.LittleEndian.Uint64(j.state)) }
	for _, rerr := range []error{ck.Register("splitters", j.hdr), ck.RegisterVar("shuffle-state", j.state, used), ck.Register("phase", j.phase)} {
		if rerr != nil {
			ck.Close()
			return rerr
		}
	}
	j.ck = ck
	return err
}

// commit takes checkpoint id: id 1 is the start (empty state), id c+1
// the shuffle's checkpoint c, whose state it waits for (kvshuffle State).
// The send loop starts shuffle checkpoints with checkpoint and leaves
// this to the committer goroutine.
func (j *sortJob) commit(ctx context.Context, id uint64) error {
	clear(j.phase) // not the final checkpoint
	if id > 1 {
		c := id - 1
		st, err := j.sh.State(ctx, c)
		if err != nil {
			return err
		}
		if len(st) > len(j.state)-8 {
			return fmt.Errorf("terasort: checkpoint %d: the shuffle state has %d bytes, the region %d", c, len(st), len(j.state)-8)
		}
		binary.LittleEndian.PutUint64(j.state, uint64(len(st)))
		copy(j.state[8:], st)
	}
	if err := j.ck.Start(ctx, id); err != nil {
		return err
	}
	if err := j.ck.Commit(ctx, id); err != nil {
		return err
	}
	if id > 1 {
		j.sh.Release(id - 1)
	}
	j.ckpts++
	return nil
}

// checkpoint starts checkpoint id (the shuffle's checkpoint id-1) from
// the send loop, asynchronously: it waits for the previous checkpoint's
// commit, marks the shuffle (the markers are queued behind the data
// sent so far), and hands the rest to a committer goroutine, which waits
// for the shuffle's state (the receivers cut and spill in the background)
// and commits it with package ckpt. The send loop goes on at once; the
// checkpoint is complete when its commit is agreed, and until then a
// recovery goes back to the one before.
func (j *sortJob) checkpoint(ctx context.Context, id uint64) error {
	t0 := time.Now()
	defer func() { j.ckptDur += time.Since(t0) }()
	if err := j.joinCommit(); err != nil {
		return err
	}
	c := id - 1
	if err := j.sh.MarkConsumed(c); err != nil {
		return err
	}
	if err := j.sh.Mark(ctx, c); err != nil {
		return err
	}
	cctx, cancel := context.WithCancel(ctx)
	cm := &committer{cancel: cancel, done: make(chan error, 1)}
	j.cm = cm
	go func() {
		t := time.Now()
		err := j.commit(cctx, id)
		if err == nil {
			j.ckptBg += time.Since(t)
		}
		cm.done <- err
	}()
	return nil
}

// committer is the goroutine committing a checkpoint in the background,
// owned by the sortJob: joinCommit or abandonCommit end it, before any
// other use of the checkpointer or of a collective.
type committer struct {
	cancel context.CancelFunc
	done   chan error
}

// joinCommit waits for the checkpoint in flight, if any, and returns its
// error.
func (j *sortJob) joinCommit() error {
	if j.cm == nil {
		return nil
	}
	err := <-j.cm.done
	j.cm.cancel()
	j.cm = nil
	return err
}

// abandonCommit stops the checkpoint in flight, if any, and waits for it:
// a failure elsewhere makes every rank recover, and that checkpoint may or
// may not have been committed (Restore decides).
func (j *sortJob) abandonCommit() {
	if j.cm != nil {
		j.cm.cancel()
		<-j.cm.done
		j.cm = nil
	}
}

// rejoin recovers from cause (nil for a promoted spare).
func (j *sortJob) rejoin(ctx context.Context, cause error) error {
	joining := cause == nil // a promoted spare joins a recovery under way
	return j.recovery(joining).Rejoin(ctx, cause)
}

// recovery is the sort's recovery loop; joining: this rank is a promoted
// spare, and every failure it sees interrupts a recovery under way.
func (j *sortJob) recovery(joining bool) *recovery.Loop {
	return recovery.Printing(j.rt, joining, j.printf, func(ctx context.Context) (string, error) {
		c, err := j.restore(ctx)
		if err != nil {
			return "", err
		}
		j.recov++
		return fmt.Sprintf("rolled back to checkpoint %d (records sent per rank)", c), nil
	})
}

func (j *sortJob) restore(ctx context.Context) (uint64, error) {
	id, err := j.ck.Restore(ctx)
	if errors.Is(err, ckpt.ErrNoCheckpoint) || (err == nil && id == 0) {
		return 0, errStartOver
	}
	if err != nil {
		return 0, err
	}
	j.done = false
	if binary.LittleEndian.Uint64(j.phase) == 1 {
		// The final checkpoint: every part is in place; nothing to redo.
		j.done = true
		j.totals = Summary{Records: int64(binary.LittleEndian.Uint64(j.phase[8:])), Checksum: binary.LittleEndian.Uint64(j.phase[16:])}
		return id - 1, nil
	}
	if j.part == nil {
		if err := j.splittersFromHeader(); err != nil {
			return 0, err
		}
	}
	if j.sh == nil {
		if j.sh, err = kvshuffle.New(ctx, j.rt, j.cfg); err != nil {
			return 0, err
		}
	}
	l := binary.LittleEndian.Uint64(j.state)
	if l > uint64(len(j.state)-8) {
		return 0, fmt.Errorf("terasort: checkpoint %d: state length %d exceeds its region (%d bytes)", id, l, len(j.state)-8)
	}
	if err := j.sh.RollBack(ctx, j.state[8:8+l]); err != nil {
		return 0, err
	}
	return id - 1, nil
}
