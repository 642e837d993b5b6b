package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/gaspigo/gaspigo/apps/terasort"
	"github.com/gaspigo/gaspigo/ckpt"
	"github.com/gaspigo/gaspigo/kvshuffle"
	"github.com/gaspigo/gaspigo/pgas"
)

// setSplitters installs the agreed splitters and copies them into the
// checkpoint header region.
func (j *sortJob) setSplitters(sp [][]byte) error {
	if len(sp)*terasort.KeySize != len(j.hdr) {
		return fmt.Errorf("terasort: %d splitters for %d ranks, want %d", len(sp), j.rt.Size(), j.rt.Size()-1)
	}
	for i, s := range sp {
		if len(s) != terasort.KeySize {
			return fmt.Errorf("terasort: splitter %d has %d bytes, want %d", i, len(s), terasort.KeySize)
		}
		copy(j.hdr[i*terasort.KeySize:], s)
	}
	p, err := terasort.NewPartitioner(sp)
	if err != nil {
		return err
	}
	j.part = p
	return nil
}

// splittersFromHeader reads the splitters back from the header region.
func (j *sortJob) splittersFromHeader() error {
	sp := make([][]byte, len(j.hdr)/terasort.KeySize)
	for i := range sp {
		sp[i] = bytes.Clone(j.hdr[i*terasort.KeySize : (i+1)*terasort.KeySize])
	}
	return j.setSplitters(sp)
}

// stateBytes bounds a shuffle state: the names of the spill files, plus
// the in-memory data (at most the budget) when checkpoints carry it.
func (j *sortJob) stateBytes() int64 {
	if !j.f.ckptMem {
		return 8 + 4<<20
	}
	return 8 + j.f.memory + j.f.memory/4 + 1<<20
}

// errStartOver: a rank failed before checkpoint 1 was committed; every
// rank (the promoted spare too, the choice is collective in Restore)
// samples again and starts the shuffle over.
var errStartOver = errors.New("terasort: no checkpoint committed yet: start over")

func (j *sortJob) newCheckpoints(ctx context.Context) error {
	n := j.rt.Size()
	minCount := j.total / int64(n) // the fewest records a rank has
	// Checkpoints c = C, 2C, ... below every rank's record count.
	j.maxCk = (minCount - 1) / j.f.ckptEvery * j.f.ckptEvery
	j.state = make([]byte, j.stateBytes())
	j.phase = make([]byte, 24)
	cfg := ckpt.DefaultConfig()
	cfg.Mirrors = j.f.mirrors
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
// the shuffle's checkpoint c.
func (j *sortJob) commit(ctx context.Context, id uint64) error {
	t0 := time.Now()
	clear(j.phase) // not the final checkpoint
	if id > 1 {
		c := id - 1
		if err := j.sh.MarkConsumed(c); err != nil {
			return err
		}
		st, err := j.sh.Checkpoint(ctx, c)
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
	j.ckptDur += time.Since(t0)
	return nil
}

func needsRecovery(err error) bool {
	return pgas.NeedsRecovery(err) || errors.Is(err, ckpt.ErrNeedsRestore)
}

// rejoin recovers from cause (nil for a promoted spare).
func (j *sortJob) rejoin(ctx context.Context, cause error) error {
	restoring := cause == nil // a promoted spare joins a recovery under way
	for {
		t0 := time.Now()
		if cause != nil {
			if restoring {
				j.printf("recovery: interrupted by another failure, recovering again: %v\n", cause)
			} else {
				j.printf("recovery: %v\n", cause)
			}
			if err := j.rt.Recover(ctx); err != nil {
				return err
			}
		}
		c, err := j.restore(ctx)
		if err == nil {
			j.recov++
			j.printf("recovery: epoch %d; rolled back to checkpoint %d (records sent per rank) in %v\n", j.rt.Epoch(), c, time.Since(t0).Round(time.Millisecond))
			return nil
		}
		if !needsRecovery(err) {
			return err
		}
		cause, restoring = err, true
	}
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
		j.totals = terasort.Summary{Records: int64(binary.LittleEndian.Uint64(j.phase[8:])), Checksum: binary.LittleEndian.Uint64(j.phase[16:])}
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

// attempt sends this rank's records from Consumed() on (checkpointing on
// the way), ends the stream, and writes the received partition to tmp.
func (j *sortJob) attempt(ctx context.Context, tmp string) (terasort.Summary, error) {
	var sum terasort.Summary
	from := int64(j.sh.Consumed())
	next := int64(-1) // the next checkpoint's record count
	if j.ck != nil && j.f.ckptEvery > 0 {
		next = (from/j.f.ckptEvery + 1) * j.f.ckptEvery
		if next > j.maxCk {
			next = -1
		}
	}
	err := terasort.ReadShards(ctx, j.shards, from, 0, func(blk []byte, first int64) error {
		for off := 0; off < len(blk); off += terasort.RecordSize {
			i := first + int64(off/terasort.RecordSize)
			if i == next {
				if err := j.commit(ctx, uint64(i)+1); err != nil {
					return err
				}
				next += j.f.ckptEvery
				if next > j.maxCk {
					next = -1
				}
			}
			if i == j.killAt {
				if j.f.inject.diskLost {
					if err := j.sh.LoseSpillDir(); err != nil {
						return fmt.Errorf("inject: %w", err)
					}
					fmt.Fprintf(j.out, "inject: rank %d's spill directory %s removed (its host's disk is lost)\n", j.rt.Rank(), j.cfg.SpillDir)
				}
				fmt.Fprintf(j.out, "inject: SIGKILL rank %d (pid %d) after %d of its %d records\n", j.rt.Rank(), os.Getpid(), i, j.mine)
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {} // the signal is on its way
			}
			if err := j.sh.Send(ctx, blk[off:off+terasort.RecordSize], nil); err != nil {
				return err
			}
		}
		return j.sh.MarkConsumed(uint64(first) + uint64(len(blk)/terasort.RecordSize))
	})
	if err != nil {
		return sum, err
	}
	if err := j.sh.CloseSend(ctx); err != nil {
		return sum, err
	}
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return sum, fmt.Errorf("terasort: %w", err)
	}
	w := bufio.NewWriterSize(f, 1<<20)
	var werr error
	for k, v := range j.sh.Recv(ctx) {
		if len(k) != terasort.RecordSize || len(v) != 0 {
			werr = fmt.Errorf("terasort: received a pair of %d+%d bytes, want a %d-byte record", len(k), len(v), terasort.RecordSize)
			break
		}
		sum.Records++
		sum.Checksum += uint64(terasort.RecordCRC(k))
		if _, werr = w.Write(k); werr != nil {
			break
		}
	}
	if err := j.sh.Err(); err != nil {
		f.Close()
		return sum, err
	}
	if werr == nil {
		werr = w.Flush()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return sum, fmt.Errorf("terasort: write %s: %w", tmp, werr)
	}
	return sum, nil
}

// peakRSS returns this process's peak resident set (VmHWM) as reported
// by Linux, or "?" elsewhere.
func peakRSS() string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "?"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			return strings.Join(strings.Fields(v), "")
		}
	}
	return "?"
}
