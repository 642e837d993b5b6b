package kmeans

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/gaspigo/gaspigo/apps/internal/recovery"
	"github.com/gaspigo/gaspigo/ckpt"
	"github.com/gaspigo/gaspigo/pgas"
)

// rejoin recovers from cause, a failure of what (nil for a promoted spare,
// which joins a recovery under way): wait for the new view, restore the
// last committed checkpoint everywhere, and agree on the job's high-water
// mark so redone iterations inject nothing.
func (j *Job) rejoin(ctx context.Context, cause error, what string) error {
	return j.recovery(what).Rejoin(ctx, cause)
}

// recovery is the job's recovery loop, reporting failures of what.
func (j *Job) recovery(what string) *recovery.Loop {
	return &recovery.Loop{RT: j.rt, Restore: j.restoreAll, Report: func(a recovery.Attempt) {
		if a.Retry {
			what = "the recovery" // another failure during the recovery
		}
		j.printf("recovery: %s failed: %s\n", what, recovery.Brief(a.Cause))
		j.event("failure", what+": "+recovery.Brief(a.Cause))
	}}
}

// restoreAll is rejoin's restore: the checkpoint, then the shards of
// vacant ranks handed out (shrinking).
func (j *Job) restoreAll(ctx context.Context, a recovery.Attempt) error {
	err := j.restore(ctx)
	if err == nil {
		err = j.st.create(ctx) // the store injections' segment (store.go), collective
	}
	if live := j.rt.LiveRanks(); err == nil && !j.opt.Shrink && len(live) < j.rt.Size() {
		// The membership shrank but this job was not told to: the
		// vacant ranks' points would silently drop out of the sums.
		var vacant []string
		for r := 0; r < j.rt.Size(); r++ {
			if j.rt.Vacant(r) {
				vacant = append(vacant, strconv.Itoa(r))
			}
		}
		return fmt.Errorf("kmeans: rank %s is vacant (the membership shrinks) but the job does not redistribute shards: run every rank with --shrink (Options.Shrink)", strings.Join(vacant, ", "))
	}
	if err == nil && j.opt.Shrink {
		var lines []string
		if lines, err = j.redistribute(); err == nil {
			for _, l := range lines {
				j.printf("%s", l)
			}
		}
	}
	if err == nil {
		j.recov++
		j.event("recovery", fmt.Sprintf("epoch %d: checkpoint of iteration %d restored", j.rt.Epoch(), j.iter))
		j.printf("recovery: epoch %d in force after %v; checkpoint of iteration %d restored after %v; %d iterations to redo\n",
			j.rt.Epoch(), a.View.Round(time.Microsecond), j.iter, time.Since(a.Started).Round(time.Microsecond), j.high-j.iter)
	}
	return err
}

// startOver is restore when no checkpoint is restorable (noCk is
// ckpt.ErrNoCheckpoint or nil): if no rank ever committed or loaded one,
// a rank failed before the starting checkpoint was committed, and every
// rank goes back to the starting state (the initial centroids are a
// function of the options and the data, so the run is the same). If some
// rank had one, the loss is beyond what the mirrors cover: an error.
func (j *Job) startOver(ctx context.Context, noCk error) error {
	had := []int64{int64(j.commits)}
	if j.resumed {
		had[0]++
	}
	if err := pgas.Allreduce(ctx, j.rt, nil, had, pgas.OpMax); err != nil {
		return err
	}
	if had[0] > 0 {
		if noCk == nil {
			noCk = errors.New("kmeans: no checkpoint to restore, though one was committed")
		}
		return noCk
	}
	if err := j.initCentroids(ctx); err != nil {
		return err
	}
	ids := []int64{int64(j.lastID)}
	if err := pgas.Allreduce(ctx, j.rt, nil, ids, pgas.OpMax); err != nil {
		return err
	}
	j.lastID = uint64(ids[0]) // every rank numbers its next checkpoint alike
	j.iter, j.sse, j.finished = 0, 0, false
	j.printf("recovery: no checkpoint was committed yet: every rank starts over from the initial centroids\n")
	return nil
}

func (j *Job) restore(ctx context.Context) error {
	j.pending, j.fresh = 0, false
	if j.ck == nil {
		return errors.New("kmeans: a rank failed and checkpoints are off (--ckpt-every 0): nothing to restore from")
	}
	id, err := j.ck.Restore(ctx)
	if errors.Is(err, ckpt.ErrNoCheckpoint) || (err == nil && id == 0) {
		return j.startOver(ctx, err)
	}
	if err != nil {
		return err
	}
	j.lastID = id
	high := j.high
	j.fromHeader()
	// The job's high mark, and the fewest iterations a rank that iterated
	// before completed (as a maximum of its negation): one allreduce.
	own := int64(math.MinInt64 + 1) // nothing to say: a promoted spare, or a resumed process
	if j.iterated {
		own = -int64(j.done)
	}
	h := []int64{int64(max(high, j.high)), own}
	if err := pgas.Allreduce(ctx, j.rt, nil, h, pgas.OpMax); err != nil {
		return err
	}
	j.high = int(h[0])
	j.low = j.high
	if h[1] != math.MinInt64+1 {
		j.low = min(j.high, int(-h[1]))
	}
	if j.rt.StartedAsSpare() && j.promotedAt < 0 {
		j.promotedAt = j.high
	}
	return nil
}
