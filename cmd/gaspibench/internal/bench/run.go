package bench

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"runtime"
	"time"

	"github.com/gaspigo/gaspigo/pgas"
	"github.com/gaspigo/gaspigo/segments"
)

const (
	segID    segments.ID             = 1 // the benchmark's segment; Run owns the job's segments
	notePing segments.NotificationID = 1 // set on rank 1 by rank 0's ping
	notePong segments.NotificationID = 2 // set on rank 0 by rank 1's pong
	pairTag  uint16                  = 1 // group of ranks 0 and 1
	queue    pgas.Queue              = 0
)

// bench is one rank's state during Run.
type bench struct {
	rt   *pgas.Runtime
	cfg  Config
	me   int
	n    int
	all  *pgas.Group
	pair *pgas.Group // ranks 0 and 1; nil on the other ranks
	seg  *segments.Segment
	half int64 // the segment's second half receives; the first holds the pattern
	raw  *rawLink
	rep  *Report
	p    *printer
}

// Run runs the benchmarks cfg selects on rt. Every rank of the job calls
// it with the same cfg (it checks that they agree). The point-to-point
// tests run between ranks 0 and 1 while the other ranks wait; the
// collectives run on every rank. Rank 0 writes the report to out as it
// measures (the other ranks write nothing) and returns it; the other ranks
// return an empty Report. Run creates segment 1 and group tag 1, and
// deletes the segment before it returns.
func Run(ctx context.Context, rt *pgas.Runtime, cfg Config, out io.Writer) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeoutCause(ctx, cfg.Timeout,
		fmt.Errorf("bench: the run took longer than --timeout %v", cfg.Timeout))
	defer cancel()
	start := time.Now()
	b := &bench{rt: rt, cfg: cfg, me: rt.Rank(), n: rt.Size(), all: rt.GroupAll()}
	if b.me != 0 {
		out = nil
	}
	b.p = newPrinter(out, cfg.CSV)
	b.rep = &Report{
		Ranks:   b.n,
		Spin:    cfg.Spin,
		LoadAvg: loadAvg(),
		Env:     fmt.Sprintf("GOMAXPROCS %d, %d CPUs, %s", runtime.GOMAXPROCS(0), runtime.NumCPU(), runtime.Version()),
	}
	if cfg.Tests&pairTests != 0 && b.n < 2 {
		return nil, fmt.Errorf("%w: the tests %s run between ranks 0 and 1, but the job has %d rank; launch with gaspirun -n 2 or more, or pick --tests barrier,allreduce",
			ErrJob, cfg.Tests&pairTests, b.n)
	}
	if err := b.agree(ctx); err != nil {
		return nil, err
	}
	if err := b.setup(ctx); err != nil {
		b.teardown()
		return nil, err
	}
	defer b.teardown()
	b.p.header(b.rep, &b.cfg)
	if err := b.runAll(ctx); err != nil {
		return nil, err
	}
	if err := rt.Barrier(ctx, b.all); err != nil {
		return nil, fmt.Errorf("bench: final barrier: %w", err)
	}
	if b.me != 0 {
		return &Report{Ranks: b.n}, nil
	}
	b.rep.Targets = targets(b.rep)
	b.rep.LoadEnd = loadAvg()
	b.rep.Duration = time.Since(start)
	b.p.footer(b.rep)
	return b.rep, nil
}

func (b *bench) runAll(ctx context.Context) error {
	t := b.cfg.Tests
	if t&(TestBW|TestRBW|TestRaw) != 0 {
		if err := eachSize(ctx, b, b.cfg.Sizes, "bandwidth", b.bandwidth, func(row BWRow) {
			b.rep.BW = append(b.rep.BW, row)
			b.p.bw(b.rep, row)
		}); err != nil {
			return err
		}
	}
	if t&(TestLat|TestRaw) != 0 {
		if err := eachSize(ctx, b, b.cfg.LatSizes, "latency", b.latency, func(row LatRow) {
			b.rep.Lat = append(b.rep.Lat, row)
			b.p.lat(b.rep, row)
		}); err != nil {
			return err
		}
	}
	if t.Has(TestFlush) {
		if err := eachSize(ctx, b, b.cfg.LatSizes, "write+wait", b.flush, func(row CollRow) {
			b.rep.Flush = append(b.rep.Flush, row)
			b.p.flush(b.rep, row)
		}); err != nil {
			return err
		}
	}
	if t.Has(TestBarrier) {
		row, err := b.collective(ctx, "barrier", 0)
		if err != nil {
			return err
		}
		b.addColl(row)
	}
	if t.Has(TestAllreduce) {
		for _, size := range b.cfg.CollSizes {
			row, err := b.collective(ctx, "allreduce", size)
			if err != nil {
				return err
			}
			b.addColl(row)
		}
	}
	return nil
}

