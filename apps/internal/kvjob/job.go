package kvjob

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/gaspigo/gaspigo/apps/internal/recovery"
	"github.com/gaspigo/gaspigo/ckpt"
	"github.com/gaspigo/gaspigo/kvshuffle"
	"github.com/gaspigo/gaspigo/pgas"
)

// Config is one rank's frame. Every rank passes equivalent values.
type Config struct {
	Name    string           // the program's name, for messages
	Shuffle kvshuffle.Config // validated by kvshuffle.New
	// App is the program's checkpoint region, holding its initial state.
	App []byte
	// StateBytes bounds a shuffle (or stream) state in bytes.
	StateBytes int
	Mirrors    int // copies of each checkpoint on other ranks, >= 1
	// Restored is called after every restore, App holding the restored
	// bytes (or the initial ones when no checkpoint was committed).
	Restored func() error
	// RollBack, if set, is called instead of the shuffle's RollBack with
	// the restored state (nil: none): a kvshuffle Stream's RollBack.
	RollBack func(ctx context.Context, sh *kvshuffle.Shuffle, state []byte) error
	// Out receives rank 0's recovery lines; nil discards them.
	Out io.Writer
	// Kill, if set, is the program's --inject; Start fires it when its
	// Phase is "ckpt-new" (the program fires the others), printing on Out.
	Kill *Kill
}

// Job is one rank's frame: the shuffle, its checkpoints and recovery.
type Job struct {
	RT *pgas.Runtime
	Sh *kvshuffle.Shuffle

	cfg   Config
	ck    *ckpt.Checkpointer
	init  []byte // App's initial bytes
	state []byte // ckpt region: 8-byte length + state
	seq   uint64 // the last ckpt id committed or restored

	Recoveries  int
	Checkpoints int
	CkptTime    time.Duration
}

// Start sets up the rank's checkpoints and shuffle and commits the
// initial checkpoint (id 1); a promoted spare restores with the
// survivors instead. A failure on the way is recovered.
func Start(ctx context.Context, rt *pgas.Runtime, cfg Config) (*Job, error) {
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	if cfg.Mirrors < 1 {
		return nil, fmt.Errorf("%s: mirrors %d: want at least 1", cfg.Name, cfg.Mirrors)
	}
	j := &Job{RT: rt, cfg: cfg, init: append([]byte(nil), cfg.App...), state: make([]byte, 8+cfg.StateBytes)}
	cc := ckpt.DefaultConfig()
	cc.Mirrors = cfg.Mirrors
	cc.MaxBytes = int64(len(cfg.App) + len(j.state))
	if cfg.Kill.armedIn(rt, "ckpt-new") {
		cfg.Kill.Fire(cfg.Out, rt.Rank(), "in the setup, before the checkpointer's creation")
	}
	ck, err := ckpt.New(ctx, rt, cc)
	if ck == nil {
		return nil, err
	}
	j.ck = ck
	used := func() int { return 8 + int(binary.LittleEndian.Uint64(j.state)) }
	for _, rerr := range []error{ck.Register("app", cfg.App), ck.RegisterVar("shuffle-state", j.state, used)} {
		if rerr != nil {
			j.Close()
			return nil, rerr
		}
	}
	switch {
	case rt.StartedAsSpare():
		err = j.loop(true).Rejoin(ctx, nil)
	case err == nil:
		if j.Sh, err = kvshuffle.New(ctx, rt, cfg.Shuffle); err != nil {
			j.Sh = nil
		} else {
			err = j.Save(ctx, nil)
		}
	}
	if err = j.Recover(ctx, err); err != nil {
		j.Close()
		return nil, err
	}
	return j, nil
}

// Close releases the shuffle and the checkpointer.
func (j *Job) Close() {
	if j.Sh != nil {
		j.Sh.Close()
	}
	if j.ck != nil {
		j.ck.Close()
	}
}

// Checkpoint takes the shuffle's key-count checkpoint c (c = 0: an empty
// state) and commits it with the App region.
func (j *Job) Checkpoint(ctx context.Context, c uint64) error {
	var st []byte
	if c > 0 {
		var err error
		if st, err = j.Sh.Checkpoint(ctx, c); err != nil {
			return err
		}
	}
	if err := j.Save(ctx, st); err != nil {
		return err
	}
	if c > 0 {
		j.Sh.Release(c)
	}
	return nil
}

