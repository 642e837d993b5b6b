// Command procscale measures real jobs of many processes on this machine:
// gaspirun -n N --spares 2 with K-means, failure-free and with a SIGKILL,
// for each N given. For each run it prints the time to start (gaspirun's
// start to rank 0's first iteration), the median failure-free iteration,
// the kill to the next iteration, the restore (new epoch in force to
// checkpoint restored, from rank 0's recovery line) and its ratio to an
// iteration, the time to exit (the centroids line to gaspirun's end),
// epochs beyond those the kill explains (false failures), warnings, the
// sockets a process holds at rest (median and maximum over the processes,
// counted once rank 0 finished iteration 8: connections, listeners and
// the rendezvous's), and the peak file descriptors and resident memory
// per process, sampled from /proc. Run it with nothing else on the machine:
//
//	go run ./bench/procscale -n 64,128,256,512
//
// It prints the load average before each run; a figure taken at a load
// above 1.5 is not a figure.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gaspigo/gaspigo/bench/internal/benchutil"
	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
)

func main() {
	ns := flag.String("n", "64,128,256,512", "comma-separated process counts (ranks)")
	spares := flag.Int("spares", 2, "spare processes")
	iters := flag.Int("iters", 20, "K-means iterations")
	kill := flag.String("kill", "kill:rank=7,iter=10", "the kill of the second run of each N (K-means --inject)")
	runs := flag.String("runs", "clean,kill", "which runs of each N: clean (failure-free), kill, or both")
	timeout := flag.Duration("timeout", 10*time.Minute, "bound on one job")
	settle := flag.Duration("settle", 90*time.Second, "before each job, wait up to this long for the 1-minute load average to fall below 1.5")
	flag.Parse()
	counts, err := benchutil.Counts(*ns, 8)
	if err != nil {
		fmt.Fprintln(os.Stderr, "procscale:", err)
		os.Exit(2)
	}
	dir, cleanup, err := proctest.Build("procscale", false, "./cmd/gaspirun", "./apps/kmeans/cmd/kmeans")
	if err != nil {
		fmt.Fprintln(os.Stderr, "procscale:", err)
		os.Exit(1)
	}
	defer cleanup()
	fmt.Printf("%5s %-5s %6s | %8s %8s %9s %9s %6s %7s | %6s %5s %5s | %9s %6s %8s %8s | %s\n",
		"N", "run", "exit", "start", "iter", "kill>next", "restore", "/iter", "exit.t",
		"epochs", "false", "warn", "sock.rest", "fd.max", "rss.max", "rss.med", "load")
	for _, n := range counts {
		for _, inject := range []string{"", *kill} {
			if run := map[bool]string{true: "clean", false: "kill"}[inject == ""]; !slices.Contains(strings.Split(*runs, ","), run) {
				continue
			}
			proctest.SettleLoad(*settle)
			r := runJob(dir, n, *spares, *iters, inject, *timeout)
			fmt.Println(r)
		}
	}
}

type result struct {
	n                 int
	run               string
	code              int
	start, iter       time.Duration
	killNext, restore time.Duration
	exit              time.Duration
	epochs, false_    int
	warnings          int
	fdMax             int
	sockMed, sockMax  int   // sockets per process at rest
	rssMax, rssMed    int64 // KiB
	load              string
	left              int
}

func (r result) String() string {
	ratio := "-"
	if r.restore > 0 && r.iter > 0 {
		ratio = fmt.Sprintf("%.1f", float64(r.restore)/float64(r.iter))
	}
	s := fmt.Sprintf("%5d %-5s %6d | %8s %8s %9s %9s %6s %7s | %6d %5d %5d | %4d/%-4d %6d %7.1fM %7.1fM | %s",
		r.n, r.run, r.code, rnd(r.start), rnd(r.iter), rnd(r.killNext), rnd(r.restore), ratio, rnd(r.exit),
		r.epochs, r.false_, r.warnings, r.sockMed, r.sockMax, r.fdMax, float64(r.rssMax)/1024, float64(r.rssMed)/1024, r.load)
	if r.left > 0 {
		s += fmt.Sprintf("  (%d processes left running, killed)", r.left)
	}
	return s
}

