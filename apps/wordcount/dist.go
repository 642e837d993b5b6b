package wordcount

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"

	"github.com/gaspigo/gaspigo/apps/internal/kvjob"
	"github.com/gaspigo/gaspigo/kvshuffle"
	"github.com/gaspigo/gaspigo/pgas"
)

// Config is one rank's settings of Run; every rank passes the same
// (Kill aside).
type Config struct {
	Input    Input
	Reducers int // A tasks: ranks 0..Reducers-1; 0: every rank
	Ckpts    int // key-count checkpoints during each rank's lines, at every 1/(Ckpts+1) of them
	// Runnable > 0 bounds the ranks of a host that map at once (a Gate
	// on RunnableDir): a rank loads its share of the input and sends it
	// while it holds a slot, and drops the share and frees the slot
	// before it waits on the others (checkpoints, the reduce).
	Runnable    int
	RunnableDir string
	Mirrors     int    // checkpoint copies, >= 1
	Out         string // part files' directory; "": none
	Check       bool   // rank 0 compares with Reference
	Shuffle     kvshuffle.Config
	Kill        *kvjob.Kill // unit: fraction of the rank's lines
	// Route routes words by a kvshuffle RouteTable built from every
	// rank's digest of its words (RouteConfig), checkpointed with the job.
	Route  bool
	Stdout io.Writer
}

// phase region: done flag, then the Result (u64 each), the last
// checkpoint taken (k); then the route table's length and bytes.
const phaseBytes = 40

// RouteConfig is the routing of --route: 1024 buckets and each rank's
// 128 most frequent words of at most 32 bytes one by one.
func RouteConfig() kvshuffle.RouteConfig {
	return kvshuffle.RouteConfig{Buckets: 1024, HeavyKeys: 128, MaxKey: 32, Slack: 0.1}
}

// tableBound bounds an encoded table of RouteConfig for n ranks.
func tableBound(n int) int {
	c := RouteConfig()
	return 64 + 4*c.Buckets + n*c.HeavyKeys*(6+c.MaxKey)
}

type run struct {
	c      Config
	j      *kvjob.Job
	phase  []byte
	share  *Share // this rank's lines while loaded
	count  int64  // how many (known once loaded)
	gate   *kvjob.Gate
	result Result
	done   bool
	aRanks []int                 // nil: every rank
	table  *kvshuffle.RouteTable // with Route, once built or restored
	moved  uint64                // bytes of pairs sent to another rank's partition
}

// Run is one rank's part of the job (see the package doc).
func Run(ctx context.Context, rt *pgas.Runtime, c Config) error {
	if c.Stdout == nil {
		c.Stdout = io.Discard
	}
	if err := c.Kill.Check(rt.Size()); err != nil {
		return err
	}
	n := int64(rt.Size())
	if c.Reducers < 0 || c.Reducers > int(n) {
		return &kvjob.ExitError{Code: 2, Msg: fmt.Sprintf("--reducers %d: want 1..%d (the job's ranks), or 0 for every rank", c.Reducers, n)}
	}
	size := phaseBytes
	if c.Route {
		size += 8 + tableBound(int(n))
	}
	r := &run{c: c, phase: make([]byte, size), count: -1}
	if c.Runnable > 0 {
		g, err := kvjob.OpenGate(c.RunnableDir, c.Runnable, rt.Rank())
		if err != nil {
			return err
		}
		defer g.Close()
		r.gate = g
	}
	sh := c.Shuffle
	sh.Mode = kvshuffle.ModeMapReduce
	if c.Reducers > 0 {
		sh.ARanks = make([]int, c.Reducers)
		for i := range sh.ARanks {
			sh.ARanks[i] = i
		}
	}
	r.aRanks = sh.ARanks
	sh.Combine = kvjob.SumCombine
	sh.Partition = r.partition
	if c.Out != "" {
		if err := os.MkdirAll(c.Out, 0o700); err != nil {
			return fmt.Errorf("--out: %w", err)
		}
	}
	j, err := kvjob.Start(ctx, rt, kvjob.Config{Name: "wordcount", Shuffle: sh, App: r.phase, StateBytes: 8 + int(sh.MemoryBudget) + int(sh.MemoryBudget)/4 + 1<<20,
		Mirrors: c.Mirrors, Out: c.Stdout, Kill: c.Kill, Restored: r.restored})
	if err != nil {
		return err
	}
	defer j.Close()
	r.j = j
	if err := r.complete(ctx); err != nil {
		return err
	}
	if err := j.Finalize(ctx, r.complete); err != nil {
		return err
	}
	r.gate.Remove() // every rank is past the job's end
	return nil
}

// partition routes by the table with Route, else by hash.
func (r *run) partition(key []byte, parts int) int {
	if r.table != nil {
		return r.table.Partition(key, parts)
	}
	return kvshuffle.HashPartition(key, parts)
}

