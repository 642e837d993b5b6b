// Command ftstep is a fault-tolerant SPMD test program: it runs numbered
// steps (an allreduce and a barrier each), and when a step fails because a
// rank died it recovers into the new epoch and re-runs the step. Every rank
// prints one "result" line at the end, which must not depend on failures.
//
// Output lines (stdout), stable for tests and tools that parse them:
//
//	pid <pid> proc <p>                    at start
//	rank <r> epoch <e>                    after init (a spare: once promoted)
//	rank <r>: step <s> failed (...); recovering
//	rank <r>: recovered into epoch <e> in <d>; resuming at step <s>
//	result rank=<r> sum=<s> epoch=<e>     at the end
//	stats rank=<r> proc=<p> frames_rejected=<n> remote_errors=<n> peers_down=<n>   with -stats: after result (and after each progress line)
//	leader proc=<p> epoch=<e>             with -leader, whenever this process becomes the Raft leader
//	leader-on-rank proc=<p>               with -leader-on-rank: rank 0 moved the leadership onto a rank (or found it there)
//	progress rank=<r> step=<s> epoch=<e>  with -progress N, every N completed steps
//
// Exit codes come from job.ExitCode: 0, 75 (no spare left), 77
// (fenced: this process was replaced), 1 otherwise.
//
// With -result-dir DIR (or FTSTEP_RESULT_DIR), each process also writes
// DIR/pid.<proc> at start, DIR/result.<proc> (the result line) at the end
// and DIR/exit.<proc> ("code=<n>" and the error, if any) just before it
// exits, so a test can check the outcome when gaspirun's output is lost;
// and its log goes to DIR/log.<proc> as well as to stderr.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/gaspigo/gaspigo/health"
	"github.com/gaspigo/gaspigo/job"
	"github.com/gaspigo/gaspigo/pgas"
)

// flags are the command's flags.
type flags struct {
	steps        int
	pause        time.Duration
	timeout      time.Duration
	resultDir    string
	stats        bool
	leader       bool
	leaderOnRank bool
	finTimeout   time.Duration
	progress     int64
	writes       time.Duration
	suspicion    time.Duration
	probe        time.Duration
}

func parseFlags() flags {
	var f flags
	flag.IntVar(&f.steps, "steps", 50, "steps to run")
	flag.DurationVar(&f.pause, "pause", 20*time.Millisecond, "time per step")
	flag.DurationVar(&f.timeout, "timeout", 120*time.Second, "give up after this long")
	flag.StringVar(&f.resultDir, "result-dir", os.Getenv("FTSTEP_RESULT_DIR"), "also write pid, result and exit files into this directory")
	flag.BoolVar(&f.stats, "stats", false, "print the runtime's counters after the result line")
	flag.BoolVar(&f.leader, "leader", false, "print a line whenever this process becomes the Raft leader")
	flag.BoolVar(&f.leaderOnRank, "leader-on-rank", false, "rank 0 moves the Raft leadership onto a rank (off an idle spare) after init")
	flag.DurationVar(&f.finTimeout, "finalize-timeout", 0, "bound Finalize separately (0: only -timeout bounds it)")
	flag.Int64Var(&f.progress, "progress", 0, "print a progress line every N steps (0: never)")
	flag.DurationVar(&f.writes, "writes", 0, "also write a record into the right neighbour's segment this often and check for stale writes (0: never)")
	flag.DurationVar(&f.suspicion, "suspicion", 0, "detector SuspicionTimeout (0: health.DefaultConfig's)")
	flag.DurationVar(&f.probe, "probe", 0, "detector ProbeTimeout (0: health.DefaultConfig's)")
	flag.Parse()
	return f
}

