// Command idle measures what an idle process of a job costs the machine:
// gaspirun -n N --spares 2 runs N ranks of a program that joins the job
// (job.Init with the fault-tolerant membership, a barrier) and then does
// nothing for a while before it finalizes. Once every rank passed the
// barrier and a warm-up went by, the command reads /proc for each process
// of the job, twice, a window apart, and prints per process and second:
// the CPU time (user and system), and the wake-ups (context switches of all
// its threads, voluntary and not: each is a thread that slept and ran
// again, or was preempted). The figures are the median and the mean over
// the processes, and the whole job's share of the machine's cores.
//
//	go run ./bench/idle -n 64,512,2048
//
// It waits for the 1-minute load average to fall below 1.5 before each job
// and prints it with the figures; a figure taken above 1.5 is not a
// figure. The budget the runtime keeps to (docs/design.md §14) is checked
// by the figures, not by this command.
//
// What wakes an idle process, goroutine by goroutine: IDLE_TRACE_DIR=DIR
// (and IDLE_TRACE_RANK=R, 1 by default) has rank R write a Go execution
// trace of the middle third of its hold to DIR/idle.trace (go tool trace).
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/trace"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gaspigo/gaspigo/bench/internal/benchutil"
	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
	"github.com/gaspigo/gaspigo/job"
)

func main() {
	worker := flag.Bool("worker", false, "run as one process of the job (gaspirun starts these)")
	hold := flag.Duration("hold", 40*time.Second, "how long a worker stays idle")
	ns := flag.String("n", "64,512,2048", "comma-separated process counts (ranks)")
	spares := flag.Int("spares", 2, "spare processes")
	warm := flag.Duration("warm", 5*time.Second, "after every rank is idle, wait this long before the window")
	window := flag.Duration("window", 20*time.Second, "the measured window")
	settle := flag.Duration("settle", 3*time.Minute, "before each job, wait up to this long for the 1-minute load average to fall below 1.5")
	timeout := flag.Duration("timeout", 30*time.Minute, "bound on one job")
	flag.Parse()
	if *worker {
		os.Exit(work(*hold))
	}
	counts, err := benchutil.Counts(*ns, 2)
	if err != nil {
		fmt.Fprintln(os.Stderr, "idle:", err)
		os.Exit(2)
	}
	dir, cleanup, err := proctest.Build("idle", false, "./cmd/gaspirun", "./bench/idle")
	if err != nil {
		fmt.Fprintln(os.Stderr, "idle:", err)
		os.Exit(1)
	}
	defer cleanup()
	fmt.Printf("%6s %5s | %9s %9s %9s | %9s %9s | %7s %8s | %s\n",
		"N", "exit", "cpu.med", "cpu.mean", "job.cores", "wake.med", "wake.mean", "ready", "procs", "load before")
	for _, n := range counts {
		proctest.SettleLoad(*settle)
		// The hold covers the start, the warm-up and the window.
		r := runJob(dir, n, *spares, *warm, *window, *timeout)
		fmt.Println(r)
	}
}

// work is one process of the job: it joins, passes a barrier (rank 0
// then says so), holds still, and finalizes.
func work(hold time.Duration) int {
	ctx := context.Background()
	rt, err := job.Init(ctx, job.Options{FaultTolerant: true})
	if err != nil {
		if code := job.ExitCode(err); code != 0 {
			fmt.Fprintln(os.Stderr, "idle:", err)
			return code
		}
		return 0 // a spare the job did not need
	}
	defer rt.Close()
	if err := rt.Barrier(ctx, nil); err != nil {
		fmt.Fprintln(os.Stderr, "idle: barrier:", err)
		return job.ExitCode(err)
	}
	if rt.Rank() == 0 {
		fmt.Println("idle: every rank is in")
	}
	if dir := os.Getenv("IDLE_TRACE_DIR"); dir != "" && rt.Rank() == traceRank() {
		traceIdle(dir, hold)
	} else {
		time.Sleep(hold)
	}
	if err := rt.Finalize(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "idle: finalize:", err)
		return job.ExitCode(err)
	}
	return 0
}

// traceIdle writes a Go execution trace of the middle of this process's
// hold to dir/idle.trace: what wakes an idle process, event by event
// (go tool trace).
func traceIdle(dir string, hold time.Duration) {
	time.Sleep(hold / 3)
	f, err := os.Create(filepath.Join(dir, "idle.trace"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "idle: trace:", err)
		time.Sleep(hold - hold/3)
		return
	}
	defer f.Close()
	if err := trace.Start(f); err == nil {
		time.Sleep(hold / 3)
		trace.Stop()
	}
	time.Sleep(hold - 2*hold/3)
}

