// Command detect measures the failure detector and the membership on real
// processes: gaspirun jobs of test/fttier/testprog/ftstep on this machine,
// with the runtime's default configuration (health.DefaultConfig,
// spares.DefaultConfig).
//
//	go run ./bench/detect -mode latency -kills 50      # SIGKILL a rank per job
//	go run ./bench/detect -mode fp -duration 10m       # no kills, 2 CPU hogs
//
// Latency mode starts one job per kill (-n ranks, -spares spares), waits
// until every rank runs, sleeps a random moment, SIGKILLs one process
// (-victim random: a rank chosen at random; leader: the Raft leader,
// whatever it holds; nonleader: a rank that does not lead) and reads the
// processes' logs (PGAS_LOG=info): the first "failure confirmed" record
// (a survivor's detector confirmed the death) and the "view applied"
// record of the new epoch on every surviving process. It reports, over
// all kills, the time from the kill to the first confirmation (detection),
// from the first confirmation to the last survivor applying the view
// (agreement and commit through Raft), and from the kill to the last
// survivor applying the view (the detection latency, end to end). Log
// times have millisecond resolution. It also checks every job's result
// lines against the failure-free sum.
//
// False-positive mode runs one job without kills for -duration next to
// -hogs busy-looping processes (yes > /dev/null, stopped by pid at the
// end) and counts what should not happen: suspicions, confirmed failures,
// epochs changed, failed steps, Raft leader changes. It samples the load
// average every 10 s.
//
// Build first; the tool runs the binaries it finds in -bin (default: it
// builds them into a temporary directory with the go command).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
	"github.com/gaspigo/gaspigo/internal/testkit/simhost"
)

type options struct {
	mode     string
	kills    int
	ranks    int
	spares   int
	steps    int
	pause    time.Duration
	victim   string
	seed     uint64
	duration time.Duration
	hogs     int
	hosts    int
	fault    string
	bin      string
	csv      string
	logDir   string
	minDelay time.Duration
	maxDelay time.Duration
	progArgs []string
}

func main() {
	var o options
	flag.StringVar(&o.mode, "mode", "latency", "latency (kill a process per job) or fp (no kills, count false positives)")
	flag.IntVar(&o.kills, "kills", 50, "latency mode: number of jobs, one SIGKILL each")
	flag.IntVar(&o.ranks, "n", 0, "ranks (default 4 in latency mode, 6 in fp mode)")
	flag.IntVar(&o.spares, "spares", 2, "spare processes")
	flag.IntVar(&o.steps, "steps", 0, "ftstep -steps (default 200 in latency mode, unbounded in fp mode)")
	flag.DurationVar(&o.pause, "pause", 0, "ftstep -pause (default 20ms in latency mode, 5ms in fp mode)")
	flag.StringVar(&o.victim, "victim", "random", "latency mode: random (a random rank), leader (the Raft leader) or nonleader (a rank that does not lead)")
	flag.Uint64Var(&o.seed, "seed", 0, "random seed (0: from the clock; printed)")
	flag.DurationVar(&o.duration, "duration", 10*time.Minute, "fp mode: how long the job runs")
	flag.IntVar(&o.hogs, "hogs", 2, "fp mode: CPU-hog processes to run beside the job")
	flag.IntVar(&o.hosts, "hosts", 0, "latency mode: run each job over this many simulated hosts (network namespaces on a bridge; needs root), process p on host p mod N, with the bare PGAS_* contract instead of gaspirun; 0: one machine")
	flag.StringVar(&o.fault, "fault", "kill", "latency mode with -hosts: kill (SIGKILL the victim process), crash (SIGKILL every process of the victim's host) or cut (detach the victim's host from the network, silently)")
	flag.StringVar(&o.bin, "bin", "", "directory holding gaspirun and ftstep (default: build them)")
	flag.StringVar(&o.csv, "csv", "", "latency mode: write one line per kill to this file")
	flag.StringVar(&o.logDir, "logs", "", "keep every job's raw output in this directory")
	flag.DurationVar(&o.minDelay, "min-delay", 300*time.Millisecond, "latency mode: earliest kill after every rank started")
	flag.DurationVar(&o.maxDelay, "max-delay", 1200*time.Millisecond, "latency mode: latest kill after every rank started")
	extra := flag.String("ftstep-args", "", "extra ftstep arguments, space-separated (e.g. \"-suspicion 1s -probe 500ms\")")
	flag.Parse()
	o.progArgs = strings.Fields(*extra)
	if err := o.check(); err != nil {
		fmt.Fprintln(os.Stderr, "detect:", err)
		os.Exit(2)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sigs
		fmt.Fprintf(os.Stderr, "detect: %v: stopping the CPU hogs and the job\n", s)
		runCleanups()
		os.Exit(130)
	}()
	if o.seed == 0 {
		o.seed = uint64(time.Now().UnixNano())
	}
	gaspirun, prog, cleanup, err := binaries(o.bin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "detect:", err)
		os.Exit(1)
	}
	defer cleanup()
	switch o.mode {
	case "latency":
		err = latency(o, gaspirun, prog)
	case "fp":
		err = falsePositives(o, gaspirun, prog)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "detect:", err)
		cleanup()
		os.Exit(1)
	}
}

