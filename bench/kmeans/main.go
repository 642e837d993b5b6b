// Command kmeans measures fault-tolerant K-means (apps/kmeans/cmd/kmeans)
// under gaspirun on this machine, each figure against a baseline measured
// in the same run:
//
//	go run ./bench/kmeans                      # every experiment
//	go run ./bench/kmeans -exp overhead,recovery -reps 9
//
// Experiments (-exp, comma-separated; default all):
//
//	overhead  checkpoint overhead: 4 ranks, 1M points, 10-D, k=100,
//	          --ckpt-every 10 against --ckpt-every 0, runs alternating;
//	          the loop time (rank 0's first to last iteration line) is
//	          compared, median over -reps pairs.
//	recovery  SIGKILL of rank 2 after iteration 25 (4 ranks + 1 spare,
//	          --ckpt-every 10): time from the victim's kill (its inject
//	          line) to rank 0's recovery lines and to the next completed
//	          iteration; and the job's loop time against a failure-free
//	          run of the same job.
//	runtime   2 ranks under gaspirun (--ckpt-every 0) against a
//	          single-process Lloyd loop of the same kernel with Threads=2
//	          in this process, on the same data and starting centroids:
//	          median time per iteration.
//	kernel    go test -bench Kernel ./apps/kmeans/kernel: distance
//	          evaluations per second of one core's CPU time and the
//	          fraction of the FP64 peak.
//	seed      the seed paper's workload (1M points, 10-D, k = 10, 100,
//	          1000) with 2 ranks and --ckpt-every 10: time per iteration,
//	          printed next to the paper's Table 2.
//	prune     exact pruning against brute force in the same run: 2 ranks,
//	          --ckpt-every 10, --tol 0, k = 10, 100, 1000 (-prune-k), on
//	          the seed's 10 blobs and a harder 1,000 (-prune-blobs),
//	          --algo lloyd and each of -algos alternating; the whole job's
//	          wall time (start-up and data generation included), the loop
//	          time per iteration (rank 0's first to last iteration line),
//	          the ratios brute force / pruned, the CPU time of each whole
//	          job, the distances computed per point per iteration, and a
//	          check that every run printed the same centroid checksum.
//
// -algo runs the jobs of overhead, recovery and seed with that --algo
// (checkpoint overhead and recovery with pruning on).
//
// Every line of results carries the 1-minute load average read before the
// runs it summarises: the machine is shared. The tool builds cmd/gaspirun
// and the kmeans command into a temporary directory (or uses -bin DIR) and
// runs them with --timestamps, which makes rank 0 stamp each iteration
// line.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/gaspigo/gaspigo/apps/kmeans/kernel"
	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
)

type options struct {
	exps    []string
	reps    int
	bin     string
	points  int
	iters   int
	timeout time.Duration
	verbose bool
	logDir  string
	algo    string
	algos   []string
	pruneK  []int
	// pruneBlobs: the workloads of the prune experiment (--blobs)
	pruneBlobs []int
}

func main() {
	var o options
	var exps string
	flag.StringVar(&exps, "exp", "overhead,recovery,runtime,kernel,seed,prune", "experiments to run, comma-separated: overhead, recovery, runtime, kernel, seed, prune")
	flag.StringVar(&o.algo, "algo", "lloyd", "--algo of the overhead, recovery and seed jobs")
	var algos, pruneK, pruneBlobs string
	flag.StringVar(&algos, "algos", "hamerly,yinyang", "pruned algorithms the prune experiment compares with brute force")
	flag.StringVar(&pruneK, "prune-k", "10,100,1000", "values of k of the prune experiment")
	flag.StringVar(&pruneBlobs, "prune-blobs", "10,1000", "workloads of the prune experiment: Gaussian blobs generated (the seed's 10, a harder 1,000)")
	flag.IntVar(&o.reps, "reps", 5, "repetitions of every measurement (medians are reported)")
	flag.StringVar(&o.bin, "bin", "", "directory with gaspirun and kmeans binaries (default: build them into a temporary directory)")
	flag.IntVar(&o.points, "points", 1_000_000, "points of the generated data set")
	flag.IntVar(&o.iters, "iters", 40, "iterations per job (the seed experiment uses fewer for k=1000)")
	flag.DurationVar(&o.timeout, "timeout", 5*time.Minute, "gaspirun --timeout for every job")
	flag.BoolVar(&o.verbose, "v", false, "print every job's command and summary")
	flag.StringVar(&o.logDir, "logs", "", "keep every job's output in `DIR`")
	flag.Parse()
	o.exps = strings.Split(exps, ",")
	o.algos = strings.Split(algos, ",")
	for _, a := range append([]string{o.algo}, o.algos...) {
		if _, err := kernel.ParseAlgo(a); err != nil {
			fmt.Fprintln(os.Stderr, "bench/kmeans: -algo/-algos:", err)
			os.Exit(2)
		}
	}
	o.pruneK = positives("-prune-k", pruneK)
	o.pruneBlobs = positives("-prune-blobs", pruneBlobs)
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "bench/kmeans:", err)
		os.Exit(1)
	}
}