// Save commits the App region and state (a shuffle or stream state; nil:
// empty) as the next checkpoint. It is collective.
func (j *Job) Save(ctx context.Context, st []byte) error {
	t0 := time.Now()
	if len(st) > len(j.state)-8 {
		return fmt.Errorf("%s: a shuffle state of %d bytes exceeds its region (%d bytes)", j.cfg.Name, len(st), len(j.state)-8)
	}
	binary.LittleEndian.PutUint64(j.state, uint64(len(st)))
	copy(j.state[8:], st)
	id := j.seq + 1
	if err := j.ck.Start(ctx, id); err != nil {
		return err
	}
	if err := j.ck.Commit(ctx, id); err != nil {
		return err
	}
	j.seq = id
	j.Checkpoints++
	j.CkptTime += time.Since(t0)
	return nil
}

// Recover returns nil when err is nil or once a recovery from it
// completed (every rank restored), else the error that ends the job.
func (j *Job) Recover(ctx context.Context, err error) error {
	for err != nil {
		if !recovery.Needed(err) && !errors.Is(err, kvshuffle.ErrAborted) {
			return err
		}
		err = j.loop(false).Rejoin(ctx, err)
	}
	return nil
}

// Finalize ends the job for this rank; a rank lost meanwhile is
// recovered, resume redoes what the restored checkpoint lacks, and the
// ranks finalize again. A failure of Finalize itself, after the work was
// agreed, is reported on stderr only.
func (j *Job) Finalize(ctx context.Context, resume func(ctx context.Context) error) error {
	err := recovery.Finalize(ctx, j.RT, func(ctx context.Context, cause error) error {
		if err := j.Recover(ctx, cause); err != nil {
			return err
		}
		return resume(ctx)
	})
	if fe := (*recovery.FinalizeError)(nil); errors.As(err, &fe) {
		if !errors.Is(fe.Err, pgas.ErrClosed) {
			fmt.Fprintf(os.Stderr, "%s: finalize: %v\n", j.cfg.Name, fe.Err)
		}
		return nil
	}
	return err
}

// Printf prints on rank 0's Out.
func (j *Job) Printf(format string, args ...any) {
	if j.RT.Rank() == 0 {
		fmt.Fprintf(j.cfg.Out, format, args...)
	}
}

// loop is the recovery loop; joining: a promoted spare.
func (j *Job) loop(joining bool) *recovery.Loop {
	return recovery.Printing(j.RT, joining, j.Printf, func(ctx context.Context) (string, error) {
		id, err := j.restore(ctx)
		if err != nil {
			return "", err
		}
		j.Recoveries++
		return fmt.Sprintf("restored checkpoint %d", id), nil
	})
}

// restore rolls the rank back to the last committed checkpoint, or to
// the initial state when none was committed.
func (j *Job) restore(ctx context.Context) (uint64, error) {
	id, err := j.ck.Restore(ctx)
	if errors.Is(err, ckpt.ErrNoCheckpoint) {
		id, err = 0, nil
	}
	if err != nil {
		return 0, err
	}
	if id == 0 {
		copy(j.cfg.App, j.init)
		binary.LittleEndian.PutUint64(j.state, 0)
	}
	if j.Sh == nil {
		if j.Sh, err = kvshuffle.New(ctx, j.RT, j.cfg.Shuffle); err != nil {
			j.Sh = nil
			return 0, err
		}
	}
	l := binary.LittleEndian.Uint64(j.state)
	if l > uint64(len(j.state)-8) {
		return 0, fmt.Errorf("%s: checkpoint %d: state length %d exceeds its region (%d bytes)", j.cfg.Name, id, l, len(j.state)-8)
	}
	var st []byte
	if l > 0 {
		st = j.state[8 : 8+l]
	}
	if j.cfg.RollBack != nil {
		err = j.cfg.RollBack(ctx, j.Sh, st)
	} else {
		err = j.Sh.RollBack(ctx, st)
	}
	if err != nil {
		return 0, err
	}
	j.seq = id
	if id == 0 {
		// Nothing was committed: commit the initial state, so ids go on
		// from 1 on every rank alike.
		if err := j.Save(ctx, nil); err != nil {
			return 0, err
		}
	}
	if j.cfg.Restored != nil {
		if err := j.cfg.Restored(); err != nil {
			return 0, err
		}
	}
	return id, nil
}