var cleanups struct {
	sync.Mutex
	fs []func()
}

// onSignal registers f to run if the tool is interrupted (it stops what
// the tool started: CPU hogs, the current job). Latest first.
func onSignal(f func()) {
	cleanups.Lock()
	cleanups.fs = append(cleanups.fs, f)
	cleanups.Unlock()
}

func runCleanups() {
	cleanups.Lock()
	fs := cleanups.fs
	cleanups.fs = nil
	cleanups.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}

func (o *options) check() error {
	switch o.mode {
	case "latency":
		o.ranks = orInt(o.ranks, 4)
		o.steps = orInt(o.steps, 200)
		if o.pause == 0 {
			o.pause = 20 * time.Millisecond
		}
	case "fp":
		o.ranks = orInt(o.ranks, 6)
		o.steps = orInt(o.steps, 1<<40)
		if o.pause == 0 {
			o.pause = 5 * time.Millisecond
		}
	default:
		return fmt.Errorf("-mode %q: use latency or fp", o.mode)
	}
	switch {
	case o.ranks < 2:
		return fmt.Errorf("-n %d: need at least 2 ranks", o.ranks)
	case o.spares < 1 && o.mode == "latency":
		return fmt.Errorf("-spares %d: latency mode needs a spare to replace the killed rank", o.spares)
	case o.spares < 0:
		return fmt.Errorf("-spares %d: must not be negative", o.spares)
	case o.kills < 1:
		return fmt.Errorf("-kills %d: need at least 1", o.kills)
	case o.victim != "random" && o.victim != "leader" && o.victim != "nonleader":
		return fmt.Errorf("-victim %q: use random, leader or nonleader", o.victim)
	case o.duration <= 0:
		return fmt.Errorf("-duration %v: must be positive (e.g. 10m)", o.duration)
	case o.hogs < 0:
		return fmt.Errorf("-hogs %d: must not be negative", o.hogs)
	case o.hosts < 0 || (o.hosts > 0 && o.mode != "latency"):
		return fmt.Errorf("-hosts %d: want 0 (one machine) or a number of simulated hosts, in latency mode", o.hosts)
	case o.fault != "kill" && (o.hosts == 0 || (o.fault != "crash" && o.fault != "cut")):
		return fmt.Errorf("-fault %q: use kill, or crash or cut with -hosts", o.fault)
	case o.minDelay < 0 || o.maxDelay < o.minDelay:
		return fmt.Errorf("-min-delay %v, -max-delay %v: need 0 <= min <= max", o.minDelay, o.maxDelay)
	}
	return nil
}

func orInt(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// binaries finds or builds gaspirun and ftstep.
func binaries(dir string) (gaspirun, prog string, cleanup func(), err error) {
	cleanup = func() {}
	if dir == "" {
		tmp, done, err := proctest.Build("detect", false, "./cmd/gaspirun", "./test/fttier/testprog/ftstep")
		if err != nil {
			return "", "", func() {}, fmt.Errorf("%w (run inside the module, or pass -bin)", err)
		}
		cleanup, dir = done, tmp
	}
	gaspirun, prog = filepath.Join(dir, "gaspirun"), filepath.Join(dir, "ftstep")
	for _, f := range []string{gaspirun, prog} {
		if _, err := os.Stat(f); err != nil {
			cleanup()
			return "", "", func() {}, fmt.Errorf("-bin %s: %v (build with: go build -o DIR/ ./cmd/gaspirun ./test/fttier/testprog/ftstep)", dir, err)
		}
	}
	return gaspirun, prog, cleanup, nil
}

// openLog returns where job i's raw output goes.
func openLog(dir, name string) (io.Writer, func()) {
	if dir == "" {
		return nil, func() {}
	}
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		fmt.Fprintln(os.Stderr, "detect: -logs:", err)
		return nil, func() {}
	}
	return f, func() { f.Close() }
}

// killResult is what one kill measured.
type killResult struct {
	job           int
	victim        int // process id
	victimRank    int // -1: a spare
	leader        bool
	detect        time.Duration // kill -> first "failure confirmed"
	firstApplied  time.Duration // kill -> first survivor applied the new view
	lastApplied   time.Duration // kill -> last survivor applied it
	commit        time.Duration // first confirmation -> last survivor applied
	newLeaderProc int
	resultOK      bool
	note          string
}

// cluster holds the simulated hosts of -hosts, nil without.
var cluster *simhost.Cluster

