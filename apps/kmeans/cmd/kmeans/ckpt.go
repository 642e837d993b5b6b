package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"

	"github.com/gaspigo/gaspigo/apps/kmeans"
	"github.com/gaspigo/gaspigo/ckpt"
	"github.com/gaspigo/gaspigo/pgas"
)

// checkpoints adapts ckpt.Checkpointer to the job: when no in-memory copy
// survives (a loss beyond redundancy) and the disk level is on, Restore
// falls back to the newest complete checkpoint on disk.
type checkpoints struct {
	*ckpt.Checkpointer
	dir string
	rt  *pgas.Runtime
}

func (c *checkpoints) Restore(ctx context.Context) (uint64, error) {
	id, err := c.Checkpointer.Restore(ctx)
	if err == nil || c.dir == "" || !(errors.Is(err, ckpt.ErrNoCheckpoint) || errors.Is(err, ckpt.ErrRestoreFailed)) {
		return id, err
	}
	if c.rt.Rank() == 0 {
		fmt.Printf("recovery: no in-memory copy survived (%v); loading the disk level in %s\n", err, c.dir)
	}
	return c.LoadFromDisk(ctx, c.dir)
}

func newCheckpoints(ctx context.Context, rt *pgas.Runtime, job *kmeans.Job, f *flags) (*checkpoints, error) {
	cfg := ckpt.DefaultConfig()
	cfg.Mirrors = f.mirrors
	cfg.MaxBytes = job.StateBytes()
	cfg.Dir = f.ckptDir
	ck, err := ckpt.New(ctx, rt, cfg)
	if err != nil {
		return nil, err
	}
	return &checkpoints{Checkpointer: ck, dir: f.ckptDir, rt: rt}, nil
}

// resume loads the disk level named by gaspirun --resume (PGAS_RESUME).
func resume(ctx context.Context, c *checkpoints, job *kmeans.Job) error {
	dir := os.Getenv("PGAS_RESUME")
	if dir == "" || c.rt.StartedAsSpare() {
		return nil // a promoted spare joins the survivors' restore instead
	}
	var note string
	id, err := uint64(0), error(nil)
	if job.Shards() {
		// Logical shards: the checkpoint may come from another number of
		// ranks.
		id, note, err = job.ResumeFrom(dir)
	} else if id, err = c.LoadFromDisk(ctx, dir); err == nil {
		note, err = job.Resumed(id)
	}
	if err != nil {
		return fmt.Errorf("resume from %s: %w", dir, err)
	}
	if c.rt.Rank() == 0 {
		fmt.Printf("resumed from checkpoint %d in %s: continuing after iteration %d\n", id, dir, job.Iteration())
		fmt.Printf("resume: %s\n", note)
	}
	return nil
}

func formatFloat(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
