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
// survives (a loss beyond redundancy, or a failure before the resume from
// disk completed), Restore falls back to the newest complete checkpoint
// of the disk level, then to the one the job resumes from (gaspirun
// --resume). Every rank takes the same path: each step's outcome is
// agreed.
type checkpoints struct {
	*ckpt.Checkpointer
	dirs []string // the disk level ("": none), then the resume directory if any
	rt   *pgas.Runtime
}

func (c *checkpoints) Restore(ctx context.Context) (uint64, error) {
	id, err := c.Checkpointer.Restore(ctx)
	for _, dir := range c.dirs {
		if err == nil || !(errors.Is(err, ckpt.ErrNoCheckpoint) || errors.Is(err, ckpt.ErrRestoreFailed)) {
			return id, err
		}
		if dir == "" {
			continue
		}
		if c.rt.Rank() == 0 {
			fmt.Printf("recovery: no in-memory copy survived (%v); loading the disk level in %s\n", err, dir)
		}
		id, err = c.LoadFromDisk(ctx, dir)
	}
	return id, err
}

// newCheckpoints makes the job's checkpointer; joining: locally (see
// kmeans Job.Joining). It returns it with an error when a rank failed
// during the collective setup, as ckpt.New does.
func newCheckpoints(ctx context.Context, rt *pgas.Runtime, job *kmeans.Job, f *flags, joining bool) (*checkpoints, error) {
	cfg := ckpt.DefaultConfig()
	cfg.Mirrors = f.mirrors
	cfg.MaxBytes = job.StateBytes()
	cfg.Dir = f.ckptDir
	mk := ckpt.New
	if joining {
		mk = ckpt.NewJoining
	}
	ck, err := mk(ctx, rt, cfg)
	if ck == nil {
		return nil, err
	}
	c := &checkpoints{Checkpointer: ck, dirs: []string{f.ckptDir}, rt: rt}
	if dir := os.Getenv("PGAS_RESUME"); dir != "" && !job.Shards() {
		// Logical shards resume with job.ResumeFrom, which is local.
		c.dirs = append(c.dirs, dir)
	}
	return c, err
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
		fmt.Printf("resumed from checkpoint %d in %s at iteration %d\n", id, dir, job.Iteration()) // the next line says what follows
		fmt.Printf("resume: %s\n", note)
	}
	return nil
}

func formatFloat(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
