// Command kmeans is fault-tolerant distributed K-means, run under gaspirun:
//
//	gaspirun -n 4 --spares 1 -- kmeans --generate 1000000 --dim 10 --k 100 \
//	    --max-iter 30 --ckpt-every 5 --inject kill:rank=2,iter=15
//
// Each rank assigns its shard of the points; one deterministic allreduce
// per iteration combines sums and counts, so the centroids are the same
// bits whatever failed on the way. The last line (rank 0's, or with
// --shrink the lowest live rank's) is
//
//	centroids sha256=<hex> sse=<value> iterations=<n>
//
// With --shrink a job that loses a rank with no spare left goes on: the
// next live rank takes over the lost rank's shard, the lowest live rank
// prints, and the result is the same bits as a --shrink run without
// failures (partials are combined per shard, not per rank).
//
// --algo hamerly or yinyang prunes the nearest-centroid search exactly:
// the centroids are the same bits as with the default brute force
// (lloyd). --shards S fixes the number of logical shards: the result is
// then the same bits on any number of ranks up to S, and gaspirun --resume
// may resume a --shards job's disk checkpoint on another number of ranks.
// --seeding kmeans++ chooses the starting centroids by k-means++ (one
// allreduce per centroid; the same centroids on any number of ranks).
//
// With --ckpt-dir every rank waits at the end until the final checkpoint
// is on disk. gaspirun --resume DIR continues from the newest complete
// checkpoint there and prints a "resume:" line saying what it does: a
// mid-run checkpoint continues to the --max-iter given now; the final
// checkpoint of a finished run prints that run's result (SSE included),
// or iterates on from it with a larger --max-iter; a --max-iter below
// the checkpoint's iteration is refused (exit 2, like a bad flag, as is
// an --inject naming a rank the job does not have).
//
// An injection fires the first time the job completes its iteration;
// redone iterations after a recovery do not fire it again. A job resumed
// with gaspirun --resume only knows what the loaded checkpoint recorded,
// so drop the --inject flags when resuming, or the kill happens again.
//
// --history FILE writes one CSV line per iteration executed (the lowest
// live rank writes it; kmeans.HistoryHeader describes the columns), and
//
//	kmeans plot --history FILE --out FILE.png|FILE.svg
//
// draws it: the SSE above the run's lowest on a log scale over the
// iterations executed, failures and recoveries marked.
//
// With --ckpt-dir every rank verifies the disk level (ckpt VerifyDisk)
// before the result is printed: if any rank could not write a disk
// checkpoint, every rank exits non-zero naming the checkpoints and the
// cause, although the centroids are right.
package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/gaspigo/gaspigo/apps/internal/cli"
	"github.com/gaspigo/gaspigo/apps/internal/inject"
	"github.com/gaspigo/gaspigo/apps/kmeans"
	"github.com/gaspigo/gaspigo/apps/kmeans/kernel"
	"github.com/gaspigo/gaspigo/apps/kmeans/points"
	"github.com/gaspigo/gaspigo/job"
	"github.com/gaspigo/gaspigo/pgas"
	"github.com/gaspigo/gaspigo/spares"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "plot" {
		os.Exit(plotMain(os.Args[2:]))
	}
	f, err := parse(os.Args[1:], os.Stdout)
	if err != nil {
		os.Exit(cli.Status("kmeans", err, os.Stderr)) // 0 for --help, 2
	}
	ctx, stop := cli.SignalContext()
	code := cli.SignalStatus(ctx, run(ctx, f))
	stop()
	os.Exit(code)
}

// diskVerifyTimeout bounds the wait for the last disk checkpoint at the end
// of a run.
const diskVerifyTimeout = 2 * time.Minute

