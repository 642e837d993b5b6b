package kmeans

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/gaspigo/gaspigo/obs"
)

// HistoryHeader is the first line of a history CSV (Options.History).
// One line follows per iteration completed, redone ones included:
//
//	step       iterations executed so far, redone ones included (1, 2, ...)
//	iter       the iteration completed (goes back after a recovery)
//	sse        sum of squared distances after the iteration
//	moved      points whose cluster changed
//	shift      largest distance a centroid moved
//	time_s     the iteration's duration in seconds
//	elapsed_s  seconds since the loop started on the writing rank
//	epoch      the membership epoch
//	redo       1 for an iteration done again after a recovery
//	events     what happened since the previous line, ';'-separated:
//	           failure:<cause>, recovery:<what was restored>,
//	           checkpoint:<iteration>
const HistoryHeader = "step,iter,sse,moved,shift,time_s,elapsed_s,epoch,redo,events"

// history is the job's per-iteration record: trace spans on every rank,
// CSV lines from the lowest live rank when Options.History is set.
type history struct {
	w       io.Writer
	header  bool
	step    int
	pending []string
}

// event notes an event for the next line (every rank notes it; the one
// that writes the line reports it).
func (j *Job) event(kind, text string) {
	obs.Instant("iteration", kind, "text", text, "iter", j.iter)
	j.hist.pending = append(j.hist.pending, kind+":"+strings.NewReplacer(",", " ", ";", " ", "\n", " ").Replace(text))
}

// iterDone records iteration j.iter, which began at t0: its trace span,
// and a history line when this rank reports.
func (j *Job) iterDone(t0 time.Time, moved int64, shift float64) {
	redo := j.iter <= j.high
	obs.Record("iteration", "iteration", t0, "iter", j.iter, "sse", j.sse, "redo", redo)
	j.hist.step++
	events := j.hist.pending
	j.hist.pending = nil
	if j.opt.History == nil || !j.reporter() {
		return
	}
	if !j.hist.header {
		j.hist.header = true
		fmt.Fprintln(j.opt.History, HistoryHeader)
	}
	r := 0
	if redo {
		r = 1
	}
	fmt.Fprintf(j.opt.History, "%d,%d,%s,%d,%s,%.6f,%.6f,%d,%d,%s\n", j.hist.step, j.iter,
		strconv.FormatFloat(j.sse, 'g', -1, 64), moved, strconv.FormatFloat(shift, 'g', -1, 64),
		time.Since(t0).Seconds(), time.Since(j.loopStart).Seconds(), j.rt.Epoch(), r, strings.Join(events, ";"))
}
