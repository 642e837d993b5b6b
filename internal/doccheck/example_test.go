package doccheck_test

import (
	"context"
	"os"

	"github.com/gaspigo/gaspigo/job"
	"github.com/gaspigo/gaspigo/pgas"
)

// Example is the program README.md shows under "Writing a program": the
// body of this function is that block, line for line (TestReadmeProgram
// compares them), so the README's program always compiles. It runs as a
// process of a job gaspirun started (gaspirun -n 4 --spares 2 -- ./prog);
// with no // Output comment, go test compiles it and never runs it.
func Example() {
	ctx := context.Background()
	rt, err := job.Init(ctx, job.Options{FaultTolerant: true}) // join the job gaspirun started
	if err != nil {
		os.Exit(job.ExitCode(err)) // 0 for a spare the job never needed
	}
	defer rt.Close()
	right := (rt.Rank() + 1) % rt.Size()
	for {
		sums := []float64{float64(rt.Rank())}
		// Collective; after a recovery a survivor keeps its memory, a promoted spare allocates it.
		_, err = rt.SegmentCreate(ctx, 1, 1<<20, nil)
		if err == nil { // 4 KiB from our offset 4096 to right's offset 0, then its notification 7
			err = rt.WriteNotify(ctx, 0, right, pgas.Loc{Seg: 1}, pgas.Loc{Seg: 1, Off: 4096}, 4096, 7, 1)
		}
		if err == nil {
			err = rt.Wait(ctx, 0) // remote completion: the data is in place at the target
		}
		if err == nil {
			err = pgas.Allreduce(ctx, rt, nil, sums, pgas.OpSum) // the same bits on every rank
		}
		if !pgas.NeedsRecovery(err) {
			break // done, or an error no recovery cures
		}
		if err = rt.Recover(ctx); err != nil { // on success a spare holds the lost rank: again
			break
		}
	}
	if err != nil {
		rt.Close()
		os.Exit(job.ExitCode(err)) // 75: no spare left; 77: this process was fenced
	}
}