// run is one process of the job: it joins the job, runs K-means with
// its checkpoints, reports and finalizes, and returns the exit status.
func run(ctx context.Context, f *flags) int {
	rt, code := start(ctx, f)
	if rt == nil {
		return code
	}
	defer rt.Close()
	fail := func(err error) int { return failure(ctx, rt, err) }
	closeHistory := f.wire(rt)
	defer closeHistory()
	job, err := kmeans.NewJob(ctx, rt, f.opt)
	if err != nil {
		return fail(err)
	}
	defer job.Close()
	ck, err := setupCheckpoints(ctx, rt, job, f)
	if ck != nil {
		defer ck.Close()
	}
	if err != nil {
		return fail(err)
	}
	res, err := job.Run(ctx)
	if err != nil {
		return fail(err)
	}
	if ck != nil && f.ckptDir != "" {
		// A checkpoint the disk level lost fails the job, on every rank,
		// even though the answer is right: the directory is not what
		// --resume would need.
		vctx, cancel := context.WithTimeout(ctx, diskVerifyTimeout)
		err := ck.VerifyDisk(vctx)
		cancel()
		if err != nil {
			return fail(fmt.Errorf("the disk level in %s lost checkpoints: %w", f.ckptDir, err))
		}
	}
	if err := report(rt, f, res); err != nil {
		return fail(err)
	}
	if err := job.Finalize(ctx); err != nil && !errors.Is(err, pgas.ErrClosed) {
		fmt.Fprintln(os.Stderr, cli.Line("kmeans", "finalize: "+err.Error()))
	}
	return 0
}

// start joins the job (job.Init, with a membership that shrinks for
// --shrink). When this process takes no part, rt is nil and code is its
// exit status.
func start(ctx context.Context, f *flags) (rt *pgas.Runtime, code int) {
	opts := job.Options{FaultTolerant: true}
	if f.shrink {
		opts.Membership = func(c *spares.Config) { c.Shrink = true }
	}
	rt, err := job.Init(ctx, opts)
	if err == nil {
		return rt, 0
	}
	if ctx.Err() != nil {
		// A signal before this process got going: gaspirun stopping
		// an idle spare at the end of the job, or tearing the job
		// down. Nothing to add to gaspirun's own account.
		return nil, 128 + int(syscall.SIGTERM)
	}
	if code := job.ExitCode(err); code != 0 {
		fmt.Fprintln(os.Stderr, cli.Line("kmeans", err.Error()))
		return nil, code
	}
	return nil, 0 // a spare the job did not need
}

// failure says why the job failed, as its kind of error wants, and
// returns the exit status.
func failure(ctx context.Context, rt *pgas.Runtime, err error) int {
	if ie := cli.Interrupted(ctx, err); ie != err {
		return cli.Status("kmeans", ie, os.Stderr)
	}
	if errors.Is(err, kernel.ErrConfig) {
		// As a bad flag: every rank refuses the same way, in the
		// same words (no rank), which gaspirun prints once.
		// ErrConfig's errors name the flag: its own words add nothing.
		msg := strings.Replace(err.Error(), kernel.ErrConfig.Error()+": ", "", 1)
		return cli.Status("kmeans", cli.Usage("%s", msg), os.Stderr)
	}
	if badInput(err) {
		// The same file for every rank, so the same words (no rank,
		// which gaspirun prints once), and the status of a bad flag.
		return cli.Status("kmeans", cli.Usage("%s", err.Error()), os.Stderr)
	}
	fmt.Fprintln(os.Stderr, cli.Line("kmeans", fmt.Sprintf("rank %d: %v", rt.Rank(), err)))
	return job.ExitCode(err)
}

// wire gives the job its writers (progress, history), the membership's
// leader for kill:leader, and the kill of an injection. It returns what
// closes the history file.
func (f *flags) wire(rt *pgas.Runtime) (closeHistory func()) {
	closeHistory = func() {}
	if !f.quiet {
		f.opt.Progress = os.Stdout
		if f.stamps {
			f.opt.Progress = &stampWriter{w: os.Stdout}
		}
	}
	if f.history != "" {
		h := &historyFile{path: f.history, first: rt.Rank() == 0 && !rt.StartedAsSpare()}
		closeHistory = func() { h.Close() }
		f.opt.History = h
	}
	if _, ok := rt.Membership().(pgas.Leading); ok {
		f.opt.Leader = func() (int, bool) {
			p, ok := rt.Leader()
			return int(p), ok
		}
	}
	if lm, ok := rt.Membership().(pgas.LeaderMover); ok {
		f.opt.MoveLeader = func(ctx context.Context) (int, error) {
			p, err := lm.MoveLeaderToRank(ctx)
			return int(p), err
		}
	}
	f.opt.Kill = kill
	return closeHistory
}

