// Command apphosts runs K-means and TeraSort across simulated hosts
// (bench/internal/hostsrig: network namespaces on a bridge, launched by
// gaspirun --hostfile --ssh through the rig's launch agent) with one or two
// builds, taking turns, and prints each job's median wall time, the ratio
// of the second build to the first, and whether every run gave the same
// answer (K-means' centroid digest; TeraSort's output validated against
// its input's record count and checksum), as issue 35 asks of a change to
// the path between hosts:
//
//	go build -o /tmp/old/ ./cmd/gaspirun ./apps/kmeans/cmd/kmeans ./apps/terasort/cmd/terasort   # on the old commit
//	go build -o /tmp/new/ ./cmd/gaspirun ./apps/kmeans/cmd/kmeans ./apps/terasort/cmd/terasort
//	go run ./bench/apphosts -bin /tmp/old,/tmp/new -rounds 3
//
// It needs root and iproute2. Before each run it waits (up to two
// minutes) for the load average to fall below 1.5 and prints it. It is
// not part of CI.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/gaspigo/gaspigo/bench/internal/hostsrig"
	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
	"github.com/gaspigo/gaspigo/internal/testkit/stats"
)

type options struct {
	bins            []string
	rounds          int
	hosts, perHost  int
	points, k, iter int
	records         int
}

// job is one application run across the hosts: its name and how to get
// its answer (the same on every run, or the run is wrong).
type job struct {
	name string
	run  func(bin string, round int) (answer string, wall time.Duration, err error)
}

var digestRE = regexp.MustCompile(`centroids sha256=([0-9a-f]+) `)

func main() {
	o := parseFlags()
	tmp, err := os.MkdirTemp("", "apphosts-")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(tmp)
	r, err := hostsrig.New(tmp, o.hosts, o.perHost)
	if err != nil {
		fail(err)
	}
	defer r.Close()
	jobs, err := setUp(o, r, tmp)
	if err != nil {
		r.Close()
		fail(err)
	}
	fmt.Printf("# bench/apphosts: %d simulated hosts x %d ranks, builds %s; %d round(s) taking turns.\n",
		o.hosts, o.perHost, strings.Join(o.bins, ", "), o.rounds)
	walls := map[string][][]float64{} // job -> build -> seconds
	answers := map[string]map[string]bool{}
	for round := range o.rounds {
		for i := range o.bins {
			b := (i + round) % len(o.bins)
			for _, j := range jobs {
				proctest.SettleLoad(2 * time.Minute)
				load := proctest.LoadAvg()
				ans, wall, err := j.run(o.bins[b], round)
				if err != nil {
					r.Close()
					fail(fmt.Errorf("round %d, %s, %s: %w", round+1, o.bins[b], j.name, err))
				}
				fmt.Printf("round %d  %-8s %-24s %8.2f s  load %s  %s\n", round+1, j.name, o.bins[b], wall.Seconds(), load, ans)
				if walls[j.name] == nil {
					walls[j.name] = make([][]float64, len(o.bins))
					answers[j.name] = map[string]bool{}
				}
				walls[j.name][b] = append(walls[j.name][b], wall.Seconds())
				answers[j.name][ans] = true
			}
		}
	}
	report(o, jobs, walls, answers)
}

func parseFlags() options {
	var o options
	var bins string
	flag.StringVar(&bins, "bin", "", "one or two comma-separated directories, each with gaspirun, kmeans and terasort (the second is compared with the first)")
	flag.IntVar(&o.rounds, "rounds", 3, "rounds; each runs every build once, starting with the next")
	flag.IntVar(&o.hosts, "hosts", 3, "simulated hosts")
	flag.IntVar(&o.perHost, "per-host", 4, "ranks per host")
	flag.IntVar(&o.points, "points", 400000, "K-means points (--generate)")
	flag.IntVar(&o.k, "k", 50, "K-means clusters")
	flag.IntVar(&o.iter, "iters", 30, "K-means iterations (--max-iter)")
	flag.IntVar(&o.records, "records", 1000000, "TeraSort records (100 bytes each)")
	flag.Parse()
	for _, b := range strings.Split(bins, ",") {
		if b = strings.TrimSpace(b); b != "" {
			o.bins = append(o.bins, b)
		}
	}
	switch {
	case len(o.bins) < 1 || len(o.bins) > 2:
		fail(fmt.Errorf("-bin: give one or two build directories, comma-separated"))
	case o.rounds < 1 || o.hosts < 1 || o.perHost < 1 || o.points < o.k || o.k < 1 || o.iter < 1 || o.records < 1:
		fail(fmt.Errorf("-rounds, -hosts, -per-host, -k, -iters and -records must be at least 1, and -points at least -k"))
	}
	return o
}

