package bench

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/pgas"
	"github.com/gaspigo/gaspigo/pgas/pgastest"
	"github.com/gaspigo/gaspigo/transport/mem"
)

func TestParseSizes(t *testing.T) {
	cases := []struct {
		in   string
		want []int64
	}{
		{"8", []int64{8}},
		{"8B, 1K,64KiB,4m,1MB", []int64{8, 1 << 10, 64 << 10, 4 << 20, 1 << 20}},
		{"8..64", []int64{8, 16, 32, 64}},
		{"8..100", []int64{8, 16, 32, 64}},
		{"3..3", []int64{3}},
		{"", nil},
	}
	for _, c := range cases {
		got, err := ParseSizes(c.in)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("ParseSizes(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	all, err := ParseSizes("8..4M")
	if err != nil || len(all) != 20 || all[0] != 8 || all[19] != 4<<20 {
		t.Errorf("8..4M gave %v, %v; want the 20 powers of two from 8 B to 4 MiB", all, err)
	}
	for _, bad := range []string{"x", "-8", "8..4", "0..8", "1.5K", "8..", "4T", "99999999999G"} {
		if got, err := ParseSizes(bad); err == nil {
			t.Errorf("ParseSizes(%q) = %v, want an error", bad, got)
		}
	}
}

func TestFormatSize(t *testing.T) {
	for n, want := range map[int64]string{8: "8 B", 1000: "1000 B", 1024: "1 KiB", 1536: "1536 B", 64 << 10: "64 KiB", 4 << 20: "4 MiB", 3 << 19: "1536 KiB"} {
		if got := FormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestParseTests(t *testing.T) {
	got, err := ParseTests("bw, LAT,raw")
	if err != nil || got != TestBW|TestLat|TestRaw || got.String() != "bw,lat,raw" {
		t.Errorf("got %v (%s), %v", got, got, err)
	}
	if got, err := ParseTests("all"); err != nil || got != TestAll {
		t.Errorf("all: %v, %v", got, err)
	}
	for _, bad := range []string{"", ",", "bandwidth"} {
		if _, err := ParseTests(bad); !errors.Is(err, ErrConfig) {
			t.Errorf("ParseTests(%q): %v, want ErrConfig", bad, err)
		}
	}
}

func TestParseFlags(t *testing.T) {
	var stderr bytes.Buffer
	o, err := ParseFlags(nil, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if def := DefaultConfig(); !reflect.DeepEqual(o.Config, def) {
		t.Errorf("no flags gave\n%+v\nwant DefaultConfig\n%+v", o.Config, def)
	}
	o, err = ParseFlags([]string{"--tests", "bw,raw", "--sizes", "1K..4K", "--lat-sizes", "8", "--coll-sizes", "16",
		"--iters", "7", "--warmup", "0", "--min-time", "0", "--window", "16", "--spin", "0", "--csv",
		"--timeout", "30s", "--out", "r.csv", "--cpuprofile", "p"}, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	c := o.Config
	if c.Tests != TestBW|TestRaw || !reflect.DeepEqual(c.Sizes, []int64{1024, 2048, 4096}) || !reflect.DeepEqual(c.LatSizes, []int64{8}) ||
		!reflect.DeepEqual(c.CollSizes, []int64{16}) || c.Iters != 7 || c.Warmup != 0 || c.MinTime != 0 || c.Window != 16 ||
		c.Spin != 0 || !c.CSV || c.Timeout != 30*time.Second || o.Out != "r.csv" || o.CPUProfile != "p" {
		t.Errorf("got %+v", o)
	}
	if _, err := ParseFlags([]string{"-h"}, &stderr); !errors.Is(err, flag.ErrHelp) || !strings.Contains(stderr.String(), "usage: gaspirun") {
		t.Errorf("-h: %v, usage printed: %q", err, stderr.String())
	}
}

// Each bad flag is refused with a message that names it and says what to
// use instead.
func TestParseFlagsErrors(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--iters", "0"}, "Iters (--iters) is 0; want 1..1000000"},
		{[]string{"--warmup", "-1"}, "Warmup (--warmup) is -1"},
		{[]string{"--min-time", "1h"}, "MinTime (--min-time) is 1h0m0s; want 0..10s"},
		{[]string{"--window", "2000"}, "Window (--window) is 2000; want 1..1024"},
		{[]string{"--spin", "1s"}, "Spin (--spin) is 1s"},
		{[]string{"--timeout", "0"}, "Timeout (--timeout) is 0s"},
		{[]string{"--sizes", "0"}, "Sizes (--sizes) has 0 B; each size must be 1 B..64 MiB"},
		{[]string{"--sizes", "128M"}, "each size must be 1 B..64 MiB"},
		{[]string{"--sizes", "8..4"}, "--sizes: range \"8..4\""},
		{[]string{"--sizes", "big"}, "--sizes: size \"big\""},
		{[]string{"--sizes", ""}, "Sizes (--sizes) is empty but the selected tests need sizes"},
		{[]string{"--coll-sizes", "12"}, "CollSizes (--coll-sizes) has 12 B, not a multiple of 8 bytes"},
		{[]string{"--coll-sizes", "4"}, "each size must be 8 B..16 MiB"},
		{[]string{"--tests", "fast"}, "unknown test \"fast\""},
		{[]string{"--iters", "x"}, "invalid value \"x\" for flag -iters"},
		{[]string{"--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"extra"}, "unexpected argument \"extra\""},
	}
	for _, c := range cases {
		var stderr bytes.Buffer
		_, err := ParseFlags(c.args, &stderr)
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v; want ErrConfig with %q", c.args, err, c.want)
		}
	}
	// Sizes may be empty when no test needs them.
	if _, err := ParseFlags([]string{"--tests", "barrier", "--sizes", "", "--lat-sizes", ""}, new(bytes.Buffer)); err != nil {
		t.Errorf("barrier without sizes: %v", err)
	}
}

func TestSummarize(t *testing.T) {
	var s []time.Duration
	for i := 100; i >= 1; i-- {
		s = append(s, time.Duration(i)*time.Microsecond)
	}
	d := Summarize(s)
	want := Dist{N: 100, Min: time.Microsecond, Median: 50 * time.Microsecond, P99: 99 * time.Microsecond, Mean: 50500 * time.Nanosecond}
	if d != want {
		t.Errorf("got %+v, want %+v", d, want)
	}
	if s[0] != 100*time.Microsecond {
		t.Error("Summarize sorted its input")
	}
	if d := Summarize([]time.Duration{7}); d.Median != 7 || d.P99 != 7 || d.N != 1 {
		t.Errorf("one sample: %+v", d)
	}
	if d := Summarize(nil); d != (Dist{}) {
		t.Errorf("no samples: %+v", d)
	}
	// With 10 samples, p99 is the largest.
	ten := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 1000}
	if d := Summarize(ten); d.P99 != 1000 || d.Median != 5 {
		t.Errorf("ten samples: %+v", d)
	}
}

func TestIterationsAndWindow(t *testing.T) {
	c := DefaultConfig()
	c.Iters, c.MinTime = 20, 200*time.Millisecond
	cases := []struct {
		warm int
		took time.Duration
		want int
	}{
		{10, 10 * time.Millisecond, 201},   // 1 ms each: 200 fill MinTime
		{10, 10 * time.Second, 20},         // slow: Iters is the floor
		{0, 0, 20},                         // no warm-up: exactly Iters
		{10, 0, MaxIters},                  // immeasurably fast: capped
		{1000, time.Millisecond, 200001},   // 1 us each
		{1000, time.Microsecond, MaxIters}, // 1 ns each would need 2e8
	}
	for _, k := range cases {
		if got := c.iterations(k.warm, k.took); got != k.want {
			t.Errorf("iterations(%d, %v) = %d, want %d", k.warm, k.took, got, k.want)
		}
	}
	c.MinTime = 0
	if got := c.iterations(10, time.Millisecond); got != 20 {
		t.Errorf("MinTime 0: %d iterations, want Iters", got)
	}
	c.Window, c.WindowBytes = 64, 8<<20
	for size, want := range map[int64]int{8: 64, 128 << 10: 64, 256 << 10: 32, 1 << 20: 8, 4 << 20: 2, 16 << 20: 1} {
		if got := c.window(size); got != want {
			t.Errorf("window(%s) = %d, want %d", FormatSize(size), got, want)
		}
	}
}

func TestNextChunk(t *testing.T) {
	cases := []struct {
		plan, done, chunk int
		elapsed, limit    time.Duration
		k                 int
		capped            bool
	}{
		{100, 0, 13, 0, time.Second, 13, false},
		{100, 91, 13, 0, time.Second, 9, false},                // the last chunk is short
		{100, 100, 13, 0, time.Second, 0, false},               // done
		{100, 0, 13, 5 * time.Second, time.Second, 13, false},  // the first chunk always runs
		{100, 26, 13, 2 * time.Second, time.Second, 0, true},   // over the cap
		{100, 26, 13, time.Hour, 0, 13, false},                 // no cap
		{100, 100, 13, 2 * time.Second, time.Second, 0, false}, // done is not capped
	}
	for _, c := range cases {
		k, capped := nextChunk(c.plan, c.done, c.chunk, c.elapsed, c.limit)
		if k != c.k || capped != c.capped {
			t.Errorf("nextChunk(%d, %d, %d, %v, %v) = %d, %v; want %d, %v", c.plan, c.done, c.chunk, c.elapsed, c.limit, k, capped, c.k, c.capped)
		}
	}
	c := DefaultConfig()
	if got := c.measureCap(); got != 2*time.Second {
		t.Errorf("cap with MinTime 200ms: %v", got)
	}
	c.MinTime = time.Second
	if got := c.measureCap(); got != 10*time.Second {
		t.Errorf("cap with MinTime 1s: %v", got)
	}
	c.MinTime = 0
	if got := c.measureCap(); got != 0 {
		t.Errorf("cap with MinTime 0: %v", got)
	}
}

// newJob starts n ranks in this process over transport/mem.
func newJob(t *testing.T, n int) []*pgas.Runtime {
	t.Helper()
	rts, _ := pgastest.NewJob(t, n, mem.Config{Seed: 1}, nil)
	return rts
}

// runJob runs Run on every rank with the configs cfgs[rank] and returns
// rank 0's report and output and every rank's error. (A failing rank
// keeps its runtime open: transport/mem drops frames still queued when an
// end closes, which TCP would deliver.)
func runJob(t *testing.T, rts []*pgas.Runtime, cfgs []Config) (*Report, string, []error) {
	t.Helper()
	var out bytes.Buffer
	errs := make([]error, len(rts))
	var rep *Report
	var wg sync.WaitGroup
	for i, rt := range rts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := Run(context.Background(), rt, cfgs[i], &out)
			errs[i] = err
			if i == 0 {
				rep = r
			}
		}()
	}
	wg.Wait()
	return rep, out.String(), errs
}

func same(c Config, n int) []Config {
	cfgs := make([]Config, n)
	for i := range cfgs {
		cfgs[i] = c
	}
	return cfgs
}

// A whole run over 3 ranks: every table is filled, every ratio is there,
// the transferred data checked out (Run verifies it), and only rank 0
// printed.
func TestRunAllTests(t *testing.T) {
	rts := newJob(t, 3)
	cfg := LocalConfig()
	cfg.Sizes = []int64{8, 1 << 20}
	rep, out, errs := runJob(t, rts, same(cfg, 3))
	for i, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", i, err)
		}
	}
	if rep == nil || rep.Ranks != 3 || len(rep.BW) != 2 || len(rep.Lat) != 1 || len(rep.Coll) != 3 {
		t.Fatalf("report %+v", rep)
	}
	for _, r := range rep.BW {
		if r.Write <= 0 || r.Read <= 0 || r.Raw <= 0 || r.WriteRatio <= 0 || r.ReadRatio <= 0 || r.Iters != cfg.Iters || r.RawIters != r.Iters {
			t.Errorf("bandwidth row %+v", r)
		}
	}
	if r := rep.Lat[0]; r.RTT.N != cfg.Iters || r.Raw.N != cfg.Iters || r.RTT.Median <= 0 || r.Ratio <= 0 {
		t.Errorf("latency row %+v", r)
	}
	for _, r := range rep.Coll {
		if r.Dist.N != cfg.Iters || r.Dist.Median <= 0 || r.SlowestMean <= 0 {
			t.Errorf("collective row %+v", r)
		}
	}
	if len(rep.Targets) != 3 || rep.Targets[2].Note != "measured on 3 ranks" {
		t.Errorf("targets %+v", rep.Targets)
	}
	for _, want := range []string{"# gaspibench: 3 ranks", "# Bandwidth", "write/raw", "read/raw", "     1 MiB", "# Write+notify ping-pong",
		"rtt-med", "# Collectives over 3 ranks", "barrier", "allreduce        8 B", "allreduce      1 KiB", "# Targets", "write bandwidth at 1 MiB",
		"# load average at end"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "# gaspibench:"); n != 1 {
		t.Errorf("%d headers: only rank 0 should print", n)
	}
	if got := rep.String(); !strings.Contains(got, "# Bandwidth") || !strings.Contains(got, "allreduce") {
		t.Errorf("Report.String:\n%s", got)
	}
}

