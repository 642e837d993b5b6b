// Command shm measures the same-host data plane: it runs gaspibench under
// gaspirun on this machine with every frame over TCP loopback (PGAS_SHM=0)
// and over shared memory (PGAS_SHM=1), taking turns in the same run, and
// prints each measurement's median over the rounds with the shm/tcp ratio:
//
//	go run ./bench/shm                          # 2 ranks, 5 rounds
//	go run ./bench/shm -n 4 -tests barrier,allreduce
//	go run ./bench/shm -spin 0                  # receivers sleep at once (PGAS_SHM_SPIN=0)
//	go run ./bench/shm -segments                # also segments in shared memory (PGAS_SHM_SEGMENTS=1)
//	go run ./bench/shm -segments -base DIR      # and against another build's binaries in DIR
//
// Both settings run the same binaries with the same flags and the same
// runtime spin (gaspibench --spin); only the transport between the
// processes differs.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/gaspigo/gaspigo/bench/internal/benchutil"
)

func main() {
	rounds := flag.Int("rounds", 5, "runs of each setting, taking turns")
	ranks := flag.Int("n", 2, "ranks")
	tests := flag.String("tests", "bw,lat,barrier,allreduce", "gaspibench --tests")
	sizes := flag.String("sizes", "8,1K,64K,1M,2M,4M", "gaspibench --sizes (bandwidth)")
	latSizes := flag.String("lat-sizes", "8,1K", "gaspibench --lat-sizes")
	collSizes := flag.String("coll-sizes", "8,1K", "gaspibench --coll-sizes (allreduce)")
	minTime := flag.Duration("min-time", 300*time.Millisecond, "gaspibench --min-time")
	spin := flag.String("spin", "", "PGAS_SHM_SPIN for the shared-memory runs (default unset: 20us if the ranks fit the CPUs, else 0)")
	rtSpin := flag.String("rt-spin", "", "gaspibench --spin (the runtime's SpinWait), for both settings")
	segs := flag.Bool("segments", false, "also run a third setting, shared memory with segments in shared memory (PGAS_SHM_SEGMENTS=1: direct writes)")
	bin := flag.String("bin", "", "directory holding gaspirun and gaspibench (default: build them)")
	base := flag.String("base", "", "directory holding another build's gaspirun and gaspibench: also run its shared-memory setting(s), taking turns, and print this build against it")
	flag.Parse()
	dir, cleanup := benchutil.Binaries("shmbench", *bin)
	defer cleanup()
	args := []string{"-n", strconv.Itoa(*ranks), "--quiet", "--timeout", "5m", "--", filepath.Join(dir, "gaspibench"),
		"--csv", "--tests", *tests, "--sizes", *sizes, "--lat-sizes", *latSizes, "--coll-sizes", *collSizes, "--min-time", minTime.String()}
	if *rtSpin != "" {
		args = append(args, "--spin", *rtSpin)
	}
	ab := benchutil.AB{
		Gaspirun: filepath.Join(dir, "gaspirun"),
		Args:     args,
		Settings: []benchutil.Setting{
			{Name: "tcp", Env: []string{"PGAS_SHM=0"}},
			{Name: "shm", Env: []string{"PGAS_SHM=1", "PGAS_SHM_SEGMENTS=0", "PGAS_SHM_SPIN=" + *spin}},
		},
		Rounds: *rounds,
	}
	if *segs {
		ab.Settings = append(ab.Settings, benchutil.Setting{Name: "seg", Env: []string{"PGAS_SHM=1", "PGAS_SHM_SEGMENTS=1", "PGAS_SHM_SPIN=" + *spin}})
	}
	if *base != "" {
		for _, st := range slices.Clone(ab.Settings[1:]) {
			st.Name, st.Bin = "base-"+st.Name, *base
			ab.Settings = append(ab.Settings, st)
		}
	}
	res, err := ab.Run()
	if err != nil {
		fmt.Fprintln(os.Stderr, "shm:", err)
		os.Exit(1)
	}
	fmt.Printf("# gaspibench, %d ranks under gaspirun on this machine, TCP loopback (PGAS_SHM=0) against\n", *ranks)
	fmt.Printf("# shared memory (PGAS_SHM=1, PGAS_SHM_SEGMENTS=0: rings only, PGAS_SHM_SPIN=%q), %d rounds taking turns; medians over the rounds.\n", *spin, *rounds)
	fmt.Printf("# bw in MiB/s (higher is better), others in microseconds (lower is better).\n")
	fmt.Printf("# load average %s; took %v\n", res.Load, res.Elapsed)
	fmt.Print(res.Table("tcp", "shm"))
	if *segs {
		fmt.Printf("# the same run: shared memory with segments in shared memory (PGAS_SHM_SEGMENTS=1)\n")
		fmt.Print(res.Table("tcp", "seg"))
	}
	if *base != "" {
		fmt.Printf("# the same run: this build against the one in %s, shared memory\n", *base)
		fmt.Print(res.Table("base-shm", "shm"))
		if *segs {
			fmt.Printf("# the same run: this build against the one in %s, segments in shared memory\n", *base)
			fmt.Print(res.Table("base-seg", "seg"))
		}
	}
}