// setUp generates TeraSort's input once and returns the two jobs.
func setUp(o options, r *hostsrig.Rig, tmp string) ([]job, error) {
	n := o.hosts * o.perHost
	in := filepath.Join(tmp, "in")
	terasort0 := filepath.Join(o.bins[0], "terasort")
	if out, err := exec.Command(terasort0, "gen", "--records", strconv.Itoa(o.records), "--parts", strconv.Itoa(n), "--out", in, "--quiet").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("terasort gen: %w\n%s", err, out)
	}
	sum, err := lastLine(exec.Command(terasort0, "sum", in))
	if err != nil {
		return nil, fmt.Errorf("terasort sum: %w", err)
	}
	launch := func(bin string, prog ...string) (string, time.Duration, error) {
		args := append([]string{"-n", strconv.Itoa(n), "--hostfile", r.Hostfile, "--ssh", r.Agent, "--quiet", "--timeout", "10m", "--"}, prog...)
		start := time.Now()
		out, err := exec.Command(filepath.Join(bin, "gaspirun"), args...).CombinedOutput()
		if err != nil {
			return "", 0, fmt.Errorf("%w\n%s", err, tail(out))
		}
		return string(out), time.Since(start), nil
	}
	kmeans := job{name: "kmeans", run: func(bin string, _ int) (string, time.Duration, error) {
		out, wall, err := launch(bin, filepath.Join(bin, "kmeans"), "--generate", strconv.Itoa(o.points), "--dim", "10",
			"--k", strconv.Itoa(o.k), "--max-iter", strconv.Itoa(o.iter), "--ckpt-every", "10")
		if err != nil {
			return "", 0, err
		}
		m := digestRE.FindStringSubmatch(out)
		if m == nil {
			return "", 0, fmt.Errorf("no centroid digest in the output\n%s", tail([]byte(out)))
		}
		return "sha256=" + m[1][:16], wall, nil
	}}
	terasort := job{name: "terasort", run: func(bin string, round int) (string, time.Duration, error) {
		out := filepath.Join(tmp, fmt.Sprintf("out-%d-%s", round, filepath.Base(bin)))
		defer os.RemoveAll(out)
		_, wall, err := launch(bin, filepath.Join(bin, "terasort"), "sort", "--in", in, "--out", out, "--spill", filepath.Join(tmp, "spill", "%h"))
		if err != nil {
			return "", 0, err
		}
		got, err := lastLine(exec.Command(filepath.Join(bin, "terasort"), "validate", out))
		if err != nil {
			return "", 0, fmt.Errorf("validate: %w", err)
		}
		if got != sum {
			return "", 0, fmt.Errorf("output %q, input %q", got, sum)
		}
		return got, wall, nil
	}}
	return []job{kmeans, terasort}, nil
}

// report prints each job's medians, the second build's ratio and whether
// the answers agreed.
func report(o options, jobs []job, walls map[string][][]float64, answers map[string]map[string]bool) {
	fmt.Printf("\n%-10s", "job")
	for _, b := range o.bins {
		fmt.Printf(" %22s", filepath.Base(b)+" (s)")
	}
	if len(o.bins) == 2 {
		fmt.Printf(" %10s", "2nd/1st")
	}
	fmt.Printf("  %s\n", "answers")
	for _, j := range jobs {
		fmt.Printf("%-10s", j.name)
		var med []float64
		for b := range o.bins {
			m := stats.Median(walls[j.name][b])
			med = append(med, m)
			fmt.Printf(" %22.2f", m)
		}
		if len(med) == 2 {
			fmt.Printf(" %10.3f", med[1]/med[0])
		}
		verdict := "the same on every run"
		if len(answers[j.name]) != 1 {
			verdict = fmt.Sprintf("DIFFER (%d distinct)", len(answers[j.name]))
		}
		fmt.Printf("  %s\n", verdict)
	}
}

// lastLine runs cmd and returns the last line of its output.
func lastLine(cmd *exec.Cmd) (string, error) {
	out, err := cmd.Output()
	return proctest.LastLine(string(out)), err
}

func tail(out []byte) string {
	s := strings.TrimSpace(string(out))
	if len(s) > 2000 {
		s = "..." + s[len(s)-2000:]
	}
	return s
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "apphosts:", err)
	os.Exit(1)
}
