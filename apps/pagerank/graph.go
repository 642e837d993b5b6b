package pagerank

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
)

// Graph is a directed graph on vertices 0..Vertices()-1.
type Graph interface {
	Vertices() int64
	// Out appends v's out-edges' targets to buf and returns it.
	Out(v int64, buf []int64) []int64
}

// Generated is the generated graph of the package doc.
type Generated struct {
	N      int64
	Degree int // mean out-degree D, >= 1
	Seed   uint64
}

func (g Generated) Vertices() int64 { return g.N }

func (g Generated) Out(v int64, buf []int64) []int64 {
	r := rand.New(rand.NewPCG(g.Seed, uint64(v)))
	deg := r.IntN(2 * g.Degree)
	n := uint64(g.N)
	for range deg {
		a, b := r.Uint64N(n), r.Uint64N(n)
		buf = append(buf, int64(a*b/n))
	}
	return buf
}

// EdgeList is a graph read from "src dst" lines (ReadEdges).
type EdgeList struct {
	start []int64 // start[v]..start[v+1] index dst
	dst   []int64
}

func (g *EdgeList) Vertices() int64 { return int64(len(g.start) - 1) }

func (g *EdgeList) Out(v int64, buf []int64) []int64 {
	return append(buf, g.dst[g.start[v]:g.start[v+1]]...)
}

// ReadEdges reads "src dst" lines; blank lines and text after '#' are
// ignored. Vertices are 0..the largest number named.
func ReadEdges(r io.Reader) (*EdgeList, error) {
	var src, dst []int64
	maxV := int64(-1)
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) != 2 {
			return nil, fmt.Errorf("line %d: %q: want two vertex numbers, \"src dst\"", n, line)
		}
		var e [2]int64
		for i, s := range f {
			v, err := strconv.ParseInt(s, 10, 64)
			if err != nil || v < 0 {
				return nil, fmt.Errorf("line %d: vertex %q: want a number >= 0", n, s)
			}
			e[i] = v
			maxV = max(maxV, v)
		}
		src, dst = append(src, e[0]), append(dst, e[1])
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if maxV < 0 {
		return nil, fmt.Errorf("no edges: want \"src dst\" lines")
	}
	if limit := max(4*int64(len(src)), 1<<24); maxV >= limit {
		return nil, fmt.Errorf("vertex %d: with %d edges, vertex numbers must stay below %d (the vertices are 0..the largest number): renumber the graph densely", maxV, len(src), limit)
	}
	g := &EdgeList{start: make([]int64, maxV+2), dst: make([]int64, len(dst))}
	for _, s := range src {
		g.start[s+1]++
	}
	for v := range maxV + 1 {
		g.start[v+1] += g.start[v]
	}
	fill := append([]int64(nil), g.start[:maxV+1]...)
	for i, s := range src {
		g.dst[fill[s]] = dst[i]
		fill[s]++
	}
	return g, nil
}