func main() {
	f := parseFlags()
	ctx, cancel := context.WithTimeout(context.Background(), f.timeout)
	defer cancel()
	proc := os.Getenv("PGAS_PROC")
	out := files{dir: f.resultDir, proc: proc}
	fmt.Printf("pid %d proc %s\n", os.Getpid(), proc)
	out.write("pid", strconv.Itoa(os.Getpid()))
	rt, err := job.Init(ctx, jobOptions(f, out))
	if err != nil {
		fmt.Fprintln(os.Stderr, "init:", err)
		out.exit(job.ExitCode(err), "init", err)
	}
	fmt.Printf("rank %d epoch %d\n", rt.Rank(), rt.Epoch())
	if f.leaderOnRank && rt.Rank() == 0 && !rt.StartedAsSpare() {
		moveLeaderToRank(ctx, rt)
	}
	printStats := func() {
		st := rt.Stats()
		fmt.Printf("stats rank=%d proc=%s frames_rejected=%d remote_errors=%d peers_down=%d direct_writes=%d\n",
			rt.Rank(), proc, st.FramesRejected, st.RemoteErrors, st.PeersDown, st.DirectWrites)
	}
	onStep := func(step int64) {
		if f.progress > 0 && step%f.progress == 0 {
			fmt.Printf("progress rank=%d step=%d epoch=%d\n", rt.Rank(), step, rt.Epoch())
			if f.stats {
				printStats()
			}
		}
	}
	w := newWriter(rt, f.writes)
	stopWriter := startWriter(ctx, rt, w, out)
	defer stopWriter()
	sum, err := run(ctx, rt, f.steps, f.pause, w, onStep)
	stopWriter()
	if err != nil {
		fmt.Fprintf(os.Stderr, "rank %d: %v\n", rt.Rank(), err)
		rt.Close()
		out.exit(job.ExitCode(err), "run", err)
	}
	res := fmt.Sprintf("result rank=%d sum=%d epoch=%d", rt.Rank(), sum, rt.Epoch())
	out.write("result", res)
	fmt.Println(res)
	if f.stats {
		printStats()
	}
	finalize(ctx, rt, f.finTimeout, out)
}

// jobOptions are the runtime's options: fault-tolerant, logging as
// -result-dir and -leader say, the detector's timeouts of -suspicion and
// -probe. A bad flag ends the program with exit status 2.
func jobOptions(f flags, out files) job.Options {
	opts := job.Options{FaultTolerant: true}
	if err := out.logging(&opts, f.leader); err != nil {
		fmt.Fprintln(os.Stderr, "ftstep: -result-dir:", err)
		os.Exit(2)
	}
	if f.suspicion > 0 || f.probe > 0 {
		hc := health.DefaultConfig()
		if f.suspicion > 0 {
			hc.SuspicionTimeout = f.suspicion
		}
		if f.probe > 0 {
			hc.ProbeTimeout = f.probe
		}
		if err := hc.Validate(); err != nil {
			fmt.Fprintln(os.Stderr, "ftstep: -suspicion/-probe:", err)
			os.Exit(2)
		}
		opts.Health = &hc
	}
	return opts
}

// moveLeaderToRank moves the Raft leadership onto a rank (-leader-on-rank),
// when the membership can.
func moveLeaderToRank(ctx context.Context, rt *pgas.Runtime) {
	lm, ok := rt.Membership().(pgas.LeaderMover)
	if !ok {
		return
	}
	mctx, mcancel := context.WithTimeout(ctx, 30*time.Second)
	p, err := lm.MoveLeaderToRank(mctx)
	mcancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "ftstep: -leader-on-rank:", err)
	} else {
		fmt.Printf("leader-on-rank proc=%d\n", p)
	}
}

// startWriter creates w's segment (not on a spare, which creates it when
// it rejoins) and runs w (-writes) until the returned function, which
// waits for it to end; without w it does nothing.
func startWriter(ctx context.Context, rt *pgas.Runtime, w *writer, out files) (stop func()) {
	if w == nil {
		return func() {}
	}
	if !rt.StartedAsSpare() {
		if err := w.create(ctx); err != nil {
			fmt.Fprintln(os.Stderr, "segment:", err)
			rt.Close()
			out.exit(job.ExitCode(err), "segment", err)
		}
	}
	wctx, cancel := context.WithCancel(ctx)
	p, _ := strconv.Atoi(out.proc)
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.run(wctx, p)
	}()
	// The writer uses the runtime and its segment's memory: it ends
	// before Finalize or Close frees them (a write racing Close read a
	// segment that Close was taking away, under the race detector).
	return func() { cancel(); <-done }
}

// finalize ends the job (bounded by timeout when it is set) and records
// the exit; a failed Finalize still exits 0, with its error recorded.
func finalize(ctx context.Context, rt *pgas.Runtime, timeout time.Duration, out files) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	if err := rt.Finalize(ctx); err != nil {
		rt.Close() // Finalize leaves it open after a membership change
		fmt.Fprintln(os.Stderr, "finalize:", err)
		out.write("exit", "code=0 finalize_err="+strconv.Quote(err.Error()))
		return
	}
	out.write("exit", "code=0")
}

// files writes the optional per-process result files.
type files struct{ dir, proc string }

