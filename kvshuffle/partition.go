package kvshuffle

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sort"

	"github.com/gaspigo/gaspigo/pgas"
)

// FNV-1a, 64-bit.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// HashPartition is the default partitioner: the 64-bit FNV-1a hash of the
// key modulo parts. It allocates nothing.
func HashPartition(key []byte, parts int) int {
	h := uint64(fnvOffset)
	for _, c := range key {
		h ^= uint64(c)
		h *= fnvPrime
	}
	return int(h % uint64(parts))
}

// RangePartitioner returns a partitioner for keys ordered by
// bytes.Compare: with splitters s[0] <= s[1] <= ... (len(splitters) =
// parts-1), partition i receives the keys k with s[i-1] <= k < s[i]. It is
// what TeraSort uses, with splitters from SampleSplitters, so that the
// concatenation of the partitions in order is globally sorted. A Send
// whose parts differs from len(splitters)+1 may get ErrPartition.
func RangePartitioner(splitters [][]byte) func(key []byte, parts int) int {
	return RangePartitionerFunc(splitters, bytes.Compare)
}

// RangePartitionerFunc is RangePartitioner for keys ordered by cmp, which
// must be the shuffle's Compare. The splitters are copied.
func RangePartitionerFunc(splitters [][]byte, cmp func(a, b []byte) int) func(key []byte, parts int) int {
	sp := make([][]byte, len(splitters))
	for i, s := range splitters {
		sp[i] = bytes.Clone(s)
	}
	return func(key []byte, parts int) int {
		// The number of splitters <= key.
		return sort.Search(len(sp), func(i int) bool { return cmp(sp[i], key) > 0 })
	}
}

// SampleSplitters is collective over all ranks of rt: every rank passes a
// sample of its keys (any number, possibly none), and every rank gets the
// same parts-1 splitters, the quantiles of the union of the samples under
// cmp (nil means bytes.Compare). Feed them to RangePartitioner.
func SampleSplitters(ctx context.Context, rt *pgas.Runtime, sample [][]byte, parts int, cmp func(a, b []byte) int) ([][]byte, error) {
	if parts < 1 {
		return nil, fmt.Errorf("kvshuffle: sample splitters: parts is %d, want at least 1: %w", parts, ErrConfig)
	}
	if cmp == nil {
		cmp = bytes.Compare
	}
	var enc []byte
	for _, k := range sample {
		enc = AppendPair(enc, k, nil)
	}
	lens, err := pgas.Allgather(ctx, rt, nil, []int64{int64(len(enc))})
	if err != nil {
		return nil, fmt.Errorf("kvshuffle: sample splitters: %w", err)
	}
	width := slices.Max(lens)
	buf := make([]byte, width)
	copy(buf, enc)
	all, err := pgas.Allgather(ctx, rt, nil, buf)
	if err != nil {
		return nil, fmt.Errorf("kvshuffle: sample splitters: %w", err)
	}
	var keys [][]byte
	for r, n := range lens {
		part := all[int64(r)*width : int64(r)*width+n]
		if _, err := DecodeRun(part, func(k, _ []byte) error {
			keys = append(keys, k)
			return nil
		}); err != nil {
			return nil, fmt.Errorf("kvshuffle: sample splitters: sample of rank %d: %w", r, err)
		}
	}
	slices.SortStableFunc(keys, cmp)
	out := make([][]byte, 0, parts-1)
	for i := 1; i < parts; i++ {
		if len(keys) == 0 {
			out = append(out, []byte{})
			continue
		}
		out = append(out, bytes.Clone(keys[i*len(keys)/parts]))
	}
	return out, nil
}