func rnd(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	if d > 10*time.Second {
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(100 * time.Microsecond).String()
}

var (
	iterRE     = regexp.MustCompile(`^\[r0\] iter\s+(\d+)\s.*time=(\S+)$`)
	recRE      = regexp.MustCompile(`^\[r0\] recovery: epoch \d+ in force after (\S+); checkpoint of iteration \d+ restored after (\S+);`)
	holdsRE    = regexp.MustCompile(`^gaspirun: spare process \d+ now holds rank`)
	injectRE   = regexp.MustCompile(`\] inject: SIGKILL rank`)
	centroidRE = regexp.MustCompile(`^\[r0\] centroids sha256=`)
	warnRE     = regexp.MustCompile(`level=WARN`)
	msgRE      = regexp.MustCompile(`msg="[^"]*"`)
)

type stamped struct {
	text string
	at   time.Time
}

// runJob runs one K-means job of n ranks (with a SIGKILL when inject is
// set), watching its processes' descriptors, memory and sockets at rest,
// and returns its figures read from the job's lines.
func runJob(dir string, n, spares, iters int, inject string, timeout time.Duration) result {
	r := result{n: n, run: "clean", load: proctest.LoadAvg()}
	args := []string{"-n", strconv.Itoa(n), "--spares", strconv.Itoa(spares), "--timeout", timeout.String(), "--",
		filepath.Join(dir, "kmeans"), "--generate", "200000", "--dim", "4", "--k", "8",
		"--max-iter", strconv.Itoa(iters), "--tol", "0", "--ckpt-every", "5"}
	if inject != "" {
		r.run = "kill"
		args = append(args, "--inject", inject)
	}
	jobID := fmt.Sprintf("procscale-%d-%d", os.Getpid(), time.Now().UnixNano())
	cmd := exec.Command(filepath.Join(dir, "gaspirun"), append([]string{"--job-id", jobID}, args...)...)
	cmd.Env = append(os.Environ(), "PGAS_LOG=warn")
	procs := proctest.NewProcs()
	rec := &recorder{procs: procs, atRest: make(chan struct{})}
	t0 := time.Now()
	j, err := proctest.Start(proctest.JobConfig{OnLine: rec.onLine, Bound: timeout + time.Minute}, cmd)
	if err != nil {
		r.code = -1
		return r
	}
	stopWatch := procs.Watch(jobID, cmd.Process.Pid, 100*time.Millisecond)
	sm := startSampler(procs)
	j.Wait(context.Background()) // the bound ends it
	if rec.socks != nil {
		<-rec.atRest
	}
	_, _, end, _ := j.Procs()[0].Exit()
	fds, rss := sm.stop()
	stopWatch()
	r.left = len(procs.Leftovers(15 * time.Second))
	r.code = cmd.ProcessState.ExitCode()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		r.code = -int(ws.Signal())
	}
	r.readLines(rec.lines, t0, end)
	r.fdMax = fds
	if socks := rec.socks; len(socks) > 0 {
		slices.Sort(socks)
		r.sockMed, r.sockMax = socks[len(socks)/2], socks[len(socks)-1]
	}
	if len(rss) > 0 {
		slices.Sort(rss)
		r.rssMax, r.rssMed = rss[len(rss)-1], rss[len(rss)/2]
	}
	r.reportTrouble(rec.lines)
	return r
}

// recorder keeps a job's lines (its OnLine, read once the job ended) and
// counts the sockets of every process once rank 0 has done restIter.
type recorder struct {
	procs  *proctest.Procs
	lines  []stamped
	socks  []int         // per process; nil until counted
	atRest chan struct{} // closed once socks is complete
}

func (rec *recorder) onLine(pl proctest.Line) {
	l := pl.Text
	rec.lines = append(rec.lines, stamped{l, pl.Time})
	if m := iterRE.FindStringSubmatch(l); m != nil && m[1] == restIter && rec.socks == nil {
		rec.socks = []int{}
		go func() {
			defer close(rec.atRest)
			for _, pid := range rec.procs.PIDs() {
				if n, ok := sockets(pid); ok {
					rec.socks = append(rec.socks, n)
				}
			}
		}()
	}
}

// sampler samples every process's descriptors and resident memory every
// 200 ms.
type sampler struct {
	mu    sync.Mutex
	fds   int           // the most descriptors of any process
	peaks map[int]int64 // KiB, per pid
	quit  chan struct{}
	done  chan struct{}
}