// setupCheckpoints makes the job's checkpoints (--ckpt-every) and resumes
// from a disk checkpoint (--resume). A failure of another rank during a
// setup step is recovered when the job runs (kmeans Job.SetupFailed). ck
// is nil without checkpoints; when it is not, the caller closes it, error
// or not.
func setupCheckpoints(ctx context.Context, rt *pgas.Runtime, job *kmeans.Job, f *flags) (ck *checkpoints, err error) {
	if f.opt.Every <= 0 {
		if os.Getenv("PGAS_RESUME") != "" {
			return nil, errors.New("--resume needs checkpoints: set --ckpt-every")
		}
		return nil, nil
	}
	err = job.SetupCheckpoints(ctx, func(ctx context.Context, joining bool) (kmeans.Checkpoints, error) {
		c, err := newCheckpoints(ctx, rt, job, f, joining)
		if c == nil {
			return nil, err
		}
		ck = c
		return c, err
	})
	if err != nil || job.Joining() {
		return ck, err
	}
	return ck, job.SetupFailed(resume(ctx, ck, job))
}

// report prints the lowest live rank's lines (rank 0 unless the job
// shrank): the checkpoints' cost, the pruning and the centroids'
// checksum, and writes its --output.
func report(rt *pgas.Runtime, f *flags, res kmeans.RunResult) error {
	if slices.Index(rt.LiveRanks(), rt.Rank()) != 0 {
		return nil
	}
	if f.opt.Progress != nil && f.opt.Every > 0 {
		fmt.Fprintf(f.opt.Progress, "checkpoints: %d committed in the loop; %v of rank 0's loop time %v in Start and Commit (%.2f%%)\n",
			res.Checkpoints, res.CheckpointTime.Round(time.Microsecond), res.LoopTime.Round(time.Millisecond), 100*res.CheckpointTime.Seconds()/res.LoopTime.Seconds())
	}
	if f.opt.Progress != nil && f.opt.Kernel.Algo != kernel.AlgoLloyd {
		fmt.Fprintf(f.opt.Progress, "pruning (%s, this rank's points over its iterations): %v\n", algoNote(f.opt.Kernel, f.opt.K, res), res.Prune)
	}
	if f.output != "" {
		if err := writeCentroids(f.output, res.Centroids, f.opt.K); err != nil {
			return err
		}
	}
	fmt.Printf("centroids sha256=%s sse=%s iterations=%d\n", kernel.Checksum(res.Centroids), formatFloat(res.SSE), res.Iterations)
	return nil
}

// stampWriter starts every line written through it with the time. The
// job writes whole lines, one or more per Write.
type stampWriter struct {
	w io.Writer
}

func (s *stampWriter) Write(p []byte) (int, error) {
	n := len(p)
	now := time.Now().UTC().Format(time.RFC3339Nano) + " "
	var b []byte
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n') + 1
		if i == 0 {
			i = len(p)
		}
		b = append(append(b, now...), p[:i]...)
		p = p[i:]
	}
	if _, err := s.w.Write(b); err != nil {
		return 0, err
	}
	return n, nil
}

// checkOutput refuses, before any work, a file (of flag: --output,
// --history) the reporting rank could not create: its directory must
// exist and be writable, and the path must not be a directory.
func checkOutput(flag, path string) error {
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	switch {
	case err != nil:
		return fmt.Errorf("%s %s: directory %s: %w; create it first or give a path in an existing directory", flag, path, dir, errors.Unwrap(err))
	case !fi.IsDir():
		return fmt.Errorf("%s %s: %s is not a directory; give a path in an existing directory", flag, path, dir)
	}
	const wOK = 2 // access(2) W_OK
	if err := syscall.Access(dir, wOK); err != nil {
		return fmt.Errorf("%s %s: directory %s is not writable (%v); give a path in a directory you can write", flag, path, dir, err)
	}
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return fmt.Errorf("%s %s is a directory; give a file name", flag, path)
	}
	return nil
}

// writeCentroids writes the centroids CSV, readable by its owner only.
func writeCentroids(path string, c []float64, k int) error {
	out, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if err := out.Chmod(0o600); err != nil { // a file that was there keeps its mode otherwise
		out.Close()
		return err
	}
	if err := points.WriteCentroidsCSV(out, c, k, len(c)/k); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// kill carries out an injection (kmeans.Options.Kill): SIGKILL to this
// process.
func kill(k kmeans.Kill) {
	inject.Fire(os.Stderr, k.Rank, fmt.Sprintf("after iteration %d%s at %s", k.Iter, map[string]string{"": "", "commit": ", inside the checkpoint commit",
		"init": ", in the setup before the starting centroids", "ckpt-new": ", in the setup before the checkpointer's creation"}[k.Phase], time.Now().Format(time.RFC3339Nano)))
}