// route builds the routing table from every rank's digest of its words
// and checkpoints it before anything is sent.
func (r *run) route(ctx context.Context) error {
	d := kvshuffle.NewDigest()
	if err := r.mapPhase(ctx); err != nil {
		return err
	}
	var buf []byte
	for i := range r.count {
		Words(r.share.Line(i), buf, func(w []byte) error {
			d.Add(w, len(w)+1)
			return nil
		})
	}
	r.waitPhase()
	t, err := kvshuffle.BuildRoute(ctx, r.j.RT, d, r.aRanks, RouteConfig())
	if err != nil {
		return err
	}
	b := t.Encode()
	if len(b) > len(r.phase)-phaseBytes-8 {
		return fmt.Errorf("wordcount: a route table of %d bytes exceeds its region (%d bytes)", len(b), len(r.phase)-phaseBytes-8)
	}
	binary.LittleEndian.PutUint64(r.phase[phaseBytes:], uint64(len(b)))
	copy(r.phase[phaseBytes+8:], b)
	if err := r.j.Checkpoint(ctx, 0); err != nil {
		return err
	}
	r.table = t
	r.j.Printf("route: %d words routed one by one; by the digests %d bytes move, %d stay\n", t.Heavy(), t.Moved, t.Kept)
	return nil
}

func (r *run) restored() error {
	r.table = nil
	if r.c.Route {
		if l := binary.LittleEndian.Uint64(r.phase[phaseBytes:]); l > 0 {
			if l > uint64(len(r.phase)-phaseBytes-8) {
				return fmt.Errorf("wordcount: restored route table length %d exceeds its region", l)
			}
			t, err := kvshuffle.DecodeRouteTable(r.phase[phaseBytes+8 : phaseBytes+8+l])
			if err != nil {
				return err
			}
			r.table = t
		}
	}
	if r.gate != nil {
		r.waitPhase() // a restore began inside the slot
	}
	r.done = binary.LittleEndian.Uint64(r.phase) == 1
	r.result = Result{Words: binary.LittleEndian.Uint64(r.phase[8:]), Total: binary.LittleEndian.Uint64(r.phase[16:]), Digest: binary.LittleEndian.Uint64(r.phase[24:])}
	return nil
}

// complete runs attempts until the result is agreed and checkpointed.
func (r *run) complete(ctx context.Context) error {
	printed := r.done
	for !r.done {
		err := r.attempt(ctx)
		if err = r.j.Recover(ctx, err); err != nil {
			return err
		}
	}
	if printed {
		return nil
	}
	st := r.j.Sh.Stats()
	var waited time.Duration
	if r.gate != nil {
		waited = r.gate.Waited
	}
	fmt.Fprintf(r.c.Stdout, "wordcount: rank %d lines=%d pairs_sent=%d bytes_sent=%d bytes_moved=%d pairs_received=%d spills=%d slot_wait=%.3fs rss_peak=%s\n",
		r.j.RT.Rank(), r.count, st.PairsSent, st.BytesSent, r.moved, st.PairsReceived, st.Spills, waited.Seconds(), kvjob.PeakRSS())
	r.j.Printf("wordcount: ranks=%d checkpoints=%d (%.3fs) recoveries=%d\n", r.j.RT.Size(), r.j.Checkpoints, r.j.CkptTime.Seconds(), r.j.Recoveries)
	if r.c.Check && r.j.RT.Rank() == 0 {
		ref, err := r.c.Input.Reference()
		if err != nil {
			return err
		}
		if ref != r.result {
			return fmt.Errorf("wordcount: the job's result %v differs from the reference %v", r.result, ref)
		}
		fmt.Fprintf(r.c.Stdout, "reference: match\n")
	}
	r.j.Printf("%v\n", r.result)
	return nil
}

// mapPhase takes a slot (with Runnable) and loads the rank's share.
func (r *run) mapPhase(ctx context.Context) error {
	if err := r.gate.Acquire(ctx); err != nil {
		return err
	}
	if r.share != nil {
		return nil
	}
	sh, err := r.c.Input.Share(r.j.RT.Rank(), r.j.RT.Size())
	if err != nil {
		return fmt.Errorf("wordcount: %w", err)
	}
	r.share, r.count = &sh, sh.Count
	return nil
}

// waitPhase, before a wait on other ranks: with Runnable, drops the
// share (it is read again after), has the shuffle spill what it
// received (kvshuffle Spill: BDMPI stages a waiting rank's data out),
// and frees the slot.
func (r *run) waitPhase() {
	if r.gate == nil {
		return
	}
	if r.share != nil {
		r.share = nil
		debug.FreeOSMemory()
	}
	if r.j != nil && r.j.Sh != nil {
		// Spill fails only without a SpillDir, which the command always
		// sets; not spilling then costs memory, not correctness.
		_ = r.j.Sh.Spill()
	}
	r.gate.Release()
}

// aRank is the rank of partition p.
func (r *run) aRank(p int) int {
	if r.aRanks == nil {
		return p
	}
	return r.aRanks[p]
}