// eachSize measures each of sizes with one; rank 0 keeps each row (keep).
// A barrier over every rank ends the series.
func eachSize[R any](ctx context.Context, b *bench, sizes []int64, what string, one func(context.Context, int64) (R, error), keep func(R)) error {
	for _, size := range sizes {
		row, err := one(ctx, size)
		if err != nil {
			return err
		}
		if b.me == 0 {
			keep(row)
		}
	}
	if err := b.rt.Barrier(ctx, b.all); err != nil {
		return fmt.Errorf("bench: barrier after the %s tests: %w", what, err)
	}
	return nil
}

func (b *bench) addColl(row CollRow) {
	if b.me == 0 {
		b.rep.Coll = append(b.rep.Coll, row)
		b.p.coll(b.rep, row)
	}
}

// agree checks that every rank runs the same configuration: a rank started
// with other sizes or counts would wait forever for messages that never
// come.
func (b *bench) agree(ctx context.Context) error {
	mine := sha256.Sum256([]byte(b.cfg.fingerprint()))
	got := mine
	if err := b.rt.Bcast(ctx, b.all, got[:], 0); err != nil {
		return fmt.Errorf("bench: comparing settings with rank 0: %w", err)
	}
	// Every rank learns the verdict, so none goes on to wait for a rank
	// that gave up.
	odd := []int64{-1}
	if got != mine {
		odd[0] = int64(b.me)
	}
	if err := pgas.Allreduce(ctx, b.rt, b.all, odd, pgas.OpMax); err != nil {
		return fmt.Errorf("bench: comparing settings with rank 0: %w", err)
	}
	if odd[0] >= 0 {
		return fmt.Errorf("%w: rank %d runs with other settings than rank 0 (here: %s); give every rank the same flags", ErrJob, odd[0], b.cfg.fingerprint())
	}
	return nil
}

// setup creates the segment, the pair group and the raw link.
func (b *bench) setup(ctx context.Context) error {
	size := int64(4096)
	if b.me < 2 && b.cfg.Tests&pairTests != 0 {
		var largest int64
		if b.cfg.Tests&(TestBW|TestRBW|TestRaw) != 0 {
			largest = max(largest, maxOf(b.cfg.Sizes))
		}
		if b.cfg.Tests&(TestLat|TestRaw) != 0 {
			largest = max(largest, maxOf(b.cfg.LatSizes))
		}
		size = max(size, 2*largest)
	}
	seg, err := b.rt.SegmentCreate(ctx, segID, size, nil)
	if err != nil {
		return fmt.Errorf("bench: creating a segment of %s: %w", FormatSize(size), err)
	}
	b.seg, b.half = seg, size/2
	fillPattern(seg.Bytes()[:b.half])
	if b.me > 1 || b.cfg.Tests&pairTests == 0 {
		return nil
	}
	if b.pair, err = b.rt.NewGroup(pairTag, []int{0, 1}); err != nil {
		return fmt.Errorf("bench: group of ranks 0 and 1: %w", err)
	}
	if b.cfg.Tests.Has(TestRaw) {
		largest := max(maxOf(b.cfg.Sizes), maxOf(b.cfg.LatSizes))
		if b.raw, err = setupRaw(ctx, b.rt, b.pair, largest); err != nil {
			return err
		}
	}
	return nil
}

func (b *bench) teardown() {
	b.raw.close()
	if b.seg != nil {
		b.rt.SegmentDelete(segID)
	}
}

func maxOf(s []int64) int64 {
	var m int64
	for _, v := range s {
		m = max(m, v)
	}
	return m
}

