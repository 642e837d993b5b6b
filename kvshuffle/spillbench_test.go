package kvshuffle

import (
	"context"
	"math/rand/v2"
	"os"
	"testing"
)

// BenchmarkSpillBlocks: sorting sealed blocks (8 blocks of 8 MiB of
// 100-byte pairs at random keys) and spilling them into one file, the
// merger's work for 64 MiB: "index" sorts only each block's index, so
// the spill gathers the pairs from random places; "moved" moves each
// block into key order first (sortBlock), so the spill reads them in
// order.
func BenchmarkSpillBlocks(b *testing.B) {
	const blocks, blockBytes = 8, 8 << 20
	r := rand.New(rand.NewPCG(1, 2))
	var datas [][]byte
	var idxs [][]ent
	for range blocks {
		data := make([]byte, 0, blockBytes)
		key := make([]byte, 98)
		for len(data)+100 <= blockBytes {
			for i := range key {
				key[i] = byte(' ' + r.IntN(95))
			}
			data = AppendPair(data, key, nil)
		}
		es, err := indexRun(data, nil, 0, "bench")
		if err != nil {
			b.Fatal(err)
		}
		datas, idxs = append(datas, data), append(idxs, es)
	}
	dir := b.TempDir()
	buf := spillBuffer(nil, 1<<20)
	for _, moved := range []bool{false, true} {
		name := "index"
		if moved {
			name = "moved"
		}
		b.Run(name, func(b *testing.B) {
			var bs blockSorter
			var tmp []ent
			outs := make([][]byte, blocks) // each block's result buffer, reused
			for k := range outs {
				outs[k] = make([]byte, blockBytes)
			}
			b.SetBytes(blocks * blockBytes)
			for range b.N {
				var srcs []source
				for k := range datas {
					c := &chunk{data: datas[k], ents: append([]ent(nil), idxs[k]...)}
					if moved {
						bs.spare = outs[k][:0]
						c.data, c.ents = bs.sortBlock(c.data, c.ents, blockBytes)
					} else {
						radixSortEnts(c.data, c.ents, &tmp)
					}
					srcs = append(srcs, &chunkSource{c: c})
				}
				f, err := mergeTo(context.Background(), newMerge(order{bytewise: true}, srcs), dir, buf, false)
				if err != nil {
					b.Fatal(err)
				}
				os.Remove(f.path)
			}
		})
	}
}
