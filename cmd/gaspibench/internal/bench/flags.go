package bench

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// Options is what the command line asks for: the benchmark Config plus
// what the program around Run does with files.
type Options struct {
	Config Config
	// Out, when set, is a file that rank 0 writes the report to (text or
	// CSV) as well as printing it; unlike the printed copy its lines carry
	// no launcher prefix.
	Out string
	// CPUProfile, when set, makes each rank write a CPU profile of its run
	// to CPUProfile.r<rank> (for go tool pprof).
	CPUProfile string
}

const usage = `usage: gaspirun -n N [gaspirun flags] -- gaspibench [flags]

Micro-benchmarks of the pgas runtime in the manner of the OSU suite. Rank 0
prints the tables; the point-to-point tests run between ranks 0 and 1 and
the collectives over every rank. Each size is compared with plain Go TCP
between the same two processes, measured in the same run.

flags:
`

// ParseFlags turns command-line arguments into Options, validated. Help
// (-h) gives flag.ErrHelp after printing the usage to stderr.
func ParseFlags(args []string, stderr io.Writer) (Options, error) {
	def := DefaultConfig()
	fs := flag.NewFlagSet("gaspibench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	var o Options
	c := &o.Config
	*c = def
	tests := fs.String("tests", "all", "comma-separated tests: bw (write bandwidth), rbw (read bandwidth), lat (write+notify ping-pong),\nflush (write+Wait round trip, MPI's put+flush), barrier, allreduce, raw (plain TCP baselines), or all")
	sizes := fs.String("sizes", "8..4M", "bandwidth message sizes: comma-separated, A..B for powers of two from A to B (units B, K, M)")
	lat := fs.String("lat-sizes", "8,1K,64K", "ping-pong message sizes")
	coll := fs.String("coll-sizes", "8,1K,64K", "allreduce vector sizes in bytes (multiples of 8: float64 elements)")
	fs.IntVar(&c.Iters, "iters", def.Iters, "least timed iterations per measurement (a window, a round trip or a collective call)")
	fs.IntVar(&c.Warmup, "warmup", def.Warmup, "untimed iterations before each measurement; they also calibrate --min-time")
	fs.DurationVar(&c.MinTime, "min-time", def.MinTime, "least time per measurement: more than --iters iterations are timed until it is filled; 0 times exactly --iters")
	fs.IntVar(&c.Window, "window", def.Window, "writes or reads posted before each Wait in the bandwidth tests (fewer for large messages: at most 8 MiB per window)")
	fs.DurationVar(&c.Spin, "spin", def.Spin, "runtime SpinWait: how long waiting calls poll before parking (0 on oversubscribed hosts)")
	fs.DurationVar(&c.PollSpin, "poll-spin", def.PollSpin, "TCP PollSpin: how long each connection's reader polls its socket before parking; -1ns: the job's choice (PGAS_TCP_SPIN, else polling when each process of the host has a CPU)")
	fs.BoolVar(&c.CSV, "csv", false, "machine-readable output: one CSV line per measurement")
	fs.DurationVar(&c.Timeout, "timeout", def.Timeout, "bound on the whole run")
	fs.StringVar(&o.Out, "out", "", "also write rank 0's report to this file (no launcher prefixes)")
	fs.StringVar(&o.CPUProfile, "cpuprofile", "", "write a CPU profile per rank to FILE.r<rank>")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return Options{}, err
		}
		return Options{}, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if fs.NArg() > 0 {
		return Options{}, fmt.Errorf("%w: unexpected argument %q; gaspibench takes flags only (see -h)", ErrConfig, fs.Arg(0))
	}
	var err error
	if c.Tests, err = ParseTests(*tests); err != nil {
		return Options{}, err
	}
	for _, s := range []struct {
		flag string
		val  string
		dst  *[]int64
	}{{"--sizes", *sizes, &c.Sizes}, {"--lat-sizes", *lat, &c.LatSizes}, {"--coll-sizes", *coll, &c.CollSizes}} {
		if *s.dst, err = ParseSizes(s.val); err != nil {
			return Options{}, fmt.Errorf("%w: %s: %v", ErrConfig, s.flag, err)
		}
	}
	if strings.TrimSpace(o.Out) != o.Out {
		return Options{}, fmt.Errorf("%w: --out %q has surrounding spaces", ErrConfig, o.Out)
	}
	if err := c.Validate(); err != nil {
		return Options{}, err
	}
	return o, nil
}