// positives parses a comma-separated list of positive integers, or exits
// with a usage error naming the flag.
func positives(flag, list string) []int {
	var out []int
	for _, f := range strings.Split(list, ",") {
		v, err := strconv.Atoi(f)
		if err != nil || v < 1 {
			fmt.Fprintf(os.Stderr, "bench/kmeans: %s %q: want positive integers separated by commas\n", flag, list)
			os.Exit(2)
		}
		out = append(out, v)
	}
	return out
}

func run(o options) error {
	if o.reps < 1 || o.points < 1000 || o.iters < 5 {
		return fmt.Errorf("-reps %d, -points %d, -iters %d: want at least 1, 1000 and 5", o.reps, o.points, o.iters)
	}
	if o.bin == "" {
		dir, err := os.MkdirTemp("", "bench-kmeans-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		if err := build(dir); err != nil {
			return err
		}
		o.bin = dir
	}
	if o.logDir != "" {
		if err := os.MkdirAll(o.logDir, 0o755); err != nil {
			return err
		}
	}
	kmAlgo = o.algo
	b := &bench{o: o, gaspirun: filepath.Join(o.bin, "gaspirun"), kmeans: filepath.Join(o.bin, "kmeans")}
	host, _ := os.Hostname()
	fmt.Printf("# bench/kmeans on %s: %s, %s; load average %s\n", host, cpuModel(), time.Now().UTC().Format(time.RFC3339), proctest.LoadAvg())
	for _, e := range o.exps {
		var err error
		switch strings.TrimSpace(e) {
		case "overhead":
			err = b.overhead()
		case "recovery":
			err = b.recovery()
		case "runtime":
			err = b.runtimeOverhead()
		case "kernel":
			err = b.kernel()
		case "seed":
			err = b.seed()
		case "prune":
			err = b.prune()
		default:
			err = fmt.Errorf("-exp %q: unknown experiment (want overhead, recovery, runtime, kernel, seed or prune)", e)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// build compiles gaspirun and kmeans into dir from the module root.
func build(dir string) error {
	root, err := proctest.ModuleRoot()
	if err != nil {
		return err
	}
	return proctest.BuildInto(root, dir, false, "./cmd/gaspirun", "./apps/kmeans/cmd/kmeans")
}

type bench struct {
	o                options
	gaspirun, kmeans string
	jobs             int
}

// job is one finished gaspirun run.
type job struct {
	code  int
	wall  time.Duration
	cpu   time.Duration // user + system time of gaspirun and every process of the job
	load  string
	iters []iterLine // rank 0's iteration lines, in order
	lines []string
	final string // rank 0's final line
}

// iterLine is one of rank 0's timestamped lines.
type iterLine struct {
	at   time.Time
	iter int
	text string // the line after the timestamp
}

var (
	stampRE  = regexp.MustCompile(`^\[r0\] (\d{4}-\d\d-\d\dT\S+Z) (.*)$`)
	iterRE   = regexp.MustCompile(`^iter\s+(\d+)\s`)
	injectRE = regexp.MustCompile(`^\[r\d+\] inject: SIGKILL rank (\d+) \(pid \d+\) after iteration (\d+).* at (\S+)$`)
)

// runJob runs gaspirun with the launcher flags, then kmeans with args.
func (b *bench) runJob(launcher []string, args []string) (*job, error) {
	b.jobs++
	full := append([]string{"--timeout", b.o.timeout.String(), "--grace", "1s"}, launcher...)
	full = append(full, "--", b.kmeans, "--timestamps")
	full = append(full, args...)
	cmd := exec.Command(b.gaspirun, full...)
	// info: the membership's "became raft leader" records, to tell a
	// leader's kill from another.
	cmd.Env = append(os.Environ(), "PGAS_LOG=info")
	j := &job{load: proctest.LoadAvg()}
	run, err := proctest.Start(proctest.JobConfig{Bound: b.o.timeout + time.Minute}, cmd)
	if err != nil {
		return nil, err
	}
	run.Wait(context.Background()) // the bound ends it
	p := run.Procs()[0]
	_, _, end, _ := p.Exit()
	j.wall = end.Sub(run.Begin())
	j.code = run.ExitCode()
	// wait4's usage covers gaspirun and the processes it waited for.
	j.cpu = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	if err := p.Err(); err != nil && cmd.ProcessState.Success() { // exit 0, but its output outlived it
		return nil, fmt.Errorf("gaspirun %s: %v", strings.Join(full, " "), err)
	}
	if b.o.logDir != "" {
		name := filepath.Join(b.o.logDir, fmt.Sprintf("job-%03d.log", b.jobs))
		os.WriteFile(name, []byte("gaspirun "+strings.Join(full, " ")+"\n"+run.Output()), 0o644)
	}
	for _, l := range run.Texts() {
		j.lines = append(j.lines, l)
		if strings.HasPrefix(l, "[r0] centroids sha256=") {
			j.final = strings.TrimPrefix(l, "[r0] ")
			continue
		}
		m := stampRE.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			continue
		}
		il := iterLine{at: at, text: m[2], iter: -1}
		if im := iterRE.FindStringSubmatch(m[2]); im != nil {
			il.iter, _ = strconv.Atoi(im[1])
		}
		j.iters = append(j.iters, il)
	}
	if b.o.verbose {
		fmt.Printf("  job %d: gaspirun %s -> exit %d, %v, load %s\n", b.jobs, strings.Join(full, " "), j.code, j.wall.Round(time.Millisecond), j.load)
	}
	return j, nil
}

// ok fails unless the job exited 0 with a final line.
func (j *job) ok() error {
	if j.code != 0 || j.final == "" {
		tail := j.lines
		if len(tail) > 30 {
			tail = tail[len(tail)-30:]
		}
		return fmt.Errorf("job exited %d (final line %q):\n%s", j.code, j.final, strings.Join(tail, "\n"))
	}
	return nil
}

// ckptShare is the percentage in rank 0's "checkpoints: ..." line (its
// time in checkpoint Start and Commit over its whole run), or -1.
func (j *job) ckptShare() float64 {
	for _, l := range j.iters {
		if !strings.HasPrefix(l.text, "checkpoints: ") {
			continue
		}
		i := strings.LastIndexByte(l.text, '(')
		if i < 0 {
			break
		}
		v, err := strconv.ParseFloat(strings.TrimSuffix(l.text[i+1:], "%)"), 64)
		if err == nil {
			return v
		}
	}
	return -1
}

// loop is the time from rank 0's first completed iteration to its last
// (so data generation, start-up and the initial checkpoint are out), and
// the number of iterations it spans.
func (j *job) loop() (time.Duration, int) {
	var first, last *iterLine
	for i := range j.iters {
		if j.iters[i].iter < 0 {
			continue
		}
		if first == nil {
			first = &j.iters[i]
		}
		last = &j.iters[i]
	}
	if first == nil || last == first {
		return 0, 0
	}
	n := 0
	for _, l := range j.iters {
		if l.iter >= 0 && l.at.After(first.at) {
			n++
		}
	}
	return last.at.Sub(first.at), n
}

// perIter returns the gaps between consecutive iteration lines with no
// other rank-0 line (recovery) in between.
func (j *job) perIter() []time.Duration {
	var out []time.Duration
	for i := 1; i < len(j.iters); i++ {
		a, b := j.iters[i-1], j.iters[i]
		if a.iter >= 0 && b.iter == a.iter+1 {
			out = append(out, b.at.Sub(a.at))
		}
	}
	return out
}

// kmAlgo is the --algo of kmArgs (-algo).
var kmAlgo = "lloyd"

func kmArgs(points, k, iters, every int) []string {
	return []string{"--generate", strconv.Itoa(points), "--dim", "10", "--k", strconv.Itoa(k),
		"--max-iter", strconv.Itoa(iters), "--ckpt-every", strconv.Itoa(every), "--algo", kmAlgo}
}

func durations(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = d.Seconds()
	}
	return out
}

func relDiff(a, b float64) float64 {
	d := a - b
	if d < 0 {
		d = -d
	}
	m := max(a, b, -a, -b)
	if m == 0 {
		return 0
	}
	return d / m
}

func allEqual(s []string) bool {
	for _, x := range s {
		if x != s[0] {
			return false
		}
	}
	return true
}

func ms(sec float64) string { return strconv.FormatFloat(sec*1000, 'f', 1, 64) }

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	model, n := "", 0
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "model name") {
			n++
			if _, v, ok := strings.Cut(l, ":"); ok {
				model = strings.TrimSpace(v)
			}
		}
	}
	return fmt.Sprintf("%d x %s", n, model)
}
