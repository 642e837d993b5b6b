package bench

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// Report is what rank 0 measured. Zero figures mean "not measured".
type Report struct {
	Ranks    int
	Spin     time.Duration
	LoadAvg  string // at the start: 1, 5 and 15 minute load averages
	LoadEnd  string // at the end
	Env      string // GOMAXPROCS, CPUs, Go version
	BW       []BWRow
	Lat      []LatRow
	Flush    []CollRow // write+Wait round trips (Op "write_wait")
	Coll     []CollRow
	Targets  []Target
	Duration time.Duration
}

// BWRow is one size of the bandwidth tests, in MiB/s.
type BWRow struct {
	Size       int64
	Window     int
	Iters      int // timed windows of the write test (and of the raw stream when both ran)
	ReadIters  int
	Write      float64
	Read       float64
	Raw        float64
	RawIters   int
	WriteRatio float64 // Write / Raw
	ReadRatio  float64 // Read / Raw
	Capped     bool    // a measurement stopped at its time cap, with fewer iterations than planned
}

// LatRow is one size of the ping-pong tests; times are round trips.
type LatRow struct {
	Size   int64
	RTT    Dist // pgas write+notify round trip
	Raw    Dist // plain TCP round trip
	Ratio  float64
	Capped bool // stopped at the time cap
}

// CollRow is one collective measurement. Dist is rank 0's per-call
// samples; SlowestMean is the mean per call of the slowest rank.
type CollRow struct {
	Op          string
	Size        int64 // bytes; 0 for barrier
	Dist        Dist
	SlowestMean time.Duration
	Capped      bool // stopped at the time cap
}

// Target is one acceptance target of the runtime, checked against what
// was measured.
type Target struct {
	What  string
	Value string
	Met   bool
	Note  string
}

// printer writes the report as it is measured: text tables, or CSV.
type printer struct {
	w       io.Writer
	csv     bool
	started map[string]bool
	capped  bool // a starred count was printed
}

func newPrinter(w io.Writer, csv bool) *printer {
	if w == nil {
		w = io.Discard
	}
	return &printer{w: w, csv: csv, started: map[string]bool{}}
}

const csvHeader = "test,ranks,size_bytes,window,iters,pgas_mib_s,raw_mib_s,raw_iters,ratio,median_us,p99_us,mean_us,raw_median_us,raw_p99_us,capped"

func (p *printer) header(r *Report, cfg *Config) {
	fmt.Fprintf(p.w, "# gaspibench: %d ranks, spin %v, %s\n", r.Ranks, r.Spin, r.Env)
	fmt.Fprintf(p.w, "# load average at start: %s\n", r.LoadAvg)
	fmt.Fprintf(p.w, "# per measurement: %d warm-up iterations, then at least %d timed and at least %v\n", cfg.Warmup, cfg.Iters, cfg.MinTime)
	if p.csv {
		fmt.Fprintln(p.w, csvHeader)
	}
}

func (p *printer) section(key string, lines ...string) {
	if p.csv || p.started[key] {
		return
	}
	p.started[key] = true
	fmt.Fprintln(p.w)
	for _, l := range lines {
		fmt.Fprintln(p.w, l)
	}
}

func num(v float64, format string) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf(format, v)
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func usCol(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", us(d))
}

func csvNum(v float64, format string) string {
	if v == 0 {
		return ""
	}
	return fmt.Sprintf(format, v)
}

func csvUs(d time.Duration) string {
	if d == 0 {
		return ""
	}
	return fmt.Sprintf("%.2f", us(d))
}

func csvBool(b bool) string {
	if b {
		return "1"
	}
	return ""
}

func csvInt(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprint(n)
}

