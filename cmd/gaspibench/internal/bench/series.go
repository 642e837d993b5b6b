package bench

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/gaspigo/gaspigo/pgas"
)

// bandwidth measures one size: pgas writes, the raw stream and pgas reads,
// taking turns, with the same number of windows (so the same bytes) each.
func (b *bench) bandwidth(ctx context.Context, size int64) (BWRow, error) {
	w := b.cfg.window(size)
	row := BWRow{Size: size, Window: w}
	if b.me > 1 {
		return row, nil
	}
	mem := b.seg.Bytes()
	front, back := pgas.Loc{Seg: segID}, pgas.Loc{Seg: segID, Off: b.half}
	recv := mem[b.half : b.half+size] // rank 1: written here; rank 0: read here
	// windows returns a step for rank 0 that posts windows of w operations
	// and waits for each; rank 1 has nothing to do.
	windows := func(op func() error) step {
		return func(k int, _ []time.Duration) (time.Duration, error) {
			if b.me != 0 {
				return 0, nil
			}
			start := time.Now()
			for range k {
				for range w {
					if err := op(); err != nil {
						return 0, err
					}
				}
				if err := b.rt.Wait(ctx, queue); err != nil {
					return 0, err
				}
			}
			return time.Since(start), nil
		}
	}
	var steps []step
	var names []string
	var figures []*float64
	if b.cfg.Tests.Has(TestBW) {
		steps = append(steps, windows(func() error { return b.rt.Write(ctx, queue, 1, back, front, size) }))
		names, figures = append(names, "write bandwidth"), append(figures, &row.Write)
	}
	if b.cfg.Tests.Has(TestRaw) {
		src := mem[:size]
		steps = append(steps, func(k int, _ []time.Duration) (time.Duration, error) {
			if b.me == 0 {
				return b.raw.sendStream(ctx, src, k*w)
			}
			return 0, b.raw.recvStream(ctx, size, k*w)
		})
		names, figures = append(names, "raw stream"), append(figures, &row.Raw)
	}
	if b.cfg.Tests.Has(TestRBW) {
		steps = append(steps, windows(func() error { return b.rt.Read(ctx, queue, 1, front, back, size) }))
		names, figures = append(names, "read bandwidth"), append(figures, &row.Read)
	}
	clear(recv)
	if err := b.rt.Barrier(ctx, b.pair); err != nil {
		return row, fmt.Errorf("bench: bandwidth, %s: %w", FormatSize(size), err)
	}
	iters, res, capped, err := b.measure(ctx, b.pair, 0, false, steps...)
	if err != nil {
		return row, fmt.Errorf("bench: %s, %s: %w", strings.Join(names, ", "), FormatSize(size), err)
	}
	row.Iters, row.Capped = iters, capped
	for i, r := range res {
		*figures[i] = mibPerSec(int64(iters)*int64(w)*size, r.total)
	}
	if b.cfg.Tests.Has(TestRaw) {
		row.RawIters = iters
	}
	if b.cfg.Tests.Has(TestRBW) {
		row.ReadIters = iters
	}
	// The last Bcast of measure came after rank 0's last Wait: the data
	// is in place on both sides.
	if b.me == 1 && b.cfg.Tests.Has(TestBW) {
		if err := b.check("write", recv); err != nil {
			return row, err
		}
	}
	if b.me == 0 && b.cfg.Tests.Has(TestRBW) {
		if err := b.check("read", recv); err != nil {
			return row, err
		}
	}
	if row.Raw > 0 {
		row.WriteRatio = row.Write / row.Raw
		row.ReadRatio = row.Read / row.Raw
	}
	return row, nil
}

// latency measures one size: the pgas write+notify ping-pong and the raw
// TCP ping-pong, taking turns.
func (b *bench) latency(ctx context.Context, size int64) (LatRow, error) {
	row := LatRow{Size: size}
	if b.me > 1 {
		return row, nil
	}
	recv := b.seg.Bytes()[b.half : b.half+size]
	var steps []step
	var names []string
	var dists []*Dist
	if b.cfg.Tests.Has(TestLat) {
		steps = append(steps, func(k int, samples []time.Duration) (time.Duration, error) {
			return b.pgasPingPong(ctx, size, k, samples)
		})
		names, dists = append(names, "write+notify latency"), append(dists, &row.RTT)
	}
	if b.cfg.Tests.Has(TestRaw) {
		src := b.seg.Bytes()[:size]
		steps = append(steps, func(k int, samples []time.Duration) (time.Duration, error) {
			start := time.Now()
			var err error
			if b.me == 0 {
				err = b.raw.ping(ctx, src, k, samples)
			} else {
				err = b.raw.pong(ctx, src, k)
			}
			return time.Since(start), err
		})
		names, dists = append(names, "raw ping-pong"), append(dists, &row.Raw)
	}
	clear(recv)
	if err := b.rt.Barrier(ctx, b.pair); err != nil {
		return row, fmt.Errorf("bench: latency, %s: %w", FormatSize(size), err)
	}
	_, res, capped, err := b.measure(ctx, b.pair, 0, true, steps...)
	if err != nil {
		return row, fmt.Errorf("bench: %s, %s: %w", strings.Join(names, ", "), FormatSize(size), err)
	}
	row.Capped = capped
	for i, r := range res {
		*dists[i] = Summarize(r.samples)
	}
	if b.cfg.Tests.Has(TestLat) {
		if err := b.check("write+notify ping-pong", recv); err != nil {
			return row, err
		}
	}
	if row.RTT.N > 0 && row.Raw.N > 0 {
		row.Ratio = float64(row.RTT.Median) / float64(row.Raw.Median)
	}
	return row, nil
}

