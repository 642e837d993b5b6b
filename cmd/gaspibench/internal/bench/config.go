package bench

import (
	"fmt"
	"strings"
	"time"

	"github.com/gaspigo/gaspigo/pgas"
	"github.com/gaspigo/gaspigo/transport"
)

// Tests is a set of benchmarks.
type Tests uint8

// The benchmarks. TestRaw adds the plain TCP baselines to TestBW, TestRBW
// and TestLat (alone, it runs the baselines only).
const (
	TestBW        Tests = 1 << iota // write bandwidth, rank 0 -> rank 1
	TestRBW                         // read bandwidth, rank 0 <- rank 1
	TestLat                         // write+notify ping-pong between ranks 0 and 1
	TestBarrier                     // barrier over every rank
	TestAllreduce                   // float64 sum allreduce over every rank
	TestRaw                         // plain Go TCP stream and ping-pong between ranks 0 and 1
	TestFlush                       // write+Wait round trip (MPI's put+flush), rank 0 -> rank 1

	TestAll = TestBW | TestRBW | TestLat | TestBarrier | TestAllreduce | TestRaw | TestFlush
	// pairTests need ranks 0 and 1.
	pairTests = TestBW | TestRBW | TestLat | TestRaw | TestFlush
)

var testNames = []struct {
	t    Tests
	name string
}{
	{TestBW, "bw"}, {TestRBW, "rbw"}, {TestLat, "lat"},
	{TestBarrier, "barrier"}, {TestAllreduce, "allreduce"}, {TestRaw, "raw"}, {TestFlush, "flush"},
}

// Has reports whether every test of u is in t.
func (t Tests) Has(u Tests) bool { return t&u == u }

// String lists the tests by their flag names, comma-separated.
func (t Tests) String() string {
	var names []string
	for _, n := range testNames {
		if t.Has(n.t) {
			names = append(names, n.name)
		}
	}
	return strings.Join(names, ",")
}

// ParseTests reads a comma-separated list of test names (bw, rbw, lat,
// barrier, allreduce, raw, flush, all).
func ParseTests(s string) (Tests, error) {
	var t Tests
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(strings.ToLower(f))
		if f == "" {
			continue
		}
		if f == "all" {
			t |= TestAll
			continue
		}
		found := false
		for _, n := range testNames {
			if n.name == f {
				t |= n.t
				found = true
			}
		}
		if !found {
			return 0, fmt.Errorf("%w: --tests: unknown test %q; use a comma-separated list of bw, rbw, lat, flush, barrier, allreduce, raw, or all", ErrConfig, f)
		}
	}
	if t == 0 {
		return 0, fmt.Errorf("%w: --tests %q selects nothing; use e.g. --tests bw,lat or --tests all", ErrConfig, s)
	}
	return t, nil
}

// Limits of the configuration.
const (
	// MaxSize is the largest message of the point-to-point tests: one read
	// is at most one transport frame.
	MaxSize = transport.MaxPayload
	// MaxCollSize is the largest allreduce vector, in bytes.
	MaxCollSize = 16 << 20
	// MaxIters caps the iterations of one measurement.
	MaxIters = 1_000_000
	// MaxWindow is the largest window; it must fit one pgas queue.
	MaxWindow = 1024
	// maxTime bounds MinTime and Spin-like durations given on the command line.
	maxMinTime = 10 * time.Second
	maxSpin    = 10 * time.Millisecond
)

