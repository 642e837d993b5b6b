package ckpt

import (
	"fmt"
	"testing"
)

// BenchmarkCheckpoint measures what Start+Commit add to an iteration
// whose only communication is a barrier, for 4 ranks with 8 MiB of state
// each over transport/mem (all ranks share this process's cores, so the
// figures are indicative only: on real hosts the push overlaps compute).
// "off" is the barrier alone; "start+commit" checkpoints every iteration
// (the worst case: no compute to overlap the push with).
func BenchmarkCheckpoint(b *testing.B) {
	const ranks, state = 4, 8 << 20
	for _, mode := range []string{"off", "start+commit"} {
		b.Run(fmt.Sprintf("ckpt=%s/bytes=%dMiB", mode, state>>20), func(b *testing.B) {
			j := newTestJob(b, jobOpts{ranks: ranks, maxBytes: state + 1<<20})
			big := make([][]byte, ranks)
			for r, m := range j.ranks {
				big[r] = make([]byte, state)
				for i := range big[r] {
					big[r][i] = byte(i * (r + 1))
				}
				if err := m.ck.Register("big", big[r]); err != nil {
					b.Fatal(err)
				}
			}
			ctx := j.ctx
			b.SetBytes(state)
			b.ResetTimer()
			j.each(indexes(ranks), func(r int) error {
				m := j.ranks[r]
				for i := 0; i < b.N; i++ {
					id := uint64(i + 1)
					if mode != "off" {
						if err := m.ck.Start(ctx, id); err != nil {
							return err
						}
					}
					if err := m.rt.Barrier(ctx, nil); err != nil {
						return err
					}
					if mode != "off" {
						if err := m.ck.Commit(ctx, id); err != nil {
							return err
						}
					}
				}
				return nil
			})
			b.StopTimer()
			st := j.ranks[0].ck.Stats()
			if mode != "off" && st.Committed > 0 {
				b.ReportMetric(float64(st.PushTime.Microseconds())/float64(st.Committed), "push-µs/ckpt")
				b.ReportMetric(float64(st.CommitTime.Microseconds())/float64(st.Committed), "commit-µs/ckpt")
			}
		})
	}
}