// fillPattern writes the bytes that every transfer carries and is checked
// against: the same on every rank, and not periodic at small powers of two.
func fillPattern(b []byte) {
	for i := range b {
		b[i] = byte(i*131 + i>>8 + 7)
	}
}

// check compares what arrived with the pattern.
func (b *bench) check(what string, got []byte) error {
	want := b.seg.Bytes()[:len(got)]
	if i := firstDiff(got, want); i >= 0 {
		return fmt.Errorf("%w: %s of %s: byte %d is %#x, want %#x", ErrVerify, what, FormatSize(int64(len(got))), i, got[i], want[i])
	}
	return nil
}

func firstDiff(a, b []byte) int {
	if bytes.Equal(a, b) {
		return -1
	}
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return len(a)
}

// bcastCount gives every member of g rank 0's count.
func (b *bench) bcastCount(ctx context.Context, g *pgas.Group, n int) (int, error) {
	var buf [8]byte
	binary.LittleEndian.PutUint64(buf[:], uint64(n))
	if err := b.rt.Bcast(ctx, g, buf[:], 0); err != nil {
		return 0, err
	}
	return int(binary.LittleEndian.Uint64(buf[:])), nil
}

// step runs k iterations of a measurement on this rank and returns the
// time they took; samples, when not nil (rank 0 of a latency test), has
// room for each iteration's time.
type step func(k int, samples []time.Duration) (time.Duration, error)

// result is one step's measurement as this rank saw it.
type result struct {
	total   time.Duration   // this rank's time in the timed iterations
	samples []time.Duration // per-iteration times: rank 0 only, when asked
}

// measure runs one measurement of one or more steps among the members of
// g (rank 0 among them) and returns the count of timed iterations, which
// every step and every member ran, and each step's result.
//
// First each step runs Warmup untimed iterations. Then rank 0 plans the
// count: fixed when > 0, else enough for the slowest step to fill MinTime
// at its warm-up pace (see Config.iterations). The timed iterations run in
// about eight chunks; before each, rank 0 Bcasts its size over g (0 means
// done), so every member runs the same count and rank 0 can stop at the
// time cap when the machine slows down (capped). Within a chunk the steps
// take turns, so that a pgas figure and the raw figure it is divided by
// see the same load even when it drifts. The Bcasts are outside the timing.
func (b *bench) measure(ctx context.Context, g *pgas.Group, fixed int, record bool, steps ...step) (iters int, res []result, capped bool, err error) {
	res = make([]result, len(steps))
	var slowest time.Duration
	for _, st := range steps {
		took, err := st(b.cfg.Warmup, nil)
		if err != nil {
			return 0, nil, false, err
		}
		slowest = max(slowest, took)
	}
	plan := fixed
	if plan <= 0 {
		plan = b.cfg.iterations(b.cfg.Warmup, slowest)
	}
	if b.me == 0 && record {
		for i := range res {
			res[i].samples = make([]time.Duration, plan)
		}
	}
	chunk := max(1, (plan+7)/8)
	limit := b.cfg.measureCap()
	start := time.Now()
	for {
		k := 0
		if b.me == 0 {
			k, capped = nextChunk(plan, iters, chunk, time.Since(start), limit)
		}
		if k, err = b.bcastCount(ctx, g, k); err != nil {
			return 0, nil, false, err
		}
		if k == 0 {
			break
		}
		for i, st := range steps {
			var samples []time.Duration
			if res[i].samples != nil {
				samples = res[i].samples[iters : iters+k]
			}
			d, err := st(k, samples)
			if err != nil {
				return 0, nil, false, err
			}
			res[i].total += d
		}
		iters += k
	}
	for i := range res {
		if res[i].samples != nil {
			res[i].samples = res[i].samples[:iters]
		}
	}
	return iters, res, capped, nil
}

// nextChunk decides the size of the next chunk of a measurement that
// planned plan iterations and has done done of them in elapsed: 0 ends it.
// It stops early, with capped set, once elapsed passes limit (0 means no
// limit) and at least one chunk has run.
func nextChunk(plan, done, chunk int, elapsed, limit time.Duration) (k int, capped bool) {
	k = min(chunk, plan-done)
	if k > 0 && limit > 0 && done > 0 && elapsed > limit {
		return 0, true
	}
	return max(k, 0), false
}
