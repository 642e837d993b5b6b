package pagerank

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"time"

	"github.com/gaspigo/gaspigo/apps/internal/kvjob"
	"github.com/gaspigo/gaspigo/kvshuffle"
	"github.com/gaspigo/gaspigo/pgas"
)

// Config is one rank's settings of Run; every rank passes the same
// (Kill aside).
type Config struct {
	Graph      Graph
	Iterations int
	CkptEvery  int // checkpoint every CkptEvery iterations; 0: only the start and the end
	Mirrors    int
	Check      bool
	Shuffle    kvshuffle.Config
	Kill       *kvjob.Kill // unit: the iteration it starts
	Stdout     io.Writer
}

// Combine sums 8-byte little-endian contributions.
func Combine(_ []byte, values [][]byte) [][]byte {
	var sum uint64
	for _, v := range values {
		sum += binary.LittleEndian.Uint64(v)
	}
	return [][]byte{binary.LittleEndian.AppendUint64(nil, sum)}
}

// VertexKey is the shuffle key of vertex v.
func VertexKey(v int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(v)) }

type run struct {
	c       Config
	j       *kvjob.Job
	n, r    int64  // ranks, this rank
	app     []byte // iteration, then this rank's ranks
	rank    []uint64
	fresh   bool // the shuffle was just created or rolled back: no reset before the round
	printed bool
	acc     []uint64 // step's sums of contributions, by target vertex
	buf     []int64  // step's out-edges of one vertex
}

// Run is one rank's part of the job (see the package doc).
func Run(ctx context.Context, rt *pgas.Runtime, c Config) error {
	if c.Stdout == nil {
		c.Stdout = io.Discard
	}
	if err := c.Kill.Check(rt.Size()); err != nil {
		return err
	}
	N := c.Graph.Vertices()
	r := &run{c: c, n: int64(rt.Size()), r: int64(rt.Rank())}
	if N < r.n {
		return &kvjob.ExitError{Code: 2, Msg: fmt.Sprintf("the graph has %d vertices, fewer than the job's %d ranks", N, r.n)}
	}
	per := (N + r.n - 1) / r.n // the same region size on every rank
	r.app = make([]byte, 8+8*per)
	mine := (N - r.r + r.n - 1) / r.n
	r.rank = make([]uint64, mine)
	for i := range r.rank {
		r.rank[i] = Initial(N)
	}
	r.store()
	sh := c.Shuffle
	sh.Mode = kvshuffle.ModeCommon
	sh.Partition = func(key []byte, parts int) int { return int(binary.BigEndian.Uint64(key) % uint64(parts)) }
	sh.Combine = Combine
	j, err := kvjob.Start(ctx, rt, kvjob.Config{Name: "pagerank", Shuffle: sh, App: r.app, StateBytes: 0,
		Mirrors: c.Mirrors, Out: c.Stdout, Kill: c.Kill, Restored: r.restored})
	if err != nil {
		return err
	}
	defer j.Close()
	r.j, r.fresh = j, true
	if err := r.complete(ctx); err != nil {
		return err
	}
	// A rank lost while the ranks finalize: the restored checkpoint is
	// the final one, and rank 0 printed already.
	return j.Finalize(ctx, func(ctx context.Context) error {
		r.printed = true
		return r.complete(ctx)
	})
}

func (r *run) iter() int { return int(binary.LittleEndian.Uint64(r.app)) }

// store copies the ranks into the checkpoint region.
func (r *run) store() {
	for i, x := range r.rank {
		binary.LittleEndian.PutUint64(r.app[8+8*i:], x)
	}
}

func (r *run) restored() error {
	for i := range r.rank {
		r.rank[i] = binary.LittleEndian.Uint64(r.app[8+8*i:])
	}
	r.fresh = true
	return nil
}

// complete iterates (recovering on the way) until the last iteration,
// then gathers and prints the result once.
func (r *run) complete(ctx context.Context) error {
	for {
		var err error
		if r.iter() < r.c.Iterations {
			err = r.step(ctx)
		} else if !r.printed {
			err = r.report(ctx)
		} else {
			return nil
		}
		if err = r.j.Recover(ctx, err); err != nil {
			return err
		}
	}
}