// write replaces dir/<kind>.<proc> with text and a newline, atomically
// (rename), so a reader never sees half a file.
func (f files) write(kind, text string) {
	if f.dir == "" {
		return
	}
	name := filepath.Join(f.dir, kind+"."+f.proc)
	tmp := name + ".tmp"
	if err := os.WriteFile(tmp, []byte(text+"\n"), 0o600); err != nil {
		fmt.Fprintf(os.Stderr, "ftstep: -result-dir: %v\n", err)
		return
	}
	if err := os.Rename(tmp, name); err != nil {
		fmt.Fprintf(os.Stderr, "ftstep: -result-dir: %v\n", err)
	}
}

// exit records the exit code and why, then exits.
func (f files) exit(code int, where string, err error) {
	f.write("exit", fmt.Sprintf("code=%d %s_err=%s", code, where, strconv.Quote(err.Error())))
	os.Exit(code)
}

// run executes steps 0..steps-1. Step i contributes rank*i+1 from each
// rank; the total is the same whatever failed on the way.
// onStep is called after every completed step.
// With w (-writes), every rank checks its segment after every step.
func run(ctx context.Context, rt *pgas.Runtime, steps int, pause time.Duration, w *writer, onStep func(step int64)) (int64, error) {
	var total int64
	step := int64(0)
	// A promoted spare learns where the others are.
	if rt.StartedAsSpare() {
		if err := rejoin(ctx, rt, w, &step, &total); err != nil {
			return 0, err
		}
	}
	for step < int64(steps) {
		err := func() error {
			time.Sleep(pause)
			x := []int64{int64(rt.Rank())*step + 1}
			if err := pgas.Allreduce(ctx, rt, nil, x, pgas.OpSum); err != nil {
				return err
			}
			if err := rt.Barrier(ctx, nil); err != nil {
				return err
			}
			if err := w.check(); err != nil {
				return err
			}
			total += x[0]
			step++
			onStep(step)
			return nil
		}()
		if err == nil {
			continue
		}
		if !pgas.NeedsRecovery(err) {
			return 0, err
		}
		fmt.Printf("rank %d: step %d failed (%v); recovering\n", rt.Rank(), step, err)
		t0 := time.Now()
		if err := recoverAndRejoin(ctx, rt, w, &step, &total); err != nil {
			return 0, err
		}
		fmt.Printf("rank %d: recovered into epoch %d in %v; resuming at step %d\n", rt.Rank(), rt.Epoch(), time.Since(t0).Round(time.Millisecond), step)
	}
	if err := w.check(); err != nil {
		return 0, err
	}
	return total, nil
}

// recoverAndRejoin recovers, then rejoins; the writer (if any) waits
// meanwhile.
func recoverAndRejoin(ctx context.Context, rt *pgas.Runtime, w *writer, step, total *int64) error {
	if w != nil {
		w.mu.Lock()
		defer w.mu.Unlock()
	}
	if err := rt.Recover(ctx); err != nil {
		return err
	}
	return rejoin(ctx, rt, w, step, total)
}

// rejoin agrees on the step to resume at, then creates the writer's
// segment again (collective), recovering as often as needed.
func rejoin(ctx context.Context, rt *pgas.Runtime, w *writer, step, total *int64) error {
	for {
		err := agree(ctx, rt, step, total)
		if err == nil {
			err = w.create(ctx)
		}
		if err == nil || !pgas.NeedsRecovery(err) {
			return err
		}
		if err := rt.Recover(ctx); err != nil {
			return err
		}
	}
}

// agree makes every rank resume from the same step with the same total:
// the minimum step any survivor completed (a step completes everywhere or
// is redone), with the total of a rank that completed exactly that many.
func agree(ctx context.Context, rt *pgas.Runtime, step, total *int64) error {
	for {
		s := []int64{*step, -*step}
		if rt.StartedAsSpare() && *step == 0 && *total == 0 {
			s = []int64{1 << 62, 0} // a fresh spare knows nothing
		}
		err := pgas.Allreduce(ctx, rt, nil, s, pgas.OpMin)
		if err == nil {
			min, max := s[0], -s[1]
			if min == 1<<62 {
				min = max
			}
			// Ranks that ran one step further roll back that step's sum.
			t := []int64{0}
			if *step == min {
				t[0] = *total
			}
			if *step > min {
				t[0] = -1 // recomputed below
			}
			if err = pgas.Allreduce(ctx, rt, nil, t, pgas.OpMax); err == nil {
				*step, *total = min, t[0]
				return nil
			}
		}
		if !pgas.NeedsRecovery(err) {
			return err
		}
		if err := rt.Recover(ctx); err != nil {
			return err
		}
	}
}
