// Command ftstep is a fault-tolerant SPMD test program: it runs numbered
// steps (an allreduce and a barrier each), and when a step fails because a
// rank died it recovers into the new epoch and re-runs the step. Every rank
// prints one "result" line at the end, which must not depend on failures.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/gaspigo/gaspigo/pgas"
	"github.com/gaspigo/gaspigo/spares"
)

func main() {
	steps := flag.Int("steps", 50, "steps to run")
	pause := flag.Duration("pause", 20*time.Millisecond, "time per step")
	timeout := flag.Duration("timeout", 120*time.Second, "give up after this long")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	fmt.Printf("pid %d proc %s\n", os.Getpid(), os.Getenv("PGAS_PROC"))
	rt, err := spares.Init(ctx, spares.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "init:", err)
		os.Exit(spares.ExitCodeOf(err))
	}
	fmt.Printf("rank %d epoch %d\n", rt.Rank(), rt.Epoch())
	sum, err := run(ctx, rt, *steps, *pause)
	if err != nil {
		fmt.Fprintf(os.Stderr, "rank %d: %v\n", rt.Rank(), err)
		rt.Close()
		os.Exit(spares.ExitCodeOf(err))
	}
	fmt.Printf("result rank=%d sum=%d epoch=%d\n", rt.Rank(), sum, rt.Epoch())
	if err := rt.Finalize(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "finalize:", err)
	}
}

// run executes steps 0..steps-1. Step i contributes rank*i+1 from each
// rank; the total is the same whatever failed on the way.
func run(ctx context.Context, rt *pgas.Runtime, steps int, pause time.Duration) (int64, error) {
	var total int64
	step := int64(0)
	// A promoted spare learns where the others are.
	if rt.StartedAsSpare() {
		if err := agree(ctx, rt, &step, &total); err != nil {
			return 0, err
		}
	}
	for step < int64(steps) {
		err := func() error {
			time.Sleep(pause)
			x := []int64{int64(rt.Rank())*step + 1}
			if err := pgas.Allreduce(ctx, rt, nil, x, pgas.OpSum); err != nil {
				return err
			}
			if err := rt.Barrier(ctx, nil); err != nil {
				return err
			}
			total += x[0]
			step++
			return nil
		}()
		if err == nil {
			continue
		}
		if !pgas.NeedsRecovery(err) {
			return 0, err
		}
		fmt.Printf("rank %d: step %d failed (%v); recovering\n", rt.Rank(), step, err)
		t0 := time.Now()
		if err := rt.Recover(ctx); err != nil {
			return 0, err
		}
		if err := agree(ctx, rt, &step, &total); err != nil {
			return 0, err
		}
		fmt.Printf("rank %d: recovered into epoch %d in %v; resuming at step %d\n", rt.Rank(), rt.Epoch(), time.Since(t0).Round(time.Millisecond), step)
	}
	return total, nil
}

// agree makes every rank resume from the same step with the same total:
// the minimum step any survivor completed (a step completes everywhere or
// is redone), with the total of a rank that completed exactly that many.
func agree(ctx context.Context, rt *pgas.Runtime, step, total *int64) error {
	for {
		s := []int64{*step, -*step}
		if rt.StartedAsSpare() && *step == 0 && *total == 0 {
			s = []int64{1 << 62, 0} // a fresh spare knows nothing
		}
		err := pgas.Allreduce(ctx, rt, nil, s, pgas.OpMin)
		if err == nil {
			min, max := s[0], -s[1]
			if min == 1<<62 {
				min = max
			}
			// Ranks that ran one step further roll back that step's sum.
			t := []int64{0}
			if *step == min {
				t[0] = *total
			}
			if *step > min {
				t[0] = -1 // recomputed below
			}
			if err = pgas.Allreduce(ctx, rt, nil, t, pgas.OpMax); err == nil {
				*step, *total = min, t[0]
				return nil
			}
		}
		if !pgas.NeedsRecovery(err) {
			return err
		}
		if err := rt.Recover(ctx); err != nil {
			return err
		}
	}
}
