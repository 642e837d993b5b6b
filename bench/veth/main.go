// Command veth runs gaspibench between two processes on two simulated
// hosts (internal/testkit/simhost: network namespaces joined by veth pairs and a
// bridge) and between two processes on one of them (loopback inside the
// namespace), taking turns in the same run, and prints each measurement's
// median over the rounds with the veth/loopback ratio, as issue 9 asks:
//
//	go run ./bench/veth                # 5 rounds
//	go run ./bench/veth -rounds 9 -tests bw,lat
//
// It needs root and iproute2. Both placements use the bare PGAS_* contract
// (internal/testkit/mhjob) with GOMAXPROCS=1 per process, so the only difference
// is the path the bytes take: the kernel's loopback, or veth -> bridge ->
// veth. Each gaspibench run also measures plain Go TCP over the same path
// (the raw columns), so the table shows what the path costs and what the
// runtime adds on top of it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gaspigo/gaspigo/bench/internal/benchutil"
	"github.com/gaspigo/gaspigo/internal/testkit/mhjob"
	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
	"github.com/gaspigo/gaspigo/internal/testkit/simhost"
	"github.com/gaspigo/gaspigo/internal/testkit/stats"
)

// placement is where the two processes run: Hosts[p] for process p.
type placement struct {
	name  string
	hosts []int
}

var placements = []placement{{"loopback", []int{0, 0}}, {"veth", []int{0, 1}}}

// key names one measurement: test and size.
type key struct {
	test string
	size int
}

// sample is one measurement of one run: pgas and raw, in the test's unit
// (MiB/s for bandwidth, microseconds otherwise).
type sample struct{ pgas, raw float64 }

func main() {
	rounds := flag.Int("rounds", 5, "runs of each placement, taking turns")
	tests := flag.String("tests", "bw,lat,allreduce,raw", "gaspibench --tests (raw: the plain TCP baselines)")
	sizes := flag.String("sizes", "8,1K,64K,1M,4M", "gaspibench --sizes (bandwidth)")
	minTime := flag.Duration("min-time", 300*time.Millisecond, "gaspibench --min-time")
	flag.Parse()
	dir, cleanup := benchutil.HostsAndBinaries("veth", "./cmd/gaspibench")
	defer cleanup()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	c, err := simhost.New(ctx, simhost.Config{Hosts: 2})
	if err != nil {
		fmt.Fprintln(os.Stderr, "veth:", err)
		os.Exit(1)
	}
	defer c.Close()

	load := proctest.LoadAvg()
	args := []string{"--csv", "--tests", *tests, "--sizes", *sizes, "--min-time", minTime.String()}
	got := map[string]map[key][]sample{}
	var order []key
	start := time.Now()
	for r := range *rounds {
		for i := range placements {
			pl := placements[(i+r)%len(placements)] // alternate which goes first
			rows, err := runOnce(ctx, c, dir+"/gaspibench", args, pl)
			if err != nil {
				fmt.Fprintf(os.Stderr, "veth: round %d, %s: %v\n", r+1, pl.name, err)
				os.Exit(1)
			}
			if got[pl.name] == nil {
				got[pl.name] = map[key][]sample{}
			}
			for _, row := range rows {
				if !slices.Contains(order, row.k) {
					order = append(order, row.k)
				}
				got[pl.name][row.k] = append(got[pl.name][row.k], row.s)
			}
		}
	}
	fmt.Printf("# gaspibench, 2 processes: two simulated hosts (veth + bridge) against one host (loopback),\n")
	fmt.Printf("# %d rounds taking turns; medians over the rounds. bw in MiB/s (higher is better), others in\n", *rounds)
	fmt.Printf("# microseconds (lower is better); raw is plain Go TCP over the same path in the same run.\n")
	fmt.Printf("# load average before: %s; after: %s; took %v\n", load, proctest.LoadAvg(), time.Since(start).Round(time.Second))
	fmt.Printf("%-18s %7s %11s %11s %11s %11s %9s %9s\n", "test", "size", "loop-pgas", "veth-pgas", "loop-raw", "veth-raw", "pgas v/l", "raw v/l")
	for _, k := range order {
		lp, lr := medians(got["loopback"][k])
		vp, vr := medians(got["veth"][k])
		fmt.Printf("%-18s %7s %11.1f %11.1f %11s %11s %9.2f %9s\n", k.test, benchutil.SizeName(k.size), lp, vp, opt(lr), opt(vr), vp/lp, ratio(vr, lr))
	}
}

// row is one CSV measurement line of gaspibench.
type row struct {
	k key
	s sample
}

// runOnce runs gaspibench once with placement pl and returns rank 0's
// measurements.
func runOnce(ctx context.Context, c *simhost.Cluster, bin string, args []string, pl placement) ([]row, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	j, err := mhjob.Start(ctx, mhjob.Config{Cluster: c, Program: bin, Args: args, Hosts: pl.hosts,
		Env: []string{"GOMAXPROCS=1"}})
	if err != nil {
		return nil, err
	}
	defer j.Kill()
	if err := j.Wait(ctx); err != nil {
		return nil, fmt.Errorf("%w\n%s", err, strings.Join(j.Text(), "\n"))
	}
	for _, p := range j.Procs() {
		if code, sig, _, _ := p.Exit(); code != 0 || sig != 0 {
			return nil, fmt.Errorf("process %d: exit %d, signal %v\n%s", p.ID, code, sig, strings.Join(j.Text(), "\n"))
		}
	}
	var rows []row
	for _, l := range j.Lines() {
		if m, ok := benchutil.ParseMeasurement(l.Text); ok && l.Proc == 0 {
			rows = append(rows, row{key{m.Test, m.Size}, sample{m.PGAS, m.Raw}})
		}
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("no measurements in rank 0's output\n%s", strings.Join(j.Text(), "\n"))
	}
	return rows, nil
}

// medians returns the medians of the pgas and raw figures of ss.
func medians(ss []sample) (pgas, raw float64) {
	var p, r []float64
	for _, s := range ss {
		p = append(p, s.pgas)
		if s.raw > 0 {
			r = append(r, s.raw)
		}
	}
	return stats.Median(p), stats.Median(r)
}

func opt(v float64) string {
	if v == 0 {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

func ratio(a, b float64) string {
	if a == 0 || b == 0 {
		return "-"
	}
	return strconv.FormatFloat(a/b, 'f', 2, 64)
}