func startSampler(procs *proctest.Procs) *sampler {
	sm := &sampler{peaks: map[int]int64{}, quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(sm.done)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			for _, pid := range procs.PIDs() {
				f, rss := sample(pid)
				sm.mu.Lock()
				sm.fds = max(sm.fds, f)
				sm.peaks[pid] = max(sm.peaks[pid], rss)
				sm.mu.Unlock()
			}
			select {
			case <-sm.quit:
				return
			case <-tick.C:
			}
		}
	}()
	return sm
}

// stop ends the sampling and returns the most descriptors of any process
// and each process's peak resident memory.
func (sm *sampler) stop() (fds int, rss []int64) {
	close(sm.quit)
	<-sm.done
	sm.mu.Lock()
	defer sm.mu.Unlock()
	for _, v := range sm.peaks {
		rss = append(rss, v)
	}
	return sm.fds, rss
}

// readLines sets r's times and counts from the job's lines (t0: the
// job's start, end: gaspirun's exit): rank 0's first and median
// iteration, the kill's recovery, the epochs, the exit after the result,
// the warnings.
func (r *result) readLines(lines []stamped, t0, end time.Time) {
	var its []time.Duration
	var killAt time.Time
	recovered := false
	kills := 0
	for _, l := range lines {
		switch {
		case iterRE.MatchString(l.text):
			if r.start == 0 {
				r.start = l.at.Sub(t0)
			}
			if d, err := time.ParseDuration(iterRE.FindStringSubmatch(l.text)[2]); err == nil && killAt.IsZero() {
				its = append(its, d)
			}
			if recovered && r.killNext == 0 {
				r.killNext = l.at.Sub(killAt)
			}
		case injectRE.MatchString(l.text):
			killAt = l.at
			kills++
		case recRE.MatchString(l.text):
			m := recRE.FindStringSubmatch(l.text)
			inForce, e1 := time.ParseDuration(m[1])
			restored, e2 := time.ParseDuration(m[2])
			if e1 == nil && e2 == nil && r.restore == 0 {
				r.restore = restored - inForce
			}
			recovered = !killAt.IsZero()
		case holdsRE.MatchString(l.text):
			r.epochs++
		case centroidRE.MatchString(l.text):
			r.exit = end.Sub(l.at)
		}
		if warnRE.MatchString(l.text) {
			r.warnings++
		}
	}
	r.false_ = max(0, r.epochs-kills)
	if len(its) > 0 {
		slices.Sort(its)
		r.iter = its[len(its)/2]
	}
}

// reportTrouble prints to stderr the kinds of warnings the job logged,
// counted, with one example each, and its last lines when it failed.
func (r *result) reportTrouble(lines []stamped) {
	if r.warnings > 0 {
		kinds, first := map[string]int{}, map[string]string{}
		for _, l := range lines {
			if warnRE.MatchString(l.text) {
				k := msgRE.FindString(l.text)
				if kinds[k]++; kinds[k] == 1 {
					first[k] = l.text
				}
			}
		}
		fmt.Fprintf(os.Stderr, "procscale: N=%d %s: %d warnings\n", r.n, r.run, r.warnings)
		for k, c := range kinds {
			fmt.Fprintf(os.Stderr, "  %d x %s\n", c, first[k])
		}
	}
	if r.code != 0 {
		fmt.Fprintf(os.Stderr, "procscale: N=%d %s exited %d; last lines:\n", r.n, r.run, r.code)
		for _, l := range lines[max(0, len(lines)-15):] {
			fmt.Fprintln(os.Stderr, "  "+l.text)
		}
	}
}

// restIter is the iteration of rank 0 after which the sockets at rest are
// counted: after the first checkpoint (iteration 5) and before the kill.
const restIter = "8"

// sockets counts the sockets process pid holds; ok is false when it
// could not be read (the process ended, or is not the job's).
func sockets(pid int) (n int, ok bool) {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, false
	}
	for _, e := range ents {
		if t, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && strings.HasPrefix(t, "socket:") {
			n++
		}
	}
	return n, true
}

// sample returns a process's open file descriptors and resident set (KiB).
func sample(pid int) (fds int, rssKiB int64) {
	if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
		fds = len(ents)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return fds, 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				rssKiB, _ = strconv.ParseInt(f[0], 10, 64)
			}
		}
	}
	return fds, rssKiB
}
