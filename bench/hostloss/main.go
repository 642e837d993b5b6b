// Command hostloss measures host faults of fault-tolerant K-means across
// three simulated hosts (internal/testkit/simhost: network namespaces on a bridge),
// launched with the bare PGAS_* contract (internal/testkit/mhjob), as issue 9
// asks:
//
//	go run ./bench/hostloss                 # 20 runs of each experiment
//	go run ./bench/hostloss -runs 5 -exp loss
//
// It needs root and iproute2. The job: 4 ranks and 2 spares; node1 runs
// ranks 0 and 1 (process 0 serves the rendezvous), node2 rank 2 and a
// spare, node3 rank 3 and a spare. Experiments (-exp, comma-separated):
//
//	loss    SIGKILL of everything on node2 (rank 2 and the idle spare)
//	        once the job reported iteration -at: time from the crash to
//	        the next iteration the job completes after its recovery line
//	        (median, p99 over the runs), against the same jobs' median
//	        iteration time before the crash.
//	cutoff  node2 cut off for good (silent: detached from the bridge) at
//	        the same point: time from the cut to the exit of each of
//	        node2's processes (median, max), how they exited, and the cut
//	        to the next completed iteration of the others.
//
// Every result line carries the load average read before the runs: the
// machine is shared.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gaspigo/gaspigo/bench/internal/benchutil"
	"github.com/gaspigo/gaspigo/internal/testkit/mhjob"
	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
	"github.com/gaspigo/gaspigo/internal/testkit/simhost"
	"github.com/gaspigo/gaspigo/internal/testkit/stats"
)

var (
	layout    = []int{0, 0, 1, 2, 1, 2}
	iterRE    = regexp.MustCompile(`^iter\s+(\d+)\s`)
	recRE     = regexp.MustCompile(`^recovery: epoch`)
	finalRE   = regexp.MustCompile(`^centroids sha256=[0-9a-f]{64} sse=\S+ iterations=\d+$`)
	node2Proc = []int{2, 4}
)

type options struct {
	runs    int
	at      int
	points  int
	k       int
	iters   int
	wait    time.Duration
	verbose bool
}