func latency(o options, gaspirun, prog string) error {
	rng := rand.New(rand.NewPCG(o.seed, 0x5eed))
	if o.hosts > 0 {
		if reason := simhost.Unavailable(); reason != "" {
			return fmt.Errorf("-hosts: %s", reason)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		c, err := simhost.New(ctx, simhost.Config{Hosts: o.hosts})
		cancel()
		if err != nil {
			return fmt.Errorf("-hosts: %w", err)
		}
		cluster = c
		defer c.Close()
		onSignal(func() { c.Close() })
		fmt.Printf("detect: %d simulated hosts %s (%v), process p on host p mod %d, bare PGAS_* contract\n", o.hosts, c.ID(), c.Subnet(), o.hosts)
	}
	fmt.Printf("detect: ftstep extra arguments: %q\n", o.progArgs)
	fmt.Printf("detect: latency, %d kills (fault %s), %d ranks + %d spares, ftstep -steps %d -pause %v, victim %s, seed %d\n",
		o.kills, o.fault, o.ranks, o.spares, o.steps, o.pause, o.victim, o.seed)
	fmt.Printf("detect: load average at start: %s\n", proctest.LoadAvg())
	var csv io.Writer
	if o.csv != "" {
		f, err := os.Create(o.csv)
		if err != nil {
			return err
		}
		defer f.Close()
		csv = f
		fmt.Fprintln(csv, "job,victim_proc,victim_rank,leader,detect_ms,first_applied_ms,last_applied_ms,commit_ms,result_ok,note")
	}
	var res []killResult
	for i := 0; i < o.kills; i++ {
		r := oneKill(o, gaspirun, prog, i, rng)
		res = append(res, r)
		fmt.Printf("kill %2d: proc %d (rank %d, leader %v): detect %v, all applied %v, commit %v, result ok %v %s\n",
			i, r.victim, r.victimRank, r.leader, ms(r.detect), ms(r.lastApplied), ms(r.commit), r.resultOK, r.note)
		if csv != nil {
			fmt.Fprintf(csv, "%d,%d,%d,%v,%.1f,%.1f,%.1f,%.1f,%v,%q\n", i, r.victim, r.victimRank, r.leader,
				msf(r.detect), msf(r.firstApplied), msf(r.lastApplied), msf(r.commit), r.resultOK, r.note)
		}
	}
	fmt.Printf("detect: load average at end: %s\n", proctest.LoadAvg())
	summarize(res)
	return nil
}

func ms(d time.Duration) string {
	if d < 0 {
		return "-"
	}
	return d.Round(time.Millisecond).String()
}

func msf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// labelProc is the process id of a "[pN]" prefix (jobs over simulated
// hosts), -1 for gaspirun's rank and spare prefixes.
func labelProc(x record) int {
	if n, err := strconv.Atoi(strings.TrimPrefix(x.label, "p")); err == nil && strings.HasPrefix(x.label, "p") {
		return n
	}
	return -1
}

// lastLeader is the process that most recently reported becoming the Raft
// leader after since, or -1.
func lastLeader(recs []record, since time.Time) int {
	p := -1
	for _, x := range recs {
		if x.kind == "leader" && !x.recv.Before(since) {
			p = x.proc()
		}
	}
	return p
}

func count(recs []record, kind string) int {
	n := 0
	for _, x := range recs {
		if x.kind == kind {
			n++
		}
	}
	return n
}

// summarize prints medians and tails over the kills that completed.
func summarize(res []killResult) {
	groups := []struct {
		name string
		keep func(killResult) bool
	}{
		{"all kills", func(killResult) bool { return true }},
		{"non-leader kills", func(r killResult) bool { return !r.leader }},
		{"leader kills", func(r killResult) bool { return r.leader }},
	}
	bad := 0
	for _, r := range res {
		if !r.resultOK || r.lastApplied < 0 {
			bad++
		}
	}
	fmt.Printf("\n%d kills, %d with a wrong/missing result or no new view everywhere\n", len(res), bad)
	fmt.Printf("%-17s %5s  %-28s %-28s %-28s\n", "", "n", "kill->confirmed", "confirmed->all applied", "kill->all applied")
	fmt.Printf("%-17s %5s  %-28s %-28s %-28s\n", "", "", "med / p90 / p99 / max ms", "med / p90 / p99 / max ms", "med / p90 / p99 / max ms")
	for _, g := range groups {
		var d, c, t []time.Duration
		for _, r := range res {
			if !g.keep(r) || r.lastApplied < 0 {
				continue
			}
			if r.detect >= 0 {
				d = append(d, r.detect)
			}
			if r.commit >= 0 {
				c = append(c, r.commit)
			}
			t = append(t, r.lastApplied)
		}
		if len(t) == 0 {
			continue
		}
		fmt.Printf("%-17s %5d  %-28s %-28s %-28s\n", g.name, len(t), quantiles(d), quantiles(c), quantiles(t))
	}
}

// quantiles formats median, p90, p99 and max (nearest rank).
func quantiles(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	q := func(p float64) float64 {
		i := int(p*float64(len(s))+0.999999) - 1
		i = min(max(i, 0), len(s)-1)
		return msf(s[i])
	}
	return fmt.Sprintf("%.0f / %.0f / %.0f / %.0f", q(0.5), q(0.9), q(0.99), msf(s[len(s)-1]))
}
