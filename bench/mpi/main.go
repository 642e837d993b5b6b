// Command mpi compares the runtime with Open MPI on this machine, in one
// run (issue 11): c/osc_bench.c, the tests of gaspibench written with MPI
// one-sided operations and collectives, runs under Open MPI over shared
// memory (btl vader, osc sm) and over TCP (btl tcp on loopback, osc
// pt2pt), and gaspibench runs under gaspirun, back to back, for each rank
// count; it prints every figure and every ratio, and the TCP targets of
// issue 11 with met or NOT met.
//
//	apt-get install -y openmpi-bin libopenmpi-dev   # Debian's Open MPI: mpicc, mpirun
//	go run ./bench/mpi                              # 2 and 4 ranks, one round, ~1 min
//	go run ./bench/mpi -rounds 3 -ranks 2           # medians over 3 rounds taking turns
//	go run ./bench/mpi -hosts 3 -per-host 4         # across 3 simulated hosts (root: network namespaces)
//
// It builds osc_bench with mpicc and gaspirun and gaspibench with go
// build, into a temporary directory. Under root it passes
// --allow-run-as-root to mpirun; --oversubscribe lets 4 ranks share 2
// cores. It is not part of CI.
//
// The figures, each rank 0's: put/write bandwidth in MiB/s (a window of
// min(64, 8 MiB / size) puts or writes, then a flush or Wait); the 8-byte
// put+flush round trip against the write+Wait round trip (gaspibench
// flush) and the write+notify ping-pong (gaspibench lat); the 8-byte
// message rate in MiB/s (64 puts or writes, then a flush or Wait); medians
// of 8-byte float64-sum allreduce and of barrier, in microseconds. Ratios
// are ours / theirs: above 1 is better for bandwidth and rate, below 1 for
// times.
package main

import (
	_ "embed"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gaspigo/gaspigo/bench/internal/benchutil"
	"github.com/gaspigo/gaspigo/bench/internal/hostsrig"
	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
	"github.com/gaspigo/gaspigo/internal/testkit/stats"
)

//go:embed c/osc_bench.c
var oscSource []byte

// system is one of the three things measured.
type system string

const (
	vader  system = "mpi-vader" // Open MPI over shared memory
	mpiTCP system = "mpi-tcp"   // Open MPI over TCP loopback
	ours   system = "ours-tcp"  // gaspibench over transport/tcp (PGAS_SHM=0)
	oursSM system = "ours-shm"  // gaspibench over transport/shm (same host)
)

var systems = []system{vader, mpiTCP, ours, oursSM}

// key names one figure of one system: test (that system's name for it)
// and size.
type key struct {
	test string
	size int
}

// figure is one row of the comparison: the MPI test and ours.
type figure struct {
	name      string
	mpi, ours key
	unit      string
	higher    bool    // higher is better
	target    float64 // issue 11's TCP target on ours/mpi-tcp with 2 ranks; 0: none
}

var figures = []figure{
	{"put/write bandwidth, 1 MiB", key{"put", 1 << 20}, key{"write", 1 << 20}, "MiB/s", true, 0},
	{"put/write bandwidth, 2 MiB", key{"put", 2 << 20}, key{"write", 2 << 20}, "MiB/s", true, 0},
	{"put/write bandwidth, 4 MiB", key{"put", 4 << 20}, key{"write", 4 << 20}, "MiB/s", true, 0},
	{"8 B put+flush vs write+Wait", key{"put_flush", 8}, key{"write_wait", 8}, "us", false, 1.2},
	{"8 B put+flush vs write+notify RTT", key{"put_flush", 8}, key{"write_notify_rtt", 8}, "us", false, 1.2},
	{"8 B message rate, window 64", key{"rate", 8}, key{"write", 8}, "MiB/s", true, 0.5},
	{"8 B allreduce", key{"allreduce", 8}, key{"allreduce", 8}, "us", false, 1.2},
	{"barrier", key{"barrier", 0}, key{"barrier", 0}, "us", false, 1.2},
}

// options are the command's flags.
type options struct {
	rounds         int
	ranks          []int
	minTime        time.Duration
	spin, pollSpin time.Duration
	bin            string
	hosts, perHost int   // -hosts: simulated hosts (0: this host only), -per-host ranks on each
	racks          []int // -racks: hosts per rack, in order (nil: no rack level measured)
}

