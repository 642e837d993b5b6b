package kvshuffle

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
)

// benchShuffle runs one full shuffle per iteration: every rank sends
// perRank bytes of pairs (10-byte keys, valueLen-byte values), closes, and
// reads its partition.
func benchShuffle(b *testing.B, n, perRank, valueLen int, mut func(*Config), after func(*Shuffle)) {
	rts, _ := newJob(b, n, 1)
	pairs := perRank / (10 + valueLen + 2)
	keys := make([][][]byte, n)
	for i := range keys {
		r := rand.New(rand.NewPCG(uint64(i), 7))
		keys[i] = make([][]byte, pairs)
		for j := range keys[i] {
			k := make([]byte, 10)
			binary.BigEndian.PutUint64(k, r.Uint64())
			keys[i][j] = k
		}
	}
	val := make([]byte, valueLen)
	b.SetBytes(int64(n * pairs * (12 + valueLen)))
	b.ResetTimer()
	for range b.N {
		cfg := DefaultConfig()
		cfg.SpillDir = b.TempDir()
		cfg.MemoryBudget = 64 << 20
		cfg.RunSize = 16 << 20
		if mut != nil {
			mut(&cfg)
		}
		shs := make([]*Shuffle, n)
		each(b, n, func(i int) error {
			var err error
			shs[i], err = New(context.Background(), rts[i], cfg)
			return err
		})
		each(b, n, func(i int) error {
			ctx := context.Background()
			for _, k := range keys[i] {
				if err := shs[i].Send(ctx, k, val); err != nil {
					return err
				}
			}
			if err := shs[i].CloseSend(ctx); err != nil {
				return err
			}
			for range shs[i].Recv(ctx) {
			}
			return shs[i].Err()
		})
		for _, s := range shs {
			if after != nil {
				after(s)
			}
			s.Close()
		}
	}
}

// BenchmarkShuffle measures a whole shuffle over transport/mem: 4 ranks
// each sending bytes_per_rank of pairs with 10-byte keys; MB/s counts the
// bytes of all ranks. The reader does not touch the values. The spill case
// gives each A task a 4 MiB budget for about 16 MiB of data.
func BenchmarkShuffle(b *testing.B) {
	for _, size := range []int{1 << 20, 16 << 20} {
		for _, vl := range []int{88, 4086} {
			b.Run(fmt.Sprintf("ranks=4/bytes_per_rank=%dMiB/value=%d", size>>20, vl), func(b *testing.B) {
				benchShuffle(b, 4, size, vl, nil, nil)
			})
		}
	}
	b.Run("ranks=4/bytes_per_rank=16MiB/value=88/spill", func(b *testing.B) {
		benchShuffle(b, 4, 16<<20, 88, func(c *Config) {
			c.MemoryBudget = 4 << 20
			c.RunSize = 1 << 20
		}, nil)
	})
}

// BenchmarkSchedule compares the exchange orders in wall-clock time. The
// send buffers hold all the data, so nearly all of it moves in CloseSend's
// flush, strictly in schedule order; a small ring makes the receivers the
// bottleneck when they are short of CPU. On one host with few cores the
// CPU, not any receiver, is usually the limit, so the difference is small
// here; TestScheduleVirtualTime measures the effect with receiver-bound
// links on a fake clock, free of the noise of a shared machine.
func BenchmarkSchedule(b *testing.B) {
	const perRank = 8 << 20
	for _, n := range []int{4, 8} {
		for _, sc := range []Schedule{Naive, Diagonal} {
			b.Run(fmt.Sprintf("ranks=%d/%v", n, sc), func(b *testing.B) {
				benchShuffle(b, n, perRank, 88, func(c *Config) {
					c.Schedule = sc
					c.SlotSize = 64 << 10
					c.Slots = 2
					c.SendBuffers = perRank/n/c.SlotSize + 4
				}, nil)
			})
		}
	}
}