// CSV output has one header and the same number of fields on every line.
func TestRunCSV(t *testing.T) {
	rts := newJob(t, 2)
	cfg := LocalConfig()
	cfg.CSV = true
	_, out, errs := runJob(t, rts, same(cfg, 2))
	for i, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", i, err)
		}
	}
	fields := strings.Count(csvHeader, ",")
	tests := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		if n := strings.Count(line, ","); n != fields {
			t.Errorf("line %q has %d commas, header %d", line, n, fields)
		}
		tests[strings.SplitN(line, ",", 2)[0]]++
	}
	want := map[string]int{"test": 1, "write": 2, "read": 2, "write_notify_rtt": 1, "write_wait": 1, "barrier": 1, "allreduce": 2}
	if !reflect.DeepEqual(tests, want) {
		t.Errorf("CSV lines per test %v, want %v\n%s", tests, want, out)
	}
}

// Selecting only some tests runs only those; raw alone calibrates itself.
func TestRunSubsets(t *testing.T) {
	rts := newJob(t, 2)
	cfg := LocalConfig()
	cfg.Tests = TestRaw
	rep, _, errs := runJob(t, rts, same(cfg, 2))
	if errs[0] != nil || errs[1] != nil {
		t.Fatal(errs)
	}
	if len(rep.BW) != 2 || rep.BW[0].Raw <= 0 || rep.BW[0].Write != 0 || rep.BW[0].RawIters != cfg.Iters || len(rep.Lat) != 1 ||
		rep.Lat[0].Raw.N == 0 || rep.Lat[0].RTT.N != 0 || len(rep.Coll) != 0 || len(rep.Targets) != 0 {
		t.Errorf("raw only: %+v", rep)
	}
}