// pgasPingPong runs iters round trips: rank 0 writes size bytes with a
// notification to rank 1, which waits for it, consumes it and answers the
// same way. Each side waits for its previous operation's completion just
// before posting the next, so the queue never fills and the
// acknowledgement is off the critical path when it arrives in time. It
// returns the time of all iters round trips.
func (b *bench) pgasPingPong(ctx context.Context, size int64, iters int, samples []time.Duration) (time.Duration, error) {
	front, back := pgas.Loc{Seg: segID}, pgas.Loc{Seg: segID, Off: b.half}
	peer, mine, theirs := 1, notePong, notePing
	if b.me == 1 {
		peer, mine, theirs = 0, notePing, notePong
	}
	exchange := func() error {
		if err := b.rt.Wait(ctx, queue); err != nil {
			return err
		}
		return b.rt.WriteNotify(ctx, queue, peer, back, front, size, theirs, 1)
	}
	await := func() error {
		if _, err := b.rt.NotifyWaitSome(ctx, segID, mine, 1); err != nil {
			return err
		}
		_, err := b.rt.NotifyReset(segID, mine)
		return err
	}
	begin := time.Now()
	for i := range iters {
		start := time.Now()
		if b.me == 0 {
			if err := exchange(); err != nil {
				return 0, err
			}
			if err := await(); err != nil {
				return 0, err
			}
		} else {
			if err := await(); err != nil {
				return 0, err
			}
			if err := exchange(); err != nil {
				return 0, err
			}
		}
		if samples != nil {
			samples[i] = time.Since(start)
		}
	}
	d := time.Since(begin)
	return d, b.rt.Wait(ctx, queue)
}

// flush measures one size of the write+Wait round trip, the counterpart
// of MPI's put+flush: rank 0 Writes size bytes to rank 1 and Waits for
// their remote completion (the target's acknowledgement), one at a time;
// rank 1 only applies the writes.
func (b *bench) flush(ctx context.Context, size int64) (CollRow, error) {
	row := CollRow{Op: "write_wait", Size: size}
	if b.me > 1 {
		return row, nil
	}
	front, back := pgas.Loc{Seg: segID}, pgas.Loc{Seg: segID, Off: b.half}
	_, res, capped, err := b.measure(ctx, b.pair, 0, true, func(k int, samples []time.Duration) (time.Duration, error) {
		if b.me != 0 {
			return 0, nil
		}
		return timeEach(k, samples, nil, func() error {
			if err := b.rt.Write(ctx, queue, 1, back, front, size); err != nil {
				return err
			}
			return b.rt.Wait(ctx, queue)
		})
	})
	if err != nil {
		return row, fmt.Errorf("bench: write+wait round trip, %s: %w", FormatSize(size), err)
	}
	row.Dist, row.Capped = Summarize(res[0].samples), capped
	return row, nil
}

// timeEach runs call k times and returns the time they took, each call's
// in samples when it is set; prep, when set, runs before each call,
// outside the timing.
func timeEach(k int, samples []time.Duration, prep func(), call func() error) (time.Duration, error) {
	var total time.Duration
	for i := range k {
		if prep != nil {
			prep()
		}
		start := time.Now()
		if err := call(); err != nil {
			return 0, err
		}
		d := time.Since(start)
		total += d
		if samples != nil {
			samples[i] = d
		}
	}
	return total, nil
}

// collective measures a barrier, or an allreduce of size bytes of float64,
// over every rank.
func (b *bench) collective(ctx context.Context, op string, size int64) (CollRow, error) {
	row := CollRow{Op: op, Size: size}
	fail := func(err error) (CollRow, error) {
		if op == "barrier" {
			return row, fmt.Errorf("bench: barrier latency: %w", err)
		}
		return row, fmt.Errorf("bench: allreduce latency, %s: %w", FormatSize(size), err)
	}
	var data, init []float64
	if op == "allreduce" {
		data, init = make([]float64, size/8), make([]float64, size/8)
		for i := range init {
			init[i] = float64(b.me + i%7)
		}
	}
	call := func() error {
		if data == nil {
			return b.rt.Barrier(ctx, b.all)
		}
		return pgas.Allreduce(ctx, b.rt, b.all, data, pgas.OpSum)
	}
	iters, res, capped, err := b.measure(ctx, b.all, 0, true, func(k int, samples []time.Duration) (time.Duration, error) {
		// The copy is outside the timing; the values stay small.
		return timeEach(k, samples, func() { copy(data, init) }, call)
	})
	if err != nil {
		return fail(err)
	}
	slowest := []float64{float64(res[0].total) / float64(max(iters, 1))}
	if err := pgas.Allreduce(ctx, b.rt, b.all, slowest, pgas.OpMax); err != nil {
		return fail(err)
	}
	if data != nil {
		copy(data, init)
		if err := call(); err != nil {
			return fail(err)
		}
		base := float64(b.n*(b.n-1)) / 2
		for i, v := range data {
			if want := base + float64(b.n*(i%7)); v != want {
				return row, fmt.Errorf("%w: allreduce of %s: element %d is %v, want %v", ErrVerify, FormatSize(size), i, v, want)
			}
		}
	}
	row.Dist, row.Capped = Summarize(res[0].samples), capped
	row.SlowestMean = time.Duration(math.Round(slowest[0]))
	return row, nil
}