func (p *printer) bw(r *Report, row BWRow) {
	if p.csv {
		if row.Write != 0 || row.Raw != 0 {
			fmt.Fprintf(p.w, "write,%d,%d,%d,%s,%s,%s,%s,%s,,,,,,%s\n", r.Ranks, row.Size, row.Window, csvInt(row.Iters),
				csvNum(row.Write, "%.1f"), csvNum(row.Raw, "%.1f"), csvInt(row.RawIters), csvNum(row.WriteRatio, "%.3f"), csvBool(row.Capped))
		}
		if row.Read != 0 {
			fmt.Fprintf(p.w, "read,%d,%d,%d,%d,%.1f,%s,%s,%s,,,,,,%s\n", r.Ranks, row.Size, row.Window, row.ReadIters,
				row.Read, csvNum(row.Raw, "%.1f"), csvInt(row.RawIters), csvNum(row.ReadRatio, "%.3f"), csvBool(row.Capped))
		}
		return
	}
	p.section("bw",
		"# Bandwidth, rank 0 -> rank 1, MiB/s. write: Write x window, then Wait (remote completion);",
		"# read: Read x window, then Wait; raw: plain Go TCP stream of the same messages and bytes.",
		"# The three take turns in chunks of the same windows, so they see the same load.",
		fmt.Sprintf("# %9s %7s %7s %10s %10s %10s %10s %9s", "size", "window", "iters", "write", "read", "raw", "write/raw", "read/raw"))
	fmt.Fprintf(p.w, "  %9s %7d %7s %10s %10s %10s %10s %9s\n", FormatSize(row.Size), row.Window, p.iters(row.Iters, row.Capped),
		num(row.Write, "%.1f"), num(row.Read, "%.1f"), num(row.Raw, "%.1f"), num(row.WriteRatio, "%.2f"), num(row.ReadRatio, "%.2f"))
}

// iters prints an iteration count, starred when the measurement stopped at
// its time cap.
func (p *printer) iters(n int, capped bool) string {
	if capped {
		p.capped = true
		return intCol(n) + "*"
	}
	return intCol(n)
}

func intCol(n int) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprint(n)
}

func (p *printer) lat(r *Report, row LatRow) {
	if p.csv {
		fmt.Fprintf(p.w, "write_notify_rtt,%d,%d,,%s,,,%s,%s,%s,%s,%s,%s,%s,%s\n", r.Ranks, row.Size, csvInt(row.RTT.N),
			csvInt(row.Raw.N), csvNum(row.Ratio, "%.3f"), csvUs(row.RTT.Median), csvUs(row.RTT.P99), csvUs(row.RTT.Mean),
			csvUs(row.Raw.Median), csvUs(row.Raw.P99), csvBool(row.Capped))
		return
	}
	p.section("lat",
		"# Write+notify ping-pong, rank 0 <-> rank 1, microseconds. one-way = RTT/2;",
		"# raw: plain Go TCP ping-pong of the same size; ratio = pgas RTT median / raw RTT median.",
		fmt.Sprintf("# %9s %7s %9s %9s %9s %9s %9s %9s %7s", "size", "iters", "1way-med", "1way-p99", "rtt-med", "rtt-p99", "raw-med", "raw-p99", "ratio"))
	fmt.Fprintf(p.w, "  %9s %7s %9s %9s %9s %9s %9s %9s %7s\n", FormatSize(row.Size), p.iters(max(row.RTT.N, row.Raw.N), row.Capped),
		usCol(row.RTT.Median/2), usCol(row.RTT.P99/2), usCol(row.RTT.Median), usCol(row.RTT.P99),
		usCol(row.Raw.Median), usCol(row.Raw.P99), num(row.Ratio, "%.2f"))
}

func (p *printer) coll(r *Report, row CollRow) {
	size := ""
	if row.Op != "barrier" {
		size = fmt.Sprint(row.Size)
	}
	if p.csv {
		fmt.Fprintf(p.w, "%s,%d,%s,,%d,,,,,%s,%s,%s,,,%s\n", row.Op, r.Ranks, size, row.Dist.N,
			csvUs(row.Dist.Median), csvUs(row.Dist.P99), csvUs(row.SlowestMean), csvBool(row.Capped))
		return
	}
	p.section("coll",
		fmt.Sprintf("# Collectives over %d ranks, microseconds per call (rank 0's samples);", r.Ranks),
		"# allreduce is a float64 sum; slowest-mean is the mean per call of the slowest rank.",
		fmt.Sprintf("# %-10s %9s %7s %9s %9s %12s", "op", "size", "iters", "median", "p99", "slowest-mean"))
	if size != "" {
		size = FormatSize(row.Size)
	} else {
		size = "-"
	}
	fmt.Fprintf(p.w, "  %-10s %9s %7s %9s %9s %12s\n", row.Op, size, p.iters(row.Dist.N, row.Capped), usCol(row.Dist.Median), usCol(row.Dist.P99), usCol(row.SlowestMean))
}