// results are the figures of every round: by rank count, system and key.
type results map[int]map[system]map[key][]float64

func main() {
	o := parseOptions()
	tmp, err := os.MkdirTemp("", "mpibench-")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(tmp)
	osc, err := buildOSC(tmp)
	if err != nil {
		fail(err)
	}
	dir := o.bin
	if dir == "" {
		d, cleanup, err := proctest.Build("mpibench", false, "./cmd/gaspirun", "./cmd/gaspibench")
		if err != nil {
			fail(err)
		}
		defer cleanup()
		dir = d
	}
	if o.hosts > 0 {
		acrossHosts(o, tmp, osc, dir)
		return
	}
	load := proctest.LoadAvg()
	start := time.Now()
	got := measure(o, osc, dir)
	fmt.Printf("# bench/mpi: Open MPI (%s) over shared memory (vader) and TCP loopback, and gaspibench over\n", mpiVersion())
	fmt.Printf("# TCP loopback (PGAS_SHM=0) and shared memory, on this machine in one run; %d round(s) taking turns, medians over them.\n", o.rounds)
	fmt.Printf("# gaspibench --spin %v --poll-spin %v; --min-time %v.\n", o.spin, o.pollSpin, o.minTime)
	fmt.Printf("# Ratios are ours/theirs: higher is better for MiB/s, lower for us.\n")
	fmt.Printf("# load average before: %s; after: %s; took %v\n", load, proctest.LoadAvg(), time.Since(start).Round(time.Second))
	for _, n := range o.ranks {
		printRanks(got, n)
	}
}

// acrossHosts is main's second half for -hosts: the rig, the runs, the
// table.
func acrossHosts(o options, tmp, osc, dir string) {
	r, err := hostsrig.New(tmp, o.hosts, o.perHost)
	if err != nil {
		fail(fmt.Errorf("-hosts: %w", err))
	}
	defer r.Close()
	load := proctest.LoadAvg()
	start := time.Now()
	got, err := measureHosts(o, r, osc, dir)
	if err != nil {
		r.Close()
		fail(err)
	}
	fmt.Printf("# bench/mpi -hosts %d: Open MPI (%s, btl self,vader,tcp, osc pt2pt) and gaspibench under gaspirun (shared memory inside a\n", o.hosts, mpiVersion())
	fmt.Printf("# host, TCP between), across %d simulated hosts on a bridge, launched through ip netns exec; %d round(s) taking turns.\n", o.hosts, o.rounds)
	fmt.Printf("# load average before: %s; after: %s; took %v\n", load, proctest.LoadAvg(), time.Since(start).Round(time.Second))
	printHosts(got, o.hosts, o.perHost)
}

// parseOptions reads and checks the flags, and that Open MPI is
// installed; it ends the program when they are not right.
func parseOptions() options {
	var o options
	flag.IntVar(&o.rounds, "rounds", 1, "runs of each system per rank count, taking turns; figures are medians over them")
	ranksFlag := flag.String("ranks", "2,4", "comma-separated rank counts")
	flag.DurationVar(&o.minTime, "min-time", 200*time.Millisecond, "least time per measurement (osc_bench and gaspibench --min-time)")
	flag.DurationVar(&o.spin, "spin", 0, "gaspibench --spin (the runtime's SpinWait)")
	flag.DurationVar(&o.pollSpin, "poll-spin", -1, "gaspibench --poll-spin (the TCP reader's PollSpin); -1ns: the job's choice (it polls when each process of the host has a CPU)")
	flag.StringVar(&o.bin, "bin", "", "directory holding gaspirun and gaspibench (default: build them)")
	flag.IntVar(&o.hosts, "hosts", 0, "run across `N` simulated hosts (network namespaces; needs root) instead of on this host: Open MPI and ours, -per-host ranks on each")
	flag.IntVar(&o.perHost, "per-host", 4, "ranks per simulated host (-hosts)")
	racksFlag := flag.String("racks", "", "with -hosts, also run ours with a rack level (gaspirun --racks): comma-separated `counts` of hosts per rack, in host order, e.g. 2,1")
	flag.Parse()
	var err error
	o.ranks, err = parseRanks(*ranksFlag)
	if err == nil && (o.rounds < 1 || o.rounds > 100) {
		err = fmt.Errorf("-rounds %d: want 1..100", o.rounds)
	}
	if err == nil && (o.minTime <= 0 || o.minTime > 10*time.Second) {
		err = fmt.Errorf("-min-time %v: want (0, 10s]", o.minTime)
	}
	if err == nil && (o.hosts < 0 || o.hosts == 1 || o.hosts > 16 || o.perHost < 1 || o.perHost > 16) {
		err = fmt.Errorf("-hosts %d -per-host %d: want 0 (this host) or 2..16 hosts, 1..16 ranks each", o.hosts, o.perHost)
	}
	if err == nil && *racksFlag != "" {
		o.racks, err = parseRacks(*racksFlag, o.hosts)
	}
	if err != nil {
		fail(err)
	}
	for _, tool := range []string{"mpicc", "mpirun"} {
		if _, err := exec.LookPath(tool); err != nil {
			fail(fmt.Errorf("%s not found: install Debian's Open MPI (apt-get install -y openmpi-bin libopenmpi-dev)", tool))
		}
	}
	return o
}