// step runs one iteration as one round of the shuffle.
func (r *run) step(ctx context.Context) error {
	it := r.iter()
	begin := time.Now()
	if r.c.Kill.Armed(r.j.RT) && it == int(r.c.Kill.At) {
		r.c.Kill.Fire(r.c.Stdout, int(r.r), fmt.Sprintf("at the start of iteration %d", it))
	}
	sh := r.j.Sh
	if !r.fresh {
		// A new round: the streams of the last one ended (Iteration mode).
		if err := sh.RollBack(ctx, nil); err != nil {
			return err
		}
	}
	r.fresh = false
	N := r.c.Graph.Vertices()
	// Contributions are summed here, one slot per target vertex, before
	// anything is sent: a pair per target and iteration instead of a pair
	// per edge. The sums are of integers, so the order does not matter
	// and the ranks are the same bits. This rank's own vertices never go
	// through the shuffle.
	if r.acc == nil {
		r.acc = make([]uint64, N)
	}
	acc := r.acc
	clear(acc)
	var dangling uint64
	for i, x := range r.rank {
		r.buf = r.c.Graph.Out(r.r+int64(i)*r.n, r.buf[:0])
		if len(r.buf) == 0 {
			dangling += x
			continue
		}
		c := x / uint64(len(r.buf))
		dangling += x % uint64(len(r.buf))
		for _, u := range r.buf {
			acc[u] += c
		}
	}
	key, val := make([]byte, 8), make([]byte, 8)
	for u, c := range acc {
		if c == 0 || int64(u)%r.n == r.r {
			continue
		}
		binary.BigEndian.PutUint64(key, uint64(u))
		binary.LittleEndian.PutUint64(val, c)
		if err := sh.Send(ctx, key, val); err != nil {
			return err
		}
	}
	if err := sh.CloseSend(ctx); err != nil {
		return err
	}
	in := make([]uint64, len(r.rank))
	for i := range in {
		in[i] = acc[r.r+int64(i)*r.n]
	}
	for k, vals := range sh.Groups(ctx) {
		v := int64(binary.BigEndian.Uint64(k))
		if v%r.n != r.r || v >= N {
			return fmt.Errorf("pagerank: rank %d received vertex %d", r.r, v)
		}
		for x := range vals {
			in[v/r.n] += binary.LittleEndian.Uint64(x)
		}
	}
	if err := sh.Err(); err != nil {
		return err
	}
	d := []uint64{dangling}
	if err := pgas.Allreduce(ctx, r.j.RT, nil, d, pgas.OpSum); err != nil {
		return err
	}
	t := Teleport(N, d[0])
	for i := range r.rank {
		r.rank[i] = t + Damp(in[i])
	}
	it++
	binary.LittleEndian.PutUint64(r.app, uint64(it))
	r.store()
	r.j.Printf("%d/%d iterations done: the last in %s, dangling mass %.2f%%\n", it, r.c.Iterations,
		time.Since(begin).Round(time.Millisecond), 100*float64(d[0])/float64(Mass))
	if it == r.c.Iterations || (r.c.CkptEvery > 0 && it%r.c.CkptEvery == 0) {
		return r.j.Checkpoint(ctx, 0)
	}
	return nil
}

// report gathers the ranks on every rank and prints the result on rank 0.
func (r *run) report(ctx context.Context) error {
	per := (len(r.app) - 8) / 8
	local := make([]uint64, per)
	copy(local, r.rank)
	all, err := pgas.Allgather(ctx, r.j.RT, nil, local)
	if err != nil {
		return err
	}
	N := r.c.Graph.Vertices()
	rank := make([]uint64, N)
	for v := range N {
		rank[v] = all[(v%r.n)*int64(per)+v/r.n]
	}
	r.printed = true
	if r.r != 0 {
		return nil
	}
	edges := Edges(r.c.Graph)
	st := r.j.Sh.Stats()
	r.j.Printf("pagerank: ranks=%d pairs_sent=%d checkpoints=%d (%.3fs) recoveries=%d\n", r.n, st.PairsSent, r.j.Checkpoints, r.j.CkptTime.Seconds(), r.j.Recoveries)
	if r.c.Check {
		ref := Reference(r.c.Graph, r.c.Iterations)
		for v := range ref {
			if ref[v] != rank[v] {
				return fmt.Errorf("pagerank: vertex %d: the job's rank %d differs from the reference %d", v, rank[v], ref[v])
			}
		}
		r.j.Printf("reference: match\n")
	}
	r.j.Printf("%s\n", Summary(rank, edges, r.c.Iterations))
	return nil
}
