package terasort

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gaspigo/gaspigo/apps/internal/kvjob"
	"github.com/gaspigo/gaspigo/kvshuffle"
	"github.com/gaspigo/gaspigo/pgas"
)

// completion is the sort's last phase, which a recovery while the ranks
// finalize runs again: until every rank's part is written and agreed (the
// final checkpoint, which records the totals), a failure anywhere on the
// way rolls every rank back and the attempt is made again; then, once,
// the figures and the totals.
type completion struct {
	j          *sortJob
	rank, size int
	tmp        string        // this rank's part being written
	t0         time.Time     // the run's start
	tSample    time.Duration // the setup's time, the sampling included
	tShuffle   time.Time     // the first attempt's start
	sum        Summary       // the last attempt's part
	st         kvshuffle.Stats
	printed    bool
}

// complete attempts until the final checkpoint is in, then reports.
func (c *completion) complete(ctx context.Context) error {
	j := c.j
	for !j.done {
		var err error
		c.sum, err = j.attempt(ctx, c.tmp)
		if err == nil {
			c.st = j.sh.Stats()
			err = j.finish(ctx, c.tmp, c.sum)
		}
		if err != nil {
			if err = j.recoverLoop(ctx, err); err != nil {
				return err
			}
		}
	}
	if c.printed {
		return nil
	}
	c.printed = true
	c.report()
	if err := j.markComplete(ctx); err != nil {
		return err
	}
	j.printf("%s\n", j.totals)
	return nil
}

// report prints this rank's figures (when it sent or received anything)
// and rank 0's line of the job's times.
func (c *completion) report() {
	j, sum, st := c.j, c.sum, c.st
	shuffleTime := time.Since(c.tShuffle)
	if sum.Records > 0 || st.PairsSent > 0 {
		fmt.Fprintf(j.c.Stdout, "sort: rank %d input=%d output=%d pairs_sent=%d pairs_received=%d spills=%d spill_bytes=%d copied_bytes=%d held_bytes=%d fetched_bytes=%d memory_peak=%d budget=%d rss_peak=%s\n",
			c.rank, j.mine, sum.Records, st.PairsSent, st.PairsReceived, st.Spills, st.SpillBytes, st.CopiedBytes, st.HeldBytes, st.FetchedBytes, st.MemoryPeak, j.c.Shuffle.MemoryBudget, kvjob.PeakRSS())
	}
	j.printf("sort: ranks=%d records=%d sample=%.3fs shuffle+write=%.3fs (send %.3fs, merge+write %.3fs) total=%.3fs (%.0f MB/s) checkpoints=%d (%.3fs) ckpt_background=%.3fs recoveries=%d\n",
		c.size, j.total, c.tSample.Seconds(), shuffleTime.Seconds(), j.sendDur.Seconds(), time.Since(j.attemptStart.Add(j.sendDur)).Seconds(), time.Since(c.t0).Seconds(),
		float64(j.total*RecordSize)/1e6/time.Since(c.t0).Seconds(), j.ckpts, j.ckptDur.Seconds(), j.ckptBg.Seconds(), j.recov)
}

// leaveOutput tidies --out after a failed or interrupted run, so that it
// holds either a complete output or nothing of this run's: the part being
// written goes, and so does this rank's finished part unless every part
// was agreed (the final checkpoint); then rank 0 writes the marker that it
// had not written yet. (A process killed outright cleans nothing: its
// part-NNNNN.tmp stays, and the next sort's --replace removes it.)
func (j *sortJob) leaveOutput(tmp string) {
	os.Remove(tmp)
	if !j.done {
		os.Remove(filepath.Join(j.c.Out, PartName(j.rt.Rank())))
		return
	}
	if _, err := os.Stat(filepath.Join(j.c.Out, SuccessName)); j.rt.Rank() == 0 && errors.Is(err, fs.ErrNotExist) {
		WriteSuccess(j.c.Out, j.rt.Size(), j.totals)
	}
}

// markComplete writes the marker of a complete output (rank 0) once every
// rank's part is in place: after the final checkpoint's commit, or
// without checkpoints after a barrier.
func (j *sortJob) markComplete(ctx context.Context) error {
	if j.ck == nil {
		if err := j.rt.Barrier(ctx, nil); err != nil {
			return fmt.Errorf("terasort: waiting for every part before marking %s complete: %w", j.c.Out, err)
		}
	}
	if j.rt.Rank() != 0 {
		return nil
	}
	return WriteSuccess(j.c.Out, j.rt.Size(), j.totals)
}

// hostDir turns a host label into a path element for --spill's %h.
func hostDir(label string) string {
	if label == "" {
		label, _ = os.Hostname()
	}
	label = strings.NewReplacer("/", "_", "\x00", "_").Replace(label)
	if label == "" || label == "." || label == ".." {
		label = "host"
	}
	return label
}

// finalizeErr reports a failed Finalize on stderr only: every part is
// written and agreed by then, so the rank's work is done.
func finalizeErr(err error) error {
	if err != nil && !errors.Is(err, pgas.ErrClosed) {
		fmt.Fprintf(os.Stderr, "terasort sort: finalize: %v\n", err)
	}
	return nil
}

// finish agrees on the totals, renames this rank's part into place, and
// takes the final checkpoint, which records the totals: from then on a
// recovery restores the finished state instead of sorting again.
func (j *sortJob) finish(ctx context.Context, tmp string, sum Summary) error {
	all, err := pgas.Allgather(ctx, j.rt, nil, []uint64{uint64(sum.Records), sum.Checksum})
	if err != nil {
		return err
	}
	var total Summary
	for r := range j.rt.Size() {
		total = total.Add(Summary{Records: int64(all[2*r]), Checksum: all[2*r+1]})
	}
	if total.Records != j.total {
		return fmt.Errorf("terasort: sorted %d records, the input has %d", total.Records, j.total)
	}
	if err := os.Rename(tmp, filepath.Join(j.c.Out, PartName(j.rt.Rank()))); err != nil {
		return fmt.Errorf("terasort: %w", err)
	}
	if j.ck != nil {
		binary.LittleEndian.PutUint64(j.phase[0:], 1)
		binary.LittleEndian.PutUint64(j.phase[8:], uint64(total.Records))
		binary.LittleEndian.PutUint64(j.phase[16:], total.Checksum)
		id := uint64(j.maxCk) + 2 // above every shuffle checkpoint (c+1 <= maxCk+1)
		err := j.ck.Start(ctx, id)
		if err == nil {
			err = j.ck.Commit(ctx, id)
		}
		if err != nil {
			clear(j.phase)
			return err
		}
	}
	j.done, j.totals = true, total
	return nil
}