// measure runs every system for each rank count, o.rounds times, taking
// turns: osc_bench (osc) under Open MPI, gaspibench from dir under
// gaspirun.
func measure(o options, osc, dir string) results {
	got := results{}
	for _, n := range o.ranks {
		got[n] = map[system]map[key][]float64{}
		for r := range o.rounds {
			for i := range systems {
				s := systems[(i+r)%len(systems)]
				var rows map[key]float64
				var err error
				if s == ours || s == oursSM {
					rows, err = runOurs(dir, s, n, o.minTime, o.spin, o.pollSpin)
				} else {
					rows, err = runMPI(osc, s, n, o.minTime)
				}
				if err != nil {
					fail(fmt.Errorf("%d ranks, round %d, %s: %w", n, r+1, s, err))
				}
				if got[n][s] == nil {
					got[n][s] = map[key][]float64{}
				}
				for k, v := range rows {
					got[n][s][k] = append(got[n][s][k], v)
				}
			}
		}
	}
	return got
}

// printRanks prints the table of n ranks: each figure's medians and
// ratios, then, for 2 ranks, the TCP targets of issue 11.
func printRanks(got results, n int) {
	fmt.Printf("\n# %d ranks\n", n)
	fmt.Printf("%-36s %6s %11s %11s %11s %11s %12s %10s\n", "figure", "unit", "mpi-vader", "mpi-tcp", "ours-tcp", "ours-shm", "shm/vader", "tcp/tcp")
	var checks []string
	for _, f := range figures {
		v := stats.Median(got[n][vader][f.mpi])
		t := stats.Median(got[n][mpiTCP][f.mpi])
		o := stats.Median(got[n][ours][f.ours])
		m := stats.Median(got[n][oursSM][f.ours])
		fmt.Printf("%-36s %6s %11s %11s %11s %11s %12s %10s\n", f.name, f.unit, num(v), num(t), num(o), num(m), ratio(m, v), ratio(o, t))
		if f.target > 0 && n == 2 && t > 0 && o > 0 {
			checks = append(checks, f.check(o/t))
		}
	}
	if len(checks) > 0 {
		fmt.Println("# TCP targets of issue 11 (2 ranks)")
		for _, c := range checks {
			fmt.Println(c)
		}
	}
}

// check is the line that says whether r, ours/mpi-tcp, meets f's target.
func (f figure) check(r float64) string {
	met := r <= f.target
	cmp := "<="
	if f.higher {
		met, cmp = r >= f.target, ">="
	}
	word := "NOT met"
	if met {
		word = "met"
	}
	return fmt.Sprintf("  %-36s ours/mpi-tcp %s %.1f: %.2f %s", f.name, cmp, f.target, r, word)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "bench/mpi:", err)
	os.Exit(1)
}

func parseRanks(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 2 || n > 64 {
			return nil, fmt.Errorf("-ranks %q: %q is not a rank count 2..64; use e.g. -ranks 2,4", s, f)
		}
		out = append(out, n)
	}
	return out, nil
}

func num(v float64) string {
	if v == 0 {
		return "-"
	}
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 1:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
	return strconv.FormatFloat(v, 'f', 3, 64)
}