// Config says what to measure and how long. Every rank of a job must run
// with the same Config (Run checks it).
type Config struct {
	// Tests selects the benchmarks (--tests). Must not be empty.
	Tests Tests
	// Sizes are the message sizes of the bandwidth tests (write, read and
	// the raw stream), in bytes, 1..MaxSize, measured in this order
	// (--sizes).
	Sizes []int64
	// LatSizes are the ping-pong message sizes in bytes, 1..MaxSize
	// (--lat-sizes).
	LatSizes []int64
	// CollSizes are the allreduce vector sizes in bytes: multiples of 8
	// (float64 elements), 8..MaxCollSize (--coll-sizes).
	CollSizes []int64
	// Iters is the least number of timed iterations of each measurement: a
	// window of writes or reads and its Wait, a round trip, or one
	// collective call. 1..MaxIters (--iters).
	Iters int
	// Warmup is the number of untimed iterations before each measurement.
	// They warm caches, pages and connections, and their pace calibrates
	// how many timed iterations MinTime needs. 0..MaxIters; with 0 exactly
	// Iters iterations are timed (--warmup).
	Warmup int
	// MinTime is the least time each measurement should take: the timed
	// iteration count is raised above Iters, from the warm-up's pace, until
	// it is expected to last this long. Longer is steadier; 0 times exactly
	// Iters iterations. 0..10s (--min-time).
	MinTime time.Duration
	// Window is how many writes or reads the bandwidth tests post before
	// each Wait, 1..MaxWindow (--window). Large messages get fewer, so that
	// one window holds at most WindowBytes.
	Window int
	// WindowBytes caps the bytes of one window, so that one iteration (and
	// the warm-up) of a MiB-sized message stays short. At least 1.
	WindowBytes int64
	// Spin is the runtime's SpinWait: how long a waiting call polls before
	// it parks its goroutine. 0..10ms (--spin). It is applied by the
	// program that creates the runtime; Run only reports it.
	Spin time.Duration
	// PollSpin is the TCP transport's PollSpin: how long a connection's
	// reader polls its socket before it parks in the network poller.
	// 0..10ms, or AutoPollSpin for the job's choice (PGAS_TCP_SPIN, else
	// polling when each process of the host has a CPU) (--poll-spin).
	// Applied, like Spin, by the program that creates the runtime.
	PollSpin time.Duration
	// CSV selects machine-readable output (--csv): one header line and one
	// line per measurement.
	CSV bool
	// Timeout bounds the whole run, so that a stuck rank cannot hang it
	// (--timeout). Must be > 0.
	Timeout time.Duration
}

// AutoPollSpin as Config.PollSpin leaves the reader's polling to the job
// (PGAS_TCP_SPIN, else polling when each process of the host has a CPU).
const AutoPollSpin = -1 * time.Nanosecond

// DefaultConfig measures everything with sizes from 8 B to 4 MiB, about
// 200 ms per measurement: some 12-15 s for a job of 2 or 4 ranks on 2 cores.
func DefaultConfig() Config {
	var sizes []int64
	for s := int64(8); s <= 4<<20; s *= 2 {
		sizes = append(sizes, s)
	}
	return Config{
		Tests:       TestAll,
		Sizes:       sizes,
		LatSizes:    []int64{8, 1 << 10, 64 << 10},
		CollSizes:   []int64{8, 1 << 10, 64 << 10},
		Iters:       20,
		Warmup:      10,
		MinTime:     200 * time.Millisecond,
		Window:      64,
		WindowBytes: 8 << 20,
		Spin:        pgas.DefaultConfig().SpinWait,
		PollSpin:    AutoPollSpin,
		Timeout:     5 * time.Minute,
	}
}

// LocalConfig is a quick functional run for tests: few sizes, few
// iterations, no spinning.
func LocalConfig() Config {
	c := DefaultConfig()
	c.Sizes = []int64{8, 64 << 10}
	c.LatSizes = []int64{8}
	c.CollSizes = []int64{8, 1 << 10}
	c.Iters, c.Warmup, c.MinTime = 3, 1, 0
	c.Window = 4
	c.Spin = 0
	c.Timeout = time.Minute
	return c
}

