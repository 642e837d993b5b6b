package main

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
	"github.com/gaspigo/gaspigo/internal/testkit/stats"
)

// prune: brute force against each pruned algorithm on the same workload,
// runs alternating, 2 ranks; per workload (-prune-blobs: the seed's 10
// blobs, and a harder one of 1,000) and k (-prune-k).
func (b *bench) prune() error {
	fmt.Printf("\n## (f) exact pruning vs brute force: %d points, 10-D, 2 ranks under gaspirun, --ckpt-every 10, %d iterations, --tol 0 (load %s)\n", b.o.points, b.o.iters, proctest.LoadAvg())
	fmt.Printf("%6s %6s %4s %-9s %10s %10s %8s %10s %10s %8s %10s %8s %10s  %s\n", "blobs", "k", "rep", "algo",
		"job wall", "lloyd", "x", "ms/iter", "lloyd", "x", "cpu", "x", "dist/pt", "load before")
	for _, blobs := range b.o.pruneBlobs {
		for _, k := range b.o.pruneK {
			if err := b.pruneCase(blobs, k); err != nil {
				return err
			}
		}
	}
	fmt.Printf("load after %s\n", proctest.LoadAvg())
	return nil
}

// pruneRun is one job's figures.
type pruneRun struct {
	wall, iter, cpu, dist float64 // seconds; distances per point per iteration
	final                 string
}

// pruneCase runs -reps rounds of brute force and every -algos at one
// workload, prints each round and the medians, and checks that every job
// ended with the same centroids.
func (b *bench) pruneCase(blobs, k int) error {
	algos := append([]string{"lloyd"}, b.o.algos...)
	runs := map[string][]pruneRun{}
	for r := 0; r < b.o.reps; r++ {
		proctest.SettleLoad(2 * time.Minute) // each round from below 1.5, as far as it goes
		load := proctest.LoadAvg()
		order := slices.Clone(algos)
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for _, a := range order {
			pr, err := b.pruneJob(blobs, k, a)
			if err != nil {
				return err
			}
			runs[a] = append(runs[a], pr)
		}
		for _, a := range b.o.algos {
			p, l := runs[a][r], runs["lloyd"][r]
			fmt.Printf("%6d %6d %4d %-9s %9.2fs %9.2fs %8.2f %10s %10s %8.2f %9.1fs %8.2f %10.1f  %s\n", blobs, k, r+1, a,
				p.wall, l.wall, l.wall/p.wall, ms(p.iter), ms(l.iter), l.iter/p.iter, p.cpu, l.cpu/p.cpu, p.dist, load)
		}
	}
	want := runs["lloyd"][0].final
	for _, a := range algos {
		for _, pr := range runs[a] {
			if pr.final != want {
				return fmt.Errorf("blobs=%d k=%d: %s ended with %s, brute force with %s", blobs, k, a, pr.final, want)
			}
		}
	}
	med := func(a string, f func(pruneRun) float64) float64 {
		var v []float64
		for _, pr := range runs[a] {
			v = append(v, f(pr))
		}
		return stats.Median(v)
	}
	wall := func(p pruneRun) float64 { return p.wall }
	iter := func(p pruneRun) float64 { return p.iter }
	for _, a := range b.o.algos {
		fmt.Printf("blobs=%d k=%d %s: whole job %.2f s against brute force %.2f s, speed-up %.2f (medians); per iteration %s ms against %s ms, %.2f; %.1f distances per point per iteration (brute force %d); same centroids: %s\n",
			blobs, k, a, med(a, wall), med("lloyd", wall), med("lloyd", wall)/med(a, wall),
			ms(med(a, iter)), ms(med("lloyd", iter)), med("lloyd", iter)/med(a, iter), med(a, func(p pruneRun) float64 { return p.dist }), k, want)
	}
	return nil
}

// distRE reads the distances per point from the pruning line.
var distRE = regexp.MustCompile(`^\[r0\] (?:\S+ )?pruning .* of (\d+); ([0-9.]+) distances per point$`)

// pruneJob runs one job of the prune experiment.
func (b *bench) pruneJob(blobs, k int, algo string) (pruneRun, error) {
	args := kmArgs(b.o.points, k, b.o.iters, 10)
	args[len(args)-1] = algo
	args = append(args, "--blobs", strconv.Itoa(blobs), "--tol", "0")
	j, err := b.runJob([]string{"-n", "2"}, args)
	if err != nil {
		return pruneRun{}, err
	}
	if err := j.ok(); err != nil {
		return pruneRun{}, err
	}
	d, n := j.loop()
	if n == 0 {
		return pruneRun{}, fmt.Errorf("blobs=%d k=%d %s: no iterations timed", blobs, k, algo)
	}
	pr := pruneRun{wall: j.wall.Seconds(), iter: d.Seconds() / float64(n), cpu: j.cpu.Seconds(), dist: float64(k), final: j.final}
	if algo != "lloyd" {
		pr.dist = -1
		for _, l := range j.lines {
			if m := distRE.FindStringSubmatch(strings.TrimSpace(l)); m != nil {
				pr.dist, _ = strconv.ParseFloat(m[2], 64)
			}
		}
	}
	return pr, nil
}