func ratio(a, b float64) string {
	if a == 0 || b == 0 {
		return "-"
	}
	return num(a / b)
}

// buildOSC compiles the embedded osc_bench.c with mpicc into dir.
func buildOSC(dir string) (string, error) {
	src := filepath.Join(dir, "osc_bench.c")
	if err := os.WriteFile(src, oscSource, 0o600); err != nil {
		return "", err
	}
	exe := filepath.Join(dir, "osc_bench")
	out, err := exec.Command("mpicc", "-O2", "-o", exe, src).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("mpicc osc_bench.c: %v\n%s", err, out)
	}
	return exe, nil
}

func mpiVersion() string {
	out, err := exec.Command("mpirun", "--version").Output()
	if err != nil {
		return "version unknown"
	}
	line, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(line)
}

// runMPI runs osc_bench over shared memory or TCP and returns rank 0's
// figures by MPI test name.
func runMPI(exe string, s system, n int, minTime time.Duration) (map[key]float64, error) {
	args := []string{"--oversubscribe", "--bind-to", "none", "-np", strconv.Itoa(n)}
	if os.Geteuid() == 0 {
		args = append([]string{"--allow-run-as-root"}, args...)
	}
	if s == vader {
		args = append(args, "--mca", "btl", "self,vader")
	} else {
		// One-sided over TCP: osc pt2pt (osc rdma needs an RDMA-capable
		// btl), point-to-point by ob1 over btl tcp on loopback.
		args = append(args, "--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo",
			"--mca", "pml", "ob1", "--mca", "osc", "pt2pt")
	}
	args = append(args, exe, strconv.FormatFloat(minTime.Seconds(), 'f', 3, 64))
	out, err := run("mpirun", args...)
	if err != nil {
		return nil, err
	}
	return parseOSC(out)
}

// parseOSC returns rank 0's figures from osc_bench's output, by MPI test
// name and size.
func parseOSC(out string) (map[key]float64, error) {
	rows := map[key]float64{}
	for l := range strings.SplitSeq(out, "\n") {
		f := strings.Split(strings.TrimSpace(l), ",")
		if len(f) != 7 || f[0] != "mpi" {
			continue
		}
		size, err1 := strconv.Atoi(f[3])
		v, err2 := strconv.ParseFloat(f[6], 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("osc_bench line %q: %v %v", l, err1, err2)
		}
		rows[key{f[1], size}] = v
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("no measurements in osc_bench's output\n%s", out)
	}
	return rows, nil
}

// runOurs runs gaspibench under gaspirun, over TCP (ours) or shared
// memory (oursSM), and returns rank 0's figures.
func runOurs(dir string, s system, n int, minTime, spin, pollSpin time.Duration) (map[key]float64, error) {
	shm := "PGAS_SHM=0"
	if s == oursSM {
		shm = "PGAS_SHM=1"
	}
	out, err := runEnv([]string{shm}, filepath.Join(dir, "gaspirun"), "-n", strconv.Itoa(n), "--quiet", "--timeout", "5m", "--",
		filepath.Join(dir, "gaspibench"), "--csv", "--tests", "bw,flush,lat,barrier,allreduce",
		"--sizes", "8,1M,2M,4M", "--lat-sizes", "8", "--coll-sizes", "8", "--window", "64",
		"--min-time", minTime.String(), "--spin", spin.String(), "--poll-spin", pollSpin.String())
	if err != nil {
		return nil, err
	}
	return parseOurs(out)
}

// parseOurs returns rank 0's figures from gaspibench's output.
func parseOurs(out string) (map[key]float64, error) {
	rows := map[key]float64{}
	for l := range strings.SplitSeq(out, "\n") {
		if l, ok := strings.CutPrefix(l, "[r0] "); ok {
			if m, ok := benchutil.ParseMeasurement(l); ok {
				rows[key{m.Test, m.Size}] = m.PGAS
			}
		}
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("no measurements in rank 0's output\n%s", out)
	}
	return rows, nil
}

// run runs a command, bounded, and returns its combined output.
func run(name string, args ...string) (string, error) { return runEnv(nil, name, args...) }

// runEnv is run with env added to this process's environment.
func runEnv(env []string, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	return proctest.Run(10*time.Minute, cmd)
}