// flush prints one write+Wait round trip row: in CSV with the layout of a
// collective's line (median, p99 and mean in microseconds).
func (p *printer) flush(r *Report, row CollRow) {
	if p.csv {
		fmt.Fprintf(p.w, "%s,%d,%d,,%d,,,,,%s,%s,%s,,,%s\n", row.Op, r.Ranks, row.Size, row.Dist.N,
			csvUs(row.Dist.Median), csvUs(row.Dist.P99), csvUs(row.Dist.Mean), csvBool(row.Capped))
		return
	}
	p.section("flush",
		"# Write+Wait round trip, rank 0 -> rank 1, microseconds: one Write, then Wait for its remote",
		"# completion (the counterpart of MPI's put+flush).",
		fmt.Sprintf("# %9s %7s %9s %9s %9s", "size", "iters", "median", "p99", "mean"))
	fmt.Fprintf(p.w, "  %9s %7s %9s %9s %9s\n", FormatSize(row.Size), p.iters(row.Dist.N, row.Capped), usCol(row.Dist.Median), usCol(row.Dist.P99), usCol(row.Dist.Mean))
}

func (p *printer) footer(r *Report) {
	if p.csv {
		for _, t := range r.Targets {
			fmt.Fprintf(p.w, "# target: %s: %s: %s%s\n", t.What, t.Value, metWord(t.Met), noteSuffix(t.Note))
		}
		fmt.Fprintf(p.w, "# load average at end: %s; run took %v\n", r.LoadEnd, r.Duration.Round(time.Millisecond))
		return
	}
	if len(r.Targets) > 0 {
		fmt.Fprintln(p.w)
		fmt.Fprintln(p.w, "# Targets (issue 2, loopback)")
		for _, t := range r.Targets {
			fmt.Fprintf(p.w, "  %-48s %12s  %s%s\n", t.What, t.Value, metWord(t.Met), noteSuffix(t.Note))
		}
	}
	fmt.Fprintln(p.w)
	if p.capped {
		fmt.Fprintln(p.w, "# * stopped at the time cap (10 x --min-time, at least 2 s) before the planned count: the machine slowed down")
	}
	fmt.Fprintf(p.w, "# load average at end: %s; run took %v\n", r.LoadEnd, r.Duration.Round(time.Millisecond))
}

func metWord(met bool) string {
	if met {
		return "met"
	}
	return "NOT met"
}

func noteSuffix(n string) string {
	if n == "" {
		return ""
	}
	return " (" + n + ")"
}

// targets checks the acceptance targets against r.
func targets(r *Report) []Target {
	var out []Target
	for _, row := range r.BW {
		if row.Size == 1<<20 && row.WriteRatio > 0 {
			out = append(out, Target{
				What:  "write bandwidth at 1 MiB >= 0.80 x raw stream",
				Value: fmt.Sprintf("%.2f x", row.WriteRatio),
				Met:   row.WriteRatio >= 0.8,
			})
		}
	}
	for _, row := range r.Lat {
		if row.Size == 8 && row.Ratio > 0 {
			out = append(out, Target{
				What:  "8 B write+notify RTT <= 1.5 x raw ping-pong",
				Value: fmt.Sprintf("%.2f x", row.Ratio),
				Met:   row.Ratio <= 1.5,
			})
		}
	}
	for _, row := range r.Coll {
		if row.Op == "allreduce" && row.Size == 8 {
			t := Target{
				What:  "8 B allreduce median < 200 us on 4 ranks",
				Value: fmt.Sprintf("%.1f us", us(row.Dist.Median)),
				Met:   row.Dist.Median < 200*time.Microsecond,
			}
			if r.Ranks != 4 {
				t.Note = fmt.Sprintf("measured on %d ranks", r.Ranks)
			}
			out = append(out, t)
		}
	}
	return out
}

// String renders the whole report as text (for tests and logs).
func (r *Report) String() string {
	var b strings.Builder
	p := newPrinter(&b, false)
	for _, row := range r.BW {
		p.bw(r, row)
	}
	for _, row := range r.Lat {
		p.lat(r, row)
	}
	for _, row := range r.Flush {
		p.flush(r, row)
	}
	for _, row := range r.Coll {
		p.coll(r, row)
	}
	p.footer(r)
	return b.String()
}
