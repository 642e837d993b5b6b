package kmeans

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/gaspigo/gaspigo/apps/kmeans/internal/kmtest"
	"github.com/gaspigo/gaspigo/apps/kmeans/kernel"
	"github.com/gaspigo/gaspigo/transport"
	"github.com/gaspigo/gaspigo/transport/mem"
)

// startOver is what a job whose setup failed prints.
var startOver = []string{"recovery: the setup failed", "every rank starts over from the initial centroids"}

// A rank killed during a collective step of the setup is recovered like a
// failure in the loop: the survivors record the failure, Run recovers
// (the promoted spare joins the checkpointer's setup in the restore), no
// checkpoint was committed so every rank starts over, and the result is
// the failure-free one. Before, the survivors' setup returned the error
// and the job failed ("ckpt: local segment ...: rank failed").
func TestKillDuringSetup(t *testing.T) {
	for _, c := range []struct {
		name, inject string
		seeding      kernel.Seeding
		lines        []string
	}{
		// ckpt.New: the survivors are inside its segment creation.
		{"ckpt-new", "kill:rank=2,iter=0,phase=ckpt-new", kernel.SeedRandom, startOver},
		// k-means++ seeding is collective: the survivors fail there and
		// make their checkpointer with ckpt.NewJoining.
		{"init", "kill:rank=1,iter=0,phase=init", kernel.SeedPlusPlus, startOver},
		// Not the setup: a kill inside a commit carried by the
		// iteration's reduction (ckpt Vote), for comparison. A survivor
		// finds it in iteration 7, or in 6 when rank 2 was still on the
		// path of iteration 6's result (the goroutines' order decides):
		// either way a loop's recovery, not the setup's.
		{"commit", "kill:rank=2,iter=6,phase=commit", kernel.SeedRandom, []string{"recovery: iteration "}},
	} {
		t.Run(c.name, func(t *testing.T) {
			opt := shrinkOptions()
			opt.Shrink = false
			opt.Seeding = c.seeding
			var base RunResult
			synctest.Test(t, func(t *testing.T) {
				res, errs, out := runMemJob(t, opt, nil)
				for r, err := range errs {
					if err != nil {
						t.Fatalf("failure-free run: rank %d: %v\n%s", r, err, out)
					}
				}
				base = res[0]
			})
			in, err := ParseInject(c.inject)
			if err != nil {
				t.Fatal(err)
			}
			opt.Injects = []Inject{in}
			synctest.Test(t, func(t *testing.T) {
				res, errs, out := runMemJobWith(t, opt, nil, memHooks{spares: 1})
				const spare = 4
				for p, err := range errs {
					if p == in.Rank {
						if err == nil {
							t.Fatalf("the killed rank %d finished the run", p)
						}
						continue
					}
					if err != nil {
						t.Fatalf("process %d: %v\n%s", p, err, out)
					}
					if got := res[p]; kmtest.SameBits(got.Centroids, base.Centroids) >= 0 || got.SSE != base.SSE || got.Iterations != base.Iterations {
						t.Fatalf("process %d: sse %v after %d iterations, failure-free %v after %d\n%s", p, got.SSE, got.Iterations, base.SSE, base.Iterations, out)
					}
				}
				if res[spare].Iterations == 0 {
					t.Fatalf("the spare did not take part\n%s", out)
				}
				for _, want := range c.lines {
					if !strings.Contains(out, want) {
						t.Fatalf("no %q in the output\n%s", want, out)
					}
				}
			})
		})
	}
}

// A periodic checkpoint's commit rides in the iteration's reduction (ckpt
// Vote and Agreed): however often the job checkpoints, a rank sends the
// same collective frames; only the starting and the final checkpoint have
// an agreement of their own.
func TestCheckpointsAddNoCollective(t *testing.T) {
	for _, shrink := range []bool{false, true} {
		t.Run(fmt.Sprint("shrink=", shrink), func(t *testing.T) {
			coll := map[int]uint64{}
			for _, every := range []int{1, 5} {
				opt := shrinkOptions()
				opt.Shrink, opt.Every = shrink, every
				synctest.Test(t, func(t *testing.T) {
					var n atomic.Uint64
					res, errs, out := runMemJobWith(t, opt, nil, memHooks{net: func(nw *mem.Network) {
						nw.BeforeFrame(func(from, to transport.Proc, h *transport.Header) mem.Action {
							if from == 1 && h.Type == transport.FrameColl {
								n.Add(1)
							}
							return mem.Deliver
						})
					}})
					for r, err := range errs {
						if err != nil {
							t.Fatalf("rank %d: %v\n%s", r, err, out)
						}
					}
					if want := opt.MaxIter/every + 1; res[1].Checkpoints < opt.MaxIter/every-1 {
						t.Fatalf("%d checkpoints committed in the loop, want about %d", res[1].Checkpoints, want)
					}
					coll[every] = n.Load()
				})
			}
			if coll[1] != coll[5] {
				t.Fatalf("rank 1 sent %d collective frames checkpointing every iteration, %d every 5: a commit costs a collective of its own", coll[1], coll[5])
			}
		})
	}
}
