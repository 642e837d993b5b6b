package pagerank

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Mass is the fixed-point total of the ranks.
const Mass = uint64(1) << 40

// Teleport is every vertex's share of the random jump and of the
// dangling mass d: (Mass*15/100 + d*85/100) / n.
func Teleport(n int64, dangling uint64) uint64 {
	return (Mass*15/100 + dangling*85/100) / uint64(n)
}

// Damp is the damped sum of a vertex's incoming contributions.
func Damp(in uint64) uint64 { return in * 85 / 100 }

// Initial is every vertex's rank before the first iteration.
func Initial(n int64) uint64 { return Mass / uint64(n) }

// Reference runs iters iterations in one process.
func Reference(g Graph, iters int) []uint64 {
	n := g.Vertices()
	rank := make([]uint64, n)
	for v := range rank {
		rank[v] = Initial(n)
	}
	in := make([]uint64, n)
	var buf []int64
	for range iters {
		clear(in)
		var dangling uint64
		for v := range n {
			buf = g.Out(v, buf[:0])
			if len(buf) == 0 {
				dangling += rank[v]
				continue
			}
			c := rank[v] / uint64(len(buf))
			dangling += rank[v] % uint64(len(buf))
			for _, u := range buf {
				in[u] += c
			}
		}
		t := Teleport(n, dangling)
		for v := range rank {
			rank[v] = t + Damp(in[v])
		}
	}
	return rank
}

// Summary is the result line of the package doc.
func Summary(rank []uint64, edges int64, iters int) string {
	h := sha256.New()
	var b [8]byte
	for _, r := range rank {
		binary.LittleEndian.PutUint64(b[:], r)
		h.Write(b[:])
	}
	top := make([]int, len(rank))
	for i := range top {
		top[i] = i
	}
	slices.SortStableFunc(top, func(a, b int) int { return cmp.Compare(rank[b], rank[a]) })
	var s []string
	for _, v := range top[:min(5, len(top))] {
		s = append(s, fmt.Sprintf("%d:%s", v, strconv.FormatFloat(float64(rank[v])/float64(Mass), 'f', 6, 64)))
	}
	return fmt.Sprintf("vertices=%d edges=%d iterations=%d sha256=%x top=%s", len(rank), edges, iters, h.Sum(nil), strings.Join(s, ","))
}

// Edges counts g's edges.
func Edges(g Graph) int64 {
	var e int64
	var buf []int64
	for v := range g.Vertices() {
		e += int64(len(g.Out(v, buf[:0])))
	}
	return e
}