// attempt sends the rank's lines from the shuffle's Consumed count on,
// then reduces its partition and agrees on the result.
func (r *run) attempt(ctx context.Context) error {
	sh, rank := r.j.Sh, r.j.RT.Rank()
	if r.c.Route && r.table == nil {
		if err := r.route(ctx); err != nil {
			return err
		}
	}
	if err := r.mapPhase(ctx); err != nil {
		return err
	}
	defer r.waitPhase()
	// Checkpoint k (1..Ckpts) is taken before line k*count/(Ckpts+1).
	k := binary.LittleEndian.Uint64(r.phase[32:]) + 1
	ckAt := func(k uint64) int64 { return int64(k) * r.count / int64(r.c.Ckpts+1) }
	checkpoint := func() error {
		r.waitPhase()
		binary.LittleEndian.PutUint64(r.phase[32:], k)
		if err := r.j.Checkpoint(ctx, k); err != nil {
			return err
		}
		k++
		return r.mapPhase(ctx)
	}
	killAt := int64(-1)
	if r.c.Kill.Armed(r.j.RT) {
		killAt = int64(r.c.Kill.At * float64(r.count))
	}
	one := binary.AppendUvarint(nil, 1)
	var buf []byte
	for i := int64(sh.Consumed()); i < r.count; i++ {
		for k <= uint64(r.c.Ckpts) && i >= ckAt(k) {
			if err := checkpoint(); err != nil {
				return err
			}
		}
		if i == killAt {
			r.c.Kill.Fire(r.c.Stdout, rank, fmt.Sprintf("after %d of its %d lines", i, r.count))
		}
		if err := Words(r.share.Line(i), buf, func(w []byte) error {
			if p := r.partition(w, sh.Parts()); r.aRank(p) != rank {
				r.moved += uint64(len(w) + len(one))
			}
			return sh.Send(ctx, w, one)
		}); err != nil {
			return err
		}
		if err := sh.MarkConsumed(uint64(i + 1)); err != nil {
			return err
		}
	}
	for k <= uint64(r.c.Ckpts) { // a rank with few lines takes the rest at its end
		if err := checkpoint(); err != nil {
			return err
		}
	}
	r.waitPhase()
	if err := sh.CloseSend(ctx); err != nil {
		return err
	}
	var mine Result
	if sh.IsA() {
		var err error
		if mine, err = r.reduce(ctx); err != nil {
			return err
		}
	}
	all, err := pgas.Allgather(ctx, r.j.RT, nil, []uint64{mine.Words, mine.Total, mine.Digest})
	if err != nil {
		return err
	}
	var total Result
	for i := 0; i < len(all); i += 3 {
		total = total.Merge(Result{Words: all[i], Total: all[i+1], Digest: all[i+2]})
	}
	binary.LittleEndian.PutUint64(r.phase, 1)
	binary.LittleEndian.PutUint64(r.phase[8:], total.Words)
	binary.LittleEndian.PutUint64(r.phase[16:], total.Total)
	binary.LittleEndian.PutUint64(r.phase[24:], total.Digest)
	if err := r.j.Checkpoint(ctx, 0); err != nil {
		clear(r.phase[:phaseBytes])
		return err
	}
	r.done, r.result = true, total
	return nil
}

// reduce sums the groups of this A task's partition, writing the part
// file with --out.
func (r *run) reduce(ctx context.Context) (res Result, err error) {
	sh := r.j.Sh
	var w *bufio.Writer
	var f *os.File
	var tmp string
	if r.c.Out != "" {
		tmp = filepath.Join(r.c.Out, fmt.Sprintf("part-%05d.tmp", sh.Partition()))
		if f, err = os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600); err != nil {
			return res, fmt.Errorf("wordcount: %w", err)
		}
		defer f.Close()
		defer func() {
			if err != nil {
				os.Remove(tmp) // interrupted or failed: no half-written part left
			}
		}()
		w = bufio.NewWriter(f)
	}
	var werr error
	for word, vals := range sh.Groups(ctx) {
		n, ok := kvjob.SumCounts(vals)
		if !ok {
			return res, fmt.Errorf("wordcount: word %q: a count that is not a varint", word)
		}
		res.Add(word, n)
		if w != nil && werr == nil {
			_, werr = fmt.Fprintf(w, "%s\t%d\n", word, n)
		}
	}
	if err := sh.Err(); err != nil {
		return res, err
	}
	if w != nil {
		if werr == nil {
			werr = w.Flush()
		}
		if werr == nil {
			werr = f.Close()
		}
		if werr == nil {
			werr = os.Rename(tmp, filepath.Join(r.c.Out, fmt.Sprintf("part-%05d", sh.Partition())))
		}
		if werr != nil {
			return res, fmt.Errorf("wordcount: write %s: %w", tmp, werr)
		}
	}
	return res, nil
}