type result struct {
	n, code           int
	cpuMed, cpuMean   float64 // CPU seconds per second per process
	jobCores          float64 // the job's CPU seconds per second
	wakeMed, wakeMean float64 // context switches per second per process
	ready             time.Duration
	procs             int
	load              string
}

func (r result) String() string {
	return fmt.Sprintf("%6d %5d | %9.5f %9.5f %9.3f | %9.1f %9.1f | %7s %8d | %s",
		r.n, r.code, r.cpuMed, r.cpuMean, r.jobCores, r.wakeMed, r.wakeMean,
		r.ready.Round(100*time.Millisecond), r.procs, r.load)
}

func runJob(dir string, n, spares int, warm, window, timeout time.Duration) result {
	r := result{n: n, code: -1, load: proctest.LoadAvg()}
	// A worker's hold: generous for the start of thousands of processes
	// (the window opens once every rank is in, and the hold counts from
	// each worker's own barrier), then the warm-up and the window.
	hold := warm + window + 10*time.Second
	jobID := fmt.Sprintf("idle-%d-%d", os.Getpid(), time.Now().UnixNano())
	cmd := exec.Command(filepath.Join(dir, "gaspirun"), "--job-id", jobID, "-n", strconv.Itoa(n),
		"--spares", strconv.Itoa(spares), "--timeout", timeout.String(), "--",
		filepath.Join(dir, "idle"), "-worker", "-hold", hold.String())
	cmd.Env = append(os.Environ(), "PGAS_LOG=warn")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return r
	}
	cmd.Stderr = os.Stderr
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "idle:", err)
		return r
	}
	procs := proctest.NewProcs()
	stop := procs.Watch(jobID, cmd.Process.Pid, 500*time.Millisecond)
	defer stop()
	var ready atomic.Bool
	readyAt := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			l := sc.Text()
			if strings.Contains(l, "idle: every rank is in") && !ready.Swap(true) {
				close(readyAt)
			}
			if !strings.HasPrefix(l, "[") || strings.Contains(l, "level=") {
				fmt.Fprintln(os.Stderr, "  ", l)
			}
		}
	}()
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		if err := cmd.Wait(); err == nil {
			r.code = 0
		} else if ee, ok := err.(*exec.ExitError); ok {
			r.code = ee.ExitCode()
		}
	}()
	select {
	case <-readyAt:
		r.ready = time.Since(t0)
		time.Sleep(warm)
		r.measure(procs, window)
	case <-exited: // before every rank was in: no figure
	case <-time.After(timeout):
	}
	<-exited
	return r
}

// measure reads each process's CPU time and context switches, waits the
// window, and reads them again; a process that ended meanwhile is left out.
func (r *result) measure(procs *proctest.Procs, window time.Duration) {
	pids := procs.PIDs()
	before := map[int]usage{}
	for _, pid := range pids {
		if u, ok := readUsage(pid); ok {
			before[pid] = u
		}
	}
	t0 := time.Now()
	time.Sleep(window)
	secs := time.Since(t0).Seconds()
	var cpu, wake []float64
	for pid, b := range before {
		a, ok := readUsage(pid)
		if !ok {
			continue
		}
		cpu = append(cpu, (a.cpu-b.cpu)/secs)
		wake = append(wake, float64(a.switches-b.switches)/secs)
	}
	r.procs = len(cpu)
	r.cpuMed, r.cpuMean = median(cpu), mean(cpu)
	r.jobCores = r.cpuMean * float64(len(cpu))
	r.wakeMed, r.wakeMean = median(wake), mean(wake)
}

type usage struct {
	cpu      float64 // seconds, user and system
	switches int64   // over all threads
}

// clockTicks is USER_HZ, the unit of /proc's CPU times: 100 on Linux.
const clockTicks = 100

func readUsage(pid int) (u usage, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return u, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return u, false
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	u.cpu = float64(ut+st) / clockTicks
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return u, false
	}
	for _, t := range tasks {
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", pid, t.Name()))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(st), "\n") {
			if v, ok := strings.CutPrefix(l, "voluntary_ctxt_switches:"); ok {
				n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				u.switches += n
			} else if v, ok := strings.CutPrefix(l, "nonvoluntary_ctxt_switches:"); ok {
				n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				u.switches += n
			}
		}
	}
	return u, true
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

func mean(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	var t float64
	for _, x := range v {
		t += x
	}
	return t / float64(len(v))
}

// traceRank is the rank that writes a trace (IDLE_TRACE_RANK, 1 by default).
func traceRank() int {
	if r, err := strconv.Atoi(os.Getenv("IDLE_TRACE_RANK")); err == nil {
		return r
	}
	return 1
}
