package kernel

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
)

// Checksum returns the hex SHA-256 of the centroids' exact float64 bits,
// each as 8 little-endian bytes in slice order. Two runs produced the same
// centroids bit for bit iff their checksums are equal.
func Checksum(centroids []float64) string {
	h := sha256.New()
	var b [8]byte
	for _, v := range centroids {
		binary.LittleEndian.PutUint64(b[:], math.Float64bits(v))
		h.Write(b[:])
	}
	return hex.EncodeToString(h.Sum(nil))
}

// InitIndices chooses the global indices of the k points used as initial
// centroids when no --init file is given: k distinct indices of [0, n),
// drawn with Floyd's sampling from a counter-based RNG keyed by seed. The
// result depends only on (seed, n, k), never on how the data is sharded;
// centroid j is the point at index[j].
func InitIndices(seed uint64, n, k int) ([]int, error) {
	if k < 1 || n < 1 {
		return nil, shapeErr("InitIndices: n = %d, k = %d; both must be ≥ 1", n, k)
	}
	if k > n {
		return nil, fmt.Errorf("%w: k = %d is more than the %d points; lower k", ErrCount, k, n)
	}
	key := streamKey(seed, streamInit)
	chosen := make(map[int]struct{}, k)
	out := make([]int, 0, k)
	for j := n - k; j < n; j++ {
		t := int(below(draw(itemKey(key, uint64(j)), 0), uint64(j+1)))
		if _, dup := chosen[t]; dup {
			t = j
		}
		chosen[t] = struct{}{}
		out = append(out, t)
	}
	return out, nil
}

// FillFromShard copies into dst (k*d, row j for centroid j) the rows of the
// chosen points that lie in a shard: shard holds points [lo, lo+len/d).
// It returns how many rows it filled. Every rank calls it on its own shard;
// each row is filled by exactly one rank, and gathering the rows gives the
// initial centroids whatever the sharding. Combine by copying rows (gather
// or broadcast from the owner), not by summing with zeros from the other
// ranks: -0 + 0 is +0, which would change the checksum.
func FillFromShard(dst []float64, index []int, shard []float64, lo, d int) (int, error) {
	if d < 1 || len(shard)%d != 0 || len(dst) != len(index)*d {
		return 0, shapeErr("FillFromShard: len(dst) = %d, %d indices, len(shard) = %d, d = %d",
			len(dst), len(index), len(shard), d)
	}
	hi := lo + len(shard)/d
	filled := 0
	for j, g := range index {
		if g >= lo && g < hi {
			copy(dst[j*d:j*d+d], shard[(g-lo)*d:(g-lo)*d+d])
			filled++
		}
	}
	return filled, nil
}

// InitCentroids is the single-process form: the k points of points chosen
// by InitIndices(seed, n, k).
func InitCentroids(points []float64, d, k int, seed uint64) ([]float64, error) {
	if d < 1 || len(points)%d != 0 {
		return nil, shapeErr("InitCentroids: len(points) = %d is not a multiple of d = %d", len(points), d)
	}
	idx, err := InitIndices(seed, len(points)/d, k)
	if err != nil {
		return nil, err
	}
	c := make([]float64, k*d)
	if _, err := FillFromShard(c, idx, points, 0, d); err != nil {
		return nil, err
	}
	return c, nil
}