func main() {
	var o options
	exps := flag.String("exp", "loss,cutoff", "experiments, comma-separated: loss, cutoff")
	flag.IntVar(&o.runs, "runs", 20, "runs of each experiment")
	flag.IntVar(&o.at, "at", 20, "the fault strikes once the job reported this iteration")
	flag.IntVar(&o.points, "points", 400_000, "generated points (10-D)")
	flag.IntVar(&o.k, "k", 50, "clusters")
	flag.IntVar(&o.iters, "iters", 60, "iterations per job")
	flag.DurationVar(&o.wait, "wait", 60*time.Second, "how long after a cut its processes may take to exit before they count as never")
	flag.BoolVar(&o.verbose, "v", false, "print every run")
	flag.Parse()
	dir, cleanup := benchutil.HostsAndBinaries("hostloss", "./apps/kmeans/cmd/kmeans")
	defer cleanup()
	bin := dir + "/kmeans"
	code := 0
	for _, e := range strings.Split(*exps, ",") {
		var err error
		switch strings.TrimSpace(e) {
		case "loss":
			err = loss(o, bin)
		case "cutoff":
			err = cutoff(o, bin)
		default:
			err = fmt.Errorf("unknown experiment %q: want loss or cutoff", e)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "hostloss:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// run is one job with a fault on node2 at iteration o.at.
type run struct {
	c     *simhost.Cluster
	j     *mhjob.Job
	fault time.Time
}

// start builds the hosts, starts the job and waits for iteration o.at.
func start(o options, bin string) (*run, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := simhost.New(ctx, simhost.Config{Hosts: 3})
	if err != nil {
		return nil, err
	}
	args := []string{"--generate", strconv.Itoa(o.points), "--dim", "10", "--k", strconv.Itoa(o.k),
		"--max-iter", strconv.Itoa(o.iters), "--tol", "0", "--ckpt-every", "10"}
	j, err := mhjob.Start(ctx, mhjob.Config{Cluster: c, Program: bin, Args: args, Hosts: layout, Spares: 2,
		Env: []string{"PGAS_LOG=info", "GOMAXPROCS=1"}})
	if err != nil {
		c.Close()
		return nil, err
	}
	r := &run{c: c, j: j}
	if _, err := j.WaitLine(ctx, func(l proctest.Line) bool { return iterAtLeast(l, o.at) }); err != nil {
		r.close()
		return nil, fmt.Errorf("no iteration %d: %w\n%s", o.at, err, strings.Join(tail(j.Text(), 20), "\n"))
	}
	return r, nil
}

func (r *run) close() {
	r.j.Kill()
	r.c.Close()
}

func iterAtLeast(l proctest.Line, n int) bool {
	m := iterRE.FindStringSubmatch(l.Text)
	if m == nil {
		return false
	}
	i, _ := strconv.Atoi(m[1])
	return i >= n
}

// iterTime is the median time between consecutive iteration lines
// before t.
func (r *run) iterTime(t time.Time) time.Duration {
	var prev time.Time
	var d []float64
	for _, l := range r.j.Lines() {
		if !iterRE.MatchString(l.Text) || l.Time.After(t) {
			continue
		}
		if !prev.IsZero() {
			d = append(d, float64(l.Time.Sub(prev)))
		}
		prev = l.Time
	}
	return time.Duration(stats.Percentile(d, 50))
}

// nextIter waits for the first iteration completed after the first
// recovery line after the fault, and returns the time from the fault.
func (r *run) nextIter() (time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rec, err := r.j.WaitLine(ctx, func(l proctest.Line) bool { return l.Time.After(r.fault) && recRE.MatchString(l.Text) })
	if err != nil {
		return 0, fmt.Errorf("no recovery line: %w\n%s", err, strings.Join(tail(r.j.Text(), 30), "\n"))
	}
	it, err := r.j.WaitLine(ctx, func(l proctest.Line) bool { return !l.Time.Before(rec.Time) && iterRE.MatchString(l.Text) })
	if err != nil {
		return 0, fmt.Errorf("no iteration after the recovery: %w", err)
	}
	return it.Time.Sub(r.fault), nil
}

// finish waits (bounded) for the answer and for every process to end.
func (r *run) finish() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := r.j.WaitLine(ctx, func(l proctest.Line) bool { return finalRE.MatchString(l.Text) }); err != nil {
		return fmt.Errorf("no answer: %w", err)
	}
	return nil
}

func loss(o options, bin string) error {
	load := proctest.LoadAvg()
	var rec, iter []float64
	for i := range o.runs {
		r, err := start(o, bin)
		if err != nil {
			return err
		}
		r.fault = time.Now()
		if _, err := r.c.Crash(r.c.Host(1)); err != nil {
			r.close()
			return err
		}
		d, err := r.nextIter()
		if err == nil {
			err = r.finish()
		}
		it := r.iterTime(r.fault)
		r.close()
		if err != nil {
			return fmt.Errorf("loss run %d: %w", i+1, err)
		}
		rec, iter = append(rec, float64(d)), append(iter, float64(it))
		if o.verbose {
			fmt.Printf("loss run %2d: crash -> next iteration %v (iteration time %v)\n", i+1, d.Round(time.Millisecond), it.Round(time.Microsecond))
		}
	}
	it := stats.Percentile(iter, 50)
	fmt.Printf("host loss (node2 SIGKILLed: rank 2 + idle spare), %d runs, %d points, k=%d, load %s:\n", o.runs, o.points, o.k, load)
	fmt.Printf("  crash -> next completed iteration: median %v, p99 %v; iteration time median %v; ratio median/iteration %.0fx\n",
		ms(stats.Percentile(rec, 50)), ms(stats.Percentile(rec, 99)), ms(it), stats.Percentile(rec, 50)/it)
	return nil
}

func cutoff(o options, bin string) error {
	load := proctest.LoadAvg()
	var exits, next []float64
	never := 0
	codes := map[string]int{}
	for i := range o.runs {
		r, err := start(o, bin)
		if err != nil {
			return err
		}
		r.fault = time.Now()
		if err := r.c.Cut(r.c.Host(1), simhost.Silent); err != nil {
			r.close()
			return err
		}
		d, err := r.nextIter()
		if err == nil {
			err = r.finish()
		}
		if err != nil {
			r.close()
			return fmt.Errorf("cutoff run %d: %w", i+1, err)
		}
		next = append(next, float64(d))
		wctx, wcancel := context.WithDeadline(context.Background(), r.fault.Add(o.wait))
		var line []string
		for _, p := range node2Proc {
			pr := r.j.Procs()[p]
			select {
			case <-pr.Done():
				code, sig, at, _ := pr.Exit()
				how := fmt.Sprintf("exit %d", code)
				if sig != 0 {
					how = "signal " + sig.String()
				}
				codes[how]++
				exits = append(exits, float64(at.Sub(r.fault)))
				line = append(line, fmt.Sprintf("process %d: %s after %v", p, how, at.Sub(r.fault).Round(time.Millisecond)))
			case <-wctx.Done():
				never++
				codes["still running"]++
				line = append(line, fmt.Sprintf("process %d: still running after %v", p, o.wait))
			}
		}
		wcancel()
		r.close()
		if o.verbose {
			fmt.Printf("cutoff run %2d: cut -> next iteration %v; %s\n", i+1, d.Round(time.Millisecond), strings.Join(line, "; "))
		}
	}
	fmt.Printf("host cut off for good (node2 detached from the bridge), %d runs, %d points, k=%d, load %s:\n", o.runs, o.points, o.k, load)
	fmt.Printf("  cut -> next completed iteration of the others: median %v, p99 %v\n", ms(stats.Percentile(next, 50)), ms(stats.Percentile(next, 99)))
	if len(exits) > 0 {
		fmt.Printf("  cut -> exit of the cut-off processes: median %v, max %v (%d of %d processes)\n",
			ms(stats.Percentile(exits, 50)), ms(slices.Max(exits)), len(exits), len(exits)+never)
	}
	keys := make([]string, 0, len(codes))
	for k := range codes {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s: %d", k, codes[k]))
	}
	fmt.Printf("  how they ended: %s\n", strings.Join(parts, ", "))
	return nil
}

func ms(ns float64) time.Duration { return time.Duration(ns).Round(time.Millisecond) }

func tail(lines []string, n int) []string {
	if len(lines) > n {
		return lines[len(lines)-n:]
	}
	return lines
}
