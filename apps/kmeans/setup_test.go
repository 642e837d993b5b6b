package kmeans

import (
	"strings"
	"testing"
	"testing/synctest"
)

// A rank killed during a collective step of the setup is recovered like a
// failure in the loop: the survivors record the failure, Run recovers
// (the promoted spare joins the checkpointer's setup in the restore), no
// checkpoint was committed so every rank starts over, and the result is
// the failure-free one. Before, the survivors' setup returned the error
// and the job failed ("ckpt: local segment ...: rank failed").
func TestKillDuringSetup(t *testing.T) {
	for _, c := range []struct {
		name, inject string
		seeding      Seeding
	}{
		// ckpt.New: the survivors are inside its segment creation.
		{"ckpt-new", "kill:rank=2,iter=0,phase=ckpt-new", SeedRandom},
		// k-means++ seeding is collective: the survivors fail there and
		// make their checkpointer with ckpt.NewJoining.
		{"init", "kill:rank=1,iter=0,phase=init", SeedPlusPlus},
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
					if got := res[p]; sameBits(got.Centroids, base.Centroids) >= 0 || got.SSE != base.SSE || got.Iterations != base.Iterations {
						t.Fatalf("process %d: sse %v after %d iterations, failure-free %v after %d\n%s", p, got.SSE, got.Iterations, base.SSE, base.Iterations, out)
					}
				}
				if res[spare].Iterations == 0 {
					t.Fatalf("the spare did not take part\n%s", out)
				}
				for _, want := range []string{"recovery: the setup failed", "every rank starts over from the initial centroids"} {
					if !strings.Contains(out, want) {
						t.Fatalf("no %q in the output\n%s", want, out)
					}
				}
			})
		})
	}
}
