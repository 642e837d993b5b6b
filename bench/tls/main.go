// Command tls measures what mutual TLS (gaspirun --tls, PGAS_TLS=1) costs
// the runtime: it runs gaspibench under gaspirun on this machine with TLS
// off and on, taking turns in the same run, and prints each measurement's
// median over the rounds with the on/off ratio, as issue 16 asks:
//
//	go run ./bench/tls                 # 5 rounds
//	go run ./bench/tls -rounds 9 -sizes 1K,1M
//
// Both settings run the same binaries with the same flags, so the only
// difference is the TLS layer on every connection of the job (rendezvous,
// data plane, Raft and control; gaspibench's traffic is the data plane).
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gaspigo/gaspigo/bench/internal/benchutil"
	"github.com/gaspigo/gaspigo/internal/proctest"
	"github.com/gaspigo/gaspigo/internal/stats"
)

// key names one measurement: test and size.
type key struct {
	test string
	size int
}

// settings in the order of the first round; later rounds alternate which
// goes first.
var settings = []string{"off", "on"}

func main() {
	rounds := flag.Int("rounds", 5, "runs of each setting, taking turns")
	ranks := flag.Int("n", 2, "ranks")
	tests := flag.String("tests", "bw,lat,allreduce", "gaspibench --tests")
	sizes := flag.String("sizes", "1K,8K,64K,1M,4M", "gaspibench --sizes (bandwidth)")
	minTime := flag.Duration("min-time", 300*time.Millisecond, "gaspibench --min-time")
	bin := flag.String("bin", "", "directory holding gaspirun and gaspibench (default: build them)")
	flag.Parse()
	dir := *bin
	if dir == "" {
		d, cleanup, err := proctest.Build("tlsbench", false, "./cmd/gaspirun", "./cmd/gaspibench")
		if err != nil {
			fmt.Fprintln(os.Stderr, "tls:", err)
			os.Exit(1)
		}
		defer cleanup()
		dir = d
	}
	args := []string{"-n", strconv.Itoa(*ranks), "--quiet", "--timeout", "5m", "--", filepath.Join(dir, "gaspibench"),
		"--csv", "--tests", *tests, "--sizes", *sizes, "--min-time", minTime.String()}
	load := proctest.LoadAvg()
	start := time.Now()
	got := map[string]map[key][]float64{}
	var order []key
	for r := range *rounds {
		for i := range settings {
			s := settings[(i+r)%len(settings)]
			rows, err := runOnce(filepath.Join(dir, "gaspirun"), args, s == "on")
			if err != nil {
				fmt.Fprintf(os.Stderr, "tls: round %d, TLS %s: %v\n", r+1, s, err)
				os.Exit(1)
			}
			if got[s] == nil {
				got[s] = map[key][]float64{}
			}
			for k, v := range rows {
				if !slices.Contains(order, k) {
					order = append(order, k)
				}
				got[s][k] = append(got[s][k], v)
			}
		}
	}
	slices.SortFunc(order, func(a, b key) int {
		if d := slices.Index(testOrder, a.test) - slices.Index(testOrder, b.test); d != 0 {
			return d
		}
		return a.size - b.size
	})
	fmt.Printf("# gaspibench, %d ranks under gaspirun on this machine, TLS off (token handshake only) against\n", *ranks)
	fmt.Printf("# gaspirun --tls, %d rounds taking turns; medians over the rounds. bw in MiB/s (higher is\n", *rounds)
	fmt.Printf("# better), others in microseconds (lower is better).\n")
	fmt.Printf("# load average before: %s; after: %s; took %v\n", load, proctest.LoadAvg(), time.Since(start).Round(time.Second))
	fmt.Printf("%-18s %7s %11s %11s %9s\n", "test", "size", "tls-off", "tls-on", "on/off")
	for _, k := range order {
		off, on := stats.Median(got["off"][k]), stats.Median(got["on"][k])
		fmt.Printf("%-18s %7s %11.1f %11.1f %9.2f\n", k.test, benchutil.SizeName(k.size), off, on, on/off)
	}
}

var testOrder = []string{"write", "read", "write_notify_rtt", "allreduce"}

// runOnce runs the job once and returns rank 0's measurements: MiB/s for
// bandwidth, the median in microseconds otherwise.
func runOnce(gaspirun string, args []string, tls bool) (map[key]float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	if tls {
		args = append([]string{"--tls"}, args...)
	}
	cmd := exec.CommandContext(ctx, gaspirun, args...)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PGAS_TLS=") {
			env = append(env, kv)
		}
	}
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%w\n%s", err, out.String())
	}
	rows := map[key]float64{}
	for l := range strings.SplitSeq(out.String(), "\n") {
		if l, ok := strings.CutPrefix(l, "[r0] "); ok {
			if m, ok := benchutil.ParseMeasurement(l); ok {
				rows[key{m.Test, m.Size}] = m.PGAS
			}
		}
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("no measurements in rank 0's output\n%s", out.String())
	}
	return rows, nil
}
