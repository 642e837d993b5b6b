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
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/gaspigo/gaspigo/bench/internal/benchutil"
)

func main() {
	rounds := flag.Int("rounds", 5, "runs of each setting, taking turns")
	ranks := flag.Int("n", 2, "ranks")
	tests := flag.String("tests", "bw,lat,allreduce", "gaspibench --tests")
	sizes := flag.String("sizes", "1K,8K,64K,1M,4M", "gaspibench --sizes (bandwidth)")
	minTime := flag.Duration("min-time", 300*time.Millisecond, "gaspibench --min-time")
	bin := flag.String("bin", "", "directory holding gaspirun and gaspibench (default: build them)")
	flag.Parse()
	dir, cleanup := benchutil.Binaries("tlsbench", *bin)
	defer cleanup()
	ab := benchutil.AB{
		Gaspirun: filepath.Join(dir, "gaspirun"),
		Args: []string{"-n", strconv.Itoa(*ranks), "--quiet", "--timeout", "5m", "--", filepath.Join(dir, "gaspibench"),
			"--csv", "--tests", *tests, "--sizes", *sizes, "--min-time", minTime.String()},
		Settings: []benchutil.Setting{
			{Name: "tls-off", Env: []string{"PGAS_TLS="}},
			{Name: "tls-on", Args: []string{"--tls"}, Env: []string{"PGAS_TLS="}},
		},
		Rounds: *rounds,
	}
	res, err := ab.Run()
	if err != nil {
		fmt.Fprintln(os.Stderr, "tls:", err)
		os.Exit(1)
	}
	fmt.Printf("# gaspibench, %d ranks under gaspirun on this machine, TLS off (token handshake only) against\n", *ranks)
	fmt.Printf("# gaspirun --tls, %d rounds taking turns; medians over the rounds. bw in MiB/s (higher is\n", *rounds)
	fmt.Printf("# better), others in microseconds (lower is better).\n")
	fmt.Printf("# load average %s; took %v\n", res.Load, res.Elapsed)
	fmt.Print(res.Table("tls-off", "tls-on"))
}
