package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/gaspigo/gaspigo/apps/internal/cli"
	"github.com/gaspigo/gaspigo/apps/terasort"
)

// cmdMemsort loads the input into memory, sorts it with
// terasort.SortInMemory and writes one output file, timing each phase.
func cmdMemsort(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg := terasort.DefaultSortConfig()
	fs := flag.NewFlagSet("terasort memsort", flag.ContinueOnError)
	fs.SetOutput(stderr)
	in := fs.String("in", "", "input `DIR` of part files, or one FILE")
	out := fs.String("out", "", "output `FILE` (one file, all records in key order)")
	fs.IntVar(&cfg.Threads, "threads", cfg.Threads, "goroutines sorting")
	fs.BoolVar(&cfg.HugePages, "huge", cfg.HugePages, "use transparent huge pages (MADV_HUGEPAGE) for the record buffers and scratch space (bench.sh compares)")
	repeat := fs.Int("repeat", 1, "sort `K` times on the same buffers; runs after the first show the sort without first-touch page faults (warm)")
	pos, err := cli.Parse(fs, args, stdout)
	if err != nil {
		return err
	}
	switch {
	case len(pos) > 0:
		return usageErr("unexpected argument %q: use --in and --out", pos[0])
	case *in == "" || *out == "":
		return usageErr("give --in DIR|FILE and --out FILE")
	}
	if err := cfg.Validate(); err != nil {
		return usageErr("%v", err)
	}
	if *repeat < 1 {
		return usageErr("--repeat %d: want at least 1", *repeat)
	}
	paths, err := terasort.ResolveInputs([]string{*in})
	if err != nil {
		return err
	}
	t0, c0 := time.Now(), cpuTime()
	src, err := terasort.LoadFiles(paths, cfg.HugePages)
	if err != nil {
		return err
	}
	defer src.Close()
	t1 := time.Now()
	dst, err := terasort.AllocBuffer(len(src.Bytes()), cfg.HugePages)
	if err != nil {
		return err
	}
	defer dst.Close()
	sorter, err := terasort.NewSorter(cfg)
	if err != nil {
		return err
	}
	defer sorter.Close()
	t2, c2 := time.Now(), cpuTime()
	if err := sorter.Sort(dst.Bytes(), src.Bytes()); err != nil {
		return err
	}
	t3, c3 := time.Now(), cpuTime()
	// Warm repeats are timed on their own and left out of write and total.
	var warm, warmCPU, warmWall, warmCPUSum time.Duration
	for r := 1; r < *repeat; r++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		w0, wc := time.Now(), cpuTime()
		if err := sorter.Sort(dst.Bytes(), src.Bytes()); err != nil {
			return err
		}
		d, dc := time.Since(w0), cpuTime()-wc
		warmWall += d
		warmCPUSum += dc
		if warm == 0 || d < warm {
			warm, warmCPU = d, dc
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	tw := time.Now()
	if err := terasort.WriteFile(*out, dst.Bytes()); err != nil {
		return err
	}
	t4 := time.Now()
	n := len(src.Bytes())
	total := t4.Sub(t0) - warmWall
	totalCPU := cpuTime() - c0 - warmCPUSum
	extra := anonHugeKB()
	if warm > 0 {
		extra = fmt.Sprintf(" warm_sort=%.3fs (%.0f MB/s, cpu %.3fs)", warm.Seconds(), float64(n)/1e6/warm.Seconds(), warmCPU.Seconds()) + extra
	}
	mbps := func(d time.Duration) float64 { return float64(n) / 1e6 / d.Seconds() }
	fmt.Fprintf(stdout, "memsort: records=%d bytes=%d threads=%d hugepages=%v load=%.3fs sort=%.3fs (%.0f MB/s, cpu %.3fs) write=%.3fs total=%.3fs (%.0f MB/s, cpu %.3fs)%s\n",
		n/terasort.RecordSize, n, cfg.Threads, cfg.HugePages, t1.Sub(t0).Seconds(), t3.Sub(t2).Seconds(), mbps(t3.Sub(t2)), (c3 - c2).Seconds(),
		t4.Sub(tw).Seconds(), total.Seconds(), mbps(total), totalCPU.Seconds(), extra)
	return nil
}

// anonHugeKB reports how much of this process's memory the kernel backs
// with transparent huge pages (Linux; empty elsewhere), so a run shows
// whether MADV_HUGEPAGE took effect.
func anonHugeKB() string {
	b, err := os.ReadFile("/proc/self/smaps_rollup")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "AnonHugePages:"); ok {
			return " anon_huge_pages=" + strings.Join(strings.Fields(v), "")
		}
	}
	return ""
}
