package pgas

import (
	"context"
	"testing"
)

// The CPU cost of the operations done in a same-host peer's memory, on
// one side, with nobody waiting: what a round trip pays twice besides
// the cache lines crossing. (The end-to-end figures are gaspibench's.)
func BenchmarkDirectOps(b *testing.B) {
	rts, _ := newJob(b, 2, 1, direct)
	ctx := context.Background()
	each(b, rts, func(rt *Runtime) error {
		_, err := rt.SegmentCreate(ctx, 1, 4096, nil)
		return err
	})
	rt := rts[0]
	if err := rt.WriteNotify(ctx, 0, 1, Loc{1, 0}, Loc{1, 0}, 8, 1, 1); err != nil {
		b.Fatal(err)
	}
	if err := rt.Wait(ctx, 0); err != nil || rt.Stats().DirectNotes != 1 {
		b.Fatalf("first write: %v, %+v", err, rt.Stats())
	}
	b.Run("write+wait", func(b *testing.B) {
		for b.Loop() {
			rt.Write(ctx, 0, 1, Loc{1, 0}, Loc{1, 0}, 8)
			rt.Wait(ctx, 0)
		}
	})
	b.Run("write_notify+wait", func(b *testing.B) {
		for b.Loop() {
			rt.WriteNotify(ctx, 0, 1, Loc{1, 0}, Loc{1, 0}, 8, 1, 1)
			rt.Wait(ctx, 0)
		}
	})
	b.Run("window64", func(b *testing.B) {
		for b.Loop() {
			for range 64 {
				rt.Write(ctx, 0, 1, Loc{1, 0}, Loc{1, 0}, 8)
			}
			rt.Wait(ctx, 0)
		}
	})
}