// Point-to-point tests on one rank are refused with advice; collectives
// run.
func TestRunOneRank(t *testing.T) {
	rts := newJob(t, 1)
	_, _, errs := runJob(t, rts, same(LocalConfig(), 1))
	if !errors.Is(errs[0], ErrJob) || !strings.Contains(errs[0].Error(), "gaspirun -n 2") {
		t.Errorf("one rank, all tests: %v", errs[0])
	}
	cfg := LocalConfig()
	cfg.Tests = TestBarrier | TestAllreduce
	rep, _, errs := runJob(t, newJob(t, 1), same(cfg, 1))
	if errs[0] != nil || len(rep.Coll) != 3 {
		t.Errorf("one rank, collectives: %v %+v", errs[0], rep)
	}
}

// Ranks started with different settings all stop with ErrJob instead of
// waiting for each other.
func TestRunMismatchedSettings(t *testing.T) {
	rts := newJob(t, 3)
	cfgs := same(LocalConfig(), 3)
	cfgs[2].Iters = 4
	_, _, errs := runJob(t, rts, cfgs)
	for i, err := range errs {
		if !errors.Is(err, ErrJob) || !strings.Contains(err.Error(), "rank 2 runs with other settings") {
			t.Errorf("rank %d: %v", i, err)
		}
	}
}

func TestRunInvalidConfig(t *testing.T) {
	rts := newJob(t, 1)
	cfg := LocalConfig()
	cfg.Window = 0
	if _, err := Run(context.Background(), rts[0], cfg, nil); !errors.Is(err, ErrConfig) {
		t.Errorf("Window 0: %v", err)
	}
}

// A measurement cut short by the time cap is starred and explained.
func TestReportMarksCapped(t *testing.T) {
	r := &Report{Ranks: 2, BW: []BWRow{{Size: 8, Window: 64, Iters: 5, Write: 1, Raw: 2, WriteRatio: 0.5, Capped: true}},
		Coll: []CollRow{{Op: "barrier", Dist: Dist{N: 10, Median: time.Microsecond}}}}
	out := r.String()
	if !strings.Contains(out, "      5*") || !strings.Contains(out, "# * stopped at the time cap") || strings.Contains(out, "10*") {
		t.Errorf("capped report:\n%s", out)
	}
	r.BW[0].Capped = false
	if out := r.String(); strings.Contains(out, "*") {
		t.Errorf("uncapped report has a star:\n%s", out)
	}
}