// Validate checks c without changing it. The error names the field, its
// flag, the value and the range wanted.
func (c *Config) Validate() error {
	var bad []string
	add := func(format string, args ...any) { bad = append(bad, fmt.Sprintf(format, args...)) }
	if c.Tests == 0 || c.Tests&^TestAll != 0 {
		add("Tests (--tests) is %#x; pick from bw, rbw, lat, barrier, allreduce, raw", uint8(c.Tests))
	}
	checkSizes := func(field, flag string, sizes []int64, need bool, max int64, mult int64) {
		if need && len(sizes) == 0 {
			add("%s (%s) is empty but the selected tests need sizes; give e.g. %s 8,1K,64K", field, flag, flag)
		}
		for _, s := range sizes {
			if s < mult || s > max {
				add("%s (%s) has %s; each size must be %s..%s", field, flag, FormatSize(s), FormatSize(mult), FormatSize(max))
			} else if s%mult != 0 {
				add("%s (%s) has %s, not a multiple of %d bytes (float64 elements)", field, flag, FormatSize(s), mult)
			}
		}
	}
	checkSizes("Sizes", "--sizes", c.Sizes, c.Tests&(TestBW|TestRBW|TestRaw) != 0, MaxSize, 1)
	checkSizes("LatSizes", "--lat-sizes", c.LatSizes, c.Tests&(TestLat|TestRaw) != 0, MaxSize, 1)
	checkSizes("CollSizes", "--coll-sizes", c.CollSizes, c.Tests.Has(TestAllreduce), MaxCollSize, 8)
	if c.Iters < 1 || c.Iters > MaxIters {
		add("Iters (--iters) is %d; want 1..%d", c.Iters, MaxIters)
	}
	if c.Warmup < 0 || c.Warmup > MaxIters {
		add("Warmup (--warmup) is %d; want 0..%d", c.Warmup, MaxIters)
	}
	if c.MinTime < 0 || c.MinTime > maxMinTime {
		add("MinTime (--min-time) is %v; want 0..%v", c.MinTime, maxMinTime)
	}
	if c.Window < 1 || c.Window > MaxWindow {
		add("Window (--window) is %d; want 1..%d (operations between two Waits must fit one queue)", c.Window, MaxWindow)
	}
	if c.WindowBytes < 1 {
		add("WindowBytes is %d; want at least 1", c.WindowBytes)
	}
	if c.Spin < 0 || c.Spin > maxSpin {
		add("Spin (--spin) is %v; want 0..%v", c.Spin, maxSpin)
	}
	if (c.PollSpin < 0 && c.PollSpin != AutoPollSpin) || c.PollSpin > maxSpin {
		add("PollSpin (--poll-spin) is %v; want 0..%v, or %v for the job's choice", c.PollSpin, maxSpin, AutoPollSpin)
	}
	if c.Timeout <= 0 {
		add("Timeout (--timeout) is %v; want > 0, e.g. 5m", c.Timeout)
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: %s", ErrConfig, strings.Join(bad, "; "))
	}
	return nil
}

// window returns how many operations of size bytes one window posts.
func (c *Config) window(size int64) int {
	w := c.Window
	if int64(w)*size > c.WindowBytes {
		w = int(max(1, c.WindowBytes/size))
	}
	return w
}

// iterations returns how many timed iterations a measurement runs, given
// that warm untimed iterations took took: at least Iters, and enough to
// last MinTime at the warm-up's pace, never more than MaxIters.
func (c *Config) iterations(warm int, took time.Duration) int {
	n := c.Iters
	if c.MinTime <= 0 || warm <= 0 {
		return n
	}
	per := max(took/time.Duration(warm), 1)
	want := int64(c.MinTime/per) + 1
	return int(max(int64(n), min(want, MaxIters)))
}

// measureCap is how long the timed part of one measurement may run before
// rank 0 stops it early: ten times MinTime, at least 2 s, so that a machine
// that slows down after the warm-up cannot stretch the run without bound.
// With MinTime 0 (exact counts) there is no cap.
func (c *Config) measureCap() time.Duration {
	if c.MinTime <= 0 {
		return 0
	}
	return max(10*c.MinTime, 2*time.Second)
}

// fingerprint is the part of c that every rank must agree on.
func (c *Config) fingerprint() string {
	return fmt.Sprintf("tests=%s sizes=%v lat=%v coll=%v iters=%d warmup=%d min=%v window=%d/%d",
		c.Tests, c.Sizes, c.LatSizes, c.CollSizes, c.Iters, c.Warmup, c.MinTime, c.Window, c.WindowBytes)
}
