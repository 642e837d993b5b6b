package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/gaspigo/gaspigo/health"
	"github.com/gaspigo/gaspigo/pgas"
	"github.com/gaspigo/gaspigo/segments"
)

func loc(seg segments.ID, off int64) pgas.Loc { return pgas.Loc{Seg: seg, Off: off} }

// pat is the byte rank writes at index i in round r: it changes with the
// round, the writer and the position (also across 256-byte chunks).
func pat(r, rank, i int) byte { return byte(r*31 + rank*101 + i*7 + i>>8) }

// Rule: a notification is set at the target only after every write the
// same process posted to that target before it. Many writes of one round
// (16 chunks of 256 B, 4 KiB or 64 KiB), then a notification (Notify, or
// WriteNotify on the last chunk); the target checks every byte as soon as
// the notification is there, before any Wait or barrier.
func caseOrdering(ctx context.Context, p *prog) error {
	rt := p.rt
	const half = 1 << 20
	s, err := rt.SegmentCreate(ctx, 1, 2*half, nil)
	if err != nil {
		return err
	}
	right, left := (p.me+1)%p.n, (p.me+p.n-1)%p.n
	sizes := []int64{256, 4096, 65536}
	for r := 1; r <= p.rounds; r++ {
		cs := sizes[r%len(sizes)]
		total := 16 * cs
		src := s.Bytes()[half : half+total]
		for i := range src {
			src[i] = pat(r, p.me, i)
		}
		for c := int64(0); c < 16; c++ {
			off := c * cs
			if r%2 == 0 && c == 15 {
				err = rt.WriteNotify(ctx, 0, right, loc(1, off), loc(1, half+off), cs, 5, uint32(r))
			} else {
				err = rt.Write(ctx, 0, right, loc(1, off), loc(1, half+off), cs)
			}
			if err != nil {
				return fmt.Errorf("round %d chunk %d: %w", r, c, err)
			}
		}
		if r%2 == 1 {
			if err := rt.Notify(ctx, 0, right, 1, 5, uint32(r)); err != nil {
				return fmt.Errorf("round %d notify: %w", r, err)
			}
		}
		if _, err := rt.NotifyWaitSome(ctx, 1, 5, 1); err != nil {
			return fmt.Errorf("round %d: waiting for the notification: %w", r, err)
		}
		if v, err := rt.NotifyReset(1, 5); err != nil || v != uint32(r) {
			return fmt.Errorf("round %d: notification value %d (%v), want %d", r, v, err, r)
		}
		got := s.Bytes()[:total]
		for i := range got {
			if want := pat(r, left, i); got[i] != want {
				return fmt.Errorf("round %d (chunks of %d B): byte %d is %d when the notification is seen, want %d", r, cs, i, got[i], want)
			}
		}
		if err := rt.Wait(ctx, 0); err != nil {
			return fmt.Errorf("round %d wait: %w", r, err)
		}
		// The next round's writes must not overtake the right neighbour's check.
		if err := rt.Barrier(ctx, nil); err != nil {
			return err
		}
	}
	return nil
}

// Rule: NotifyWaitSome returns a set slot without consuming it; NotifyReset
// returns the value and clears it; a cleared slot is not seen again; value
// 0 and slot IDs past the end are invalid.
func caseNotify(ctx context.Context, p *prog) error {
	rt := p.rt
	s, err := rt.SegmentCreate(ctx, 2, 4096, nil)
	if err != nil {
		return err
	}
	right, left := (p.me+1)%p.n, (p.me+p.n-1)%p.n
	msg := func(r int) string { return fmt.Sprintf("hello from %03d!!", r) }
	copy(s.Bytes()[2048:], msg(p.me))
	if err := rt.WriteNotify(ctx, 1, right, loc(2, 100), loc(2, 2048), 16, segments.NotificationID(10+p.me), uint32(1000+p.me)); err != nil {
		return err
	}
	if err := rt.Wait(ctx, 1); err != nil {
		return err
	}
	id, err := rt.NotifyWaitSome(ctx, 2, 0, 64)
	if err != nil {
		return err
	}
	if int(id) != 10+left {
		return fmt.Errorf("NotifyWaitSome = %d, want %d", id, 10+left)
	}
	// Waiting again does not consume it.
	if id2, err := rt.NotifyWaitSome(ctx, 2, 0, 64); err != nil || id2 != id {
		return fmt.Errorf("second NotifyWaitSome = %d, %v; want %d again", id2, err, id)
	}
	if v, _ := rt.NotifyReset(2, id); v != uint32(1000+left) {
		return fmt.Errorf("NotifyReset = %d, want %d", v, 1000+left)
	}
	if v, _ := rt.NotifyReset(2, id); v != 0 {
		return fmt.Errorf("second NotifyReset = %d, want 0", v)
	}
	if got := string(s.Bytes()[100:116]); got != msg(left) {
		return fmt.Errorf("data %q, want %q", got, msg(left))
	}
	// The left neighbour's next notifications must not reach this rank
	// while its wait above scans the slots: a scan reads them one by one,
	// so one preempted between slot 10+left and slot 20 would find 20.
	if err := rt.Barrier(ctx, nil); err != nil {
		return err
	}
	// Eight notifications at once; each is seen and consumed exactly once.
	for k := 0; k < 8; k++ {
		if err := rt.Notify(ctx, 1, right, 2, segments.NotificationID(20+k), uint32(k+1)); err != nil {
			return err
		}
	}
	if err := rt.Wait(ctx, 1); err != nil {
		return err
	}
	seen := map[segments.NotificationID]bool{}
	for len(seen) < 8 {
		id, err := rt.NotifyWaitSome(ctx, 2, 20, 8)
		if err != nil {
			return err
		}
		v, _ := rt.NotifyReset(2, id)
		if v != uint32(id-20+1) || seen[id] {
			return fmt.Errorf("slot %d: value %d (seen before: %v)", id, v, seen[id])
		}
		seen[id] = true
	}
	tctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
	_, err = rt.NotifyWaitSome(tctx, 2, 20, 8)
	cancel()
	if !isTimeout(err) || !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("waiting on consumed slots: %v; want ErrTimeout", err)
	}
	if err := rt.Notify(ctx, 1, right, 2, 1, 0); !errors.Is(err, pgas.ErrInvalid) {
		return fmt.Errorf("Notify with value 0: %v; want ErrInvalid", err)
	}
	if err := rt.WriteNotify(ctx, 1, right, loc(2, 0), loc(2, 0), 8, 1, 0); !errors.Is(err, pgas.ErrInvalid) {
		return fmt.Errorf("WriteNotify with value 0: %v; want ErrInvalid", err)
	}
	if _, err := rt.NotifyWaitSome(ctx, 2, segments.DefaultNotifications-4, 8); !errors.Is(err, pgas.ErrInvalid) {
		return fmt.Errorf("NotifyWaitSome past the last slot: %v; want ErrInvalid", err)
	}
	return rt.Wait(ctx, 1)
}

// Rule: a queue holds at most QueueDepth operations between Waits; one
// more is ErrQueueFull at once; other queues are independent; Wait empties
// the queue.
func caseQueueFull(ctx context.Context, p *prog) error {
	rt := p.rt
	if _, err := rt.SegmentCreate(ctx, 3, 4096, nil); err != nil {
		return err
	}
	right := (p.me + 1) % p.n
	for i := 0; i < p.depth; i++ {
		if err := rt.Write(ctx, 0, right, loc(3, int64(8*(i%512))), loc(3, 0), 8); err != nil {
			return fmt.Errorf("write %d of %d: %w", i+1, p.depth, err)
		}
	}
	start := time.Now()
	errW := rt.Write(ctx, 0, right, loc(3, 0), loc(3, 0), 8)
	errN := rt.Notify(ctx, 0, right, 3, 1, 1)
	errR := rt.Read(ctx, 0, right, loc(3, 0), loc(3, 8), 8)
	if took := time.Since(start); took > time.Second {
		return fmt.Errorf("refusing three operations on a full queue took %v; it must not stall", took)
	}
	for what, err := range map[string]error{"write": errW, "notify": errN, "read": errR} {
		if !errors.Is(err, pgas.ErrQueueFull) {
			return fmt.Errorf("%s on a full queue (depth %d): %v; want ErrQueueFull", what, p.depth, err)
		}
	}
	if err := rt.Write(ctx, 1, right, loc(3, 0), loc(3, 0), 8); err != nil {
		return fmt.Errorf("queue 1 while queue 0 is full: %w", err)
	}
	if err := rt.Wait(ctx, 0); err != nil {
		return err
	}
	if err := rt.Wait(ctx, 1); err != nil {
		return err
	}
	if err := rt.Write(ctx, 0, right, loc(3, 0), loc(3, 0), 8); err != nil {
		return fmt.Errorf("after Wait: %w", err)
	}
	return rt.Wait(ctx, 0)
}

// Rule: a context that ends gives ErrTimeout (wrapping the context's
// error), never a *RankError, and marks nobody suspect; the runtime goes on.
func caseTimeout(ctx context.Context, p *prog) error {
	rt := p.rt
	if _, err := rt.SegmentCreate(ctx, 4, 4096, nil); err != nil {
		return err
	}
	const d = 150 * time.Millisecond
	start := time.Now() // before the deadline is set: it may not return before start+d
	tctx, cancel := context.WithTimeout(ctx, d)
	_, err := rt.NotifyWaitSome(tctx, 4, 0, 16)
	took := time.Since(start)
	cancel()
	if !isTimeout(err) || !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("NotifyWaitSome with a %v deadline: %v; want ErrTimeout and no RankError", d, err)
	}
	if took < d || took > d+5*time.Second {
		return fmt.Errorf("NotifyWaitSome with a %v deadline returned after %v", d, took)
	}
	cctx, ccancel := context.WithCancel(ctx)
	ccancel()
	if _, err := rt.NotifyWaitSome(cctx, 4, 0, 16); !isTimeout(err) || !errors.Is(err, context.Canceled) {
		return fmt.Errorf("NotifyWaitSome with a cancelled context: %v; want ErrTimeout wrapping context.Canceled", err)
	}
	// A barrier that a live peer enters late times out on the early rank.
	g, err := rt.NewGroup(9, []int{0, 1})
	if err != nil {
		return err
	}
	if p.me == 0 {
		bctx, bcancel := context.WithTimeout(ctx, 200*time.Millisecond)
		err := rt.Barrier(bctx, g)
		bcancel()
		if !isTimeout(err) {
			return fmt.Errorf("barrier that rank 1 has not entered: %v; want ErrTimeout and no RankError", err)
		}
	}
	if err := rt.Barrier(ctx, nil); err != nil {
		return err
	}
	if p.me == 1 {
		// Rank 0's message of that barrier is here: entering late completes.
		if err := rt.Barrier(ctx, g); err != nil {
			return fmt.Errorf("late barrier: %w", err)
		}
	}
	if err := rt.Barrier(ctx, nil); err != nil {
		return err
	}
	for r, e := range rt.StateVector() {
		if e.Suspect || e.State != health.Healthy {
			return fmt.Errorf("after timeouts rank %d is %v suspect=%v; a timeout must not mark anyone", r, e.State, e.Suspect)
		}
	}
	return nil
}

// Rule: a range outside a local or remote segment is ErrBounds at once
// (never a RankError, never a panic) and nothing is written; ranks may
// create a segment with different sizes and each learns all of them.
func caseBounds(ctx context.Context, p *prog) error {
	rt := p.rt
	size := func(r int) int64 { return int64(1024 * (r + 1)) }
	s, err := rt.SegmentCreate(ctx, 5, size(p.me), nil)
	if err != nil {
		return err
	}
	for i := range s.Bytes() {
		s.Bytes()[i] = byte(p.me*13 + i)
	}
	if err := rt.Barrier(ctx, nil); err != nil {
		return err
	}
	right, left := (p.me+1)%p.n, (p.me+p.n-1)%p.n
	rs := size(right)
	bad := []struct {
		name          string
		remote, local pgas.Loc
		size          int64
	}{
		{"remote past end", loc(5, rs-8), loc(5, 0), 16},
		{"remote just past end", loc(5, rs), loc(5, 0), 1},
		{"remote negative", loc(5, -8), loc(5, 0), 8},
		{"local past end", loc(5, 0), loc(5, size(p.me)-4), 8},
		{"negative size", loc(5, 0), loc(5, 0), -1},
		{"huge size", loc(5, 0), loc(5, 0), math.MaxInt64},
		{"huge offset", loc(5, math.MaxInt64-4), loc(5, 0), 8},
	}
	for _, c := range bad {
		err := rt.Write(ctx, 0, right, c.remote, c.local, c.size)
		if !errors.Is(err, pgas.ErrBounds) || isRankError(err, right) {
			return fmt.Errorf("write %s: %v; want ErrBounds", c.name, err)
		}
		err = rt.WriteNotify(ctx, 0, right, c.remote, c.local, c.size, 1, 1)
		if !errors.Is(err, pgas.ErrBounds) {
			return fmt.Errorf("write_notify %s: %v; want ErrBounds", c.name, err)
		}
		err = rt.Read(ctx, 0, right, c.remote, c.local, c.size)
		if !errors.Is(err, pgas.ErrBounds) {
			return fmt.Errorf("read %s: %v; want ErrBounds", c.name, err)
		}
	}
	if _, err := rt.FetchAdd(ctx, right, loc(5, rs), 1); !errors.Is(err, pgas.ErrBounds) {
		return fmt.Errorf("fetch_add past end: %v; want ErrBounds", err)
	}
	if _, err := rt.CompareSwap(ctx, right, loc(5, -8), 0, 1); !errors.Is(err, pgas.ErrBounds) {
		return fmt.Errorf("compare_swap at -8: %v; want ErrBounds", err)
	}
	if _, err := rt.FetchAdd(ctx, right, loc(5, 4), 1); !errors.Is(err, pgas.ErrInvalid) {
		return fmt.Errorf("misaligned fetch_add: %v; want ErrInvalid", err)
	}
	// Rank -1 is checked by caseNegativeRank (it panics in pgas today).
	for _, r := range []int{p.n, p.n + 7} {
		if err := rt.Write(ctx, 0, r, loc(5, 0), loc(5, 0), 8); !errors.Is(err, pgas.ErrInvalid) {
			return fmt.Errorf("write to rank %d: %v; want ErrInvalid", r, err)
		}
	}
	// Nothing was posted above. The sources of the two legal writes lie in
	// [8, 508), which no write of this case changes.
	if err := rt.Write(ctx, 0, right, loc(5, 0), loc(5, 8), 8); err != nil {
		return fmt.Errorf("legal write after the refusals: %w", err)
	}
	if err := rt.Wait(ctx, 0); err != nil {
		return err
	}
	// The last 500 bytes of the right neighbour's segment, whatever its size.
	if err := rt.Write(ctx, 0, right, loc(5, rs-500), loc(5, 8), 500); err != nil {
		return fmt.Errorf("in-bounds write at the end of rank %d's %d bytes: %w", right, rs, err)
	}
	if err := rt.Wait(ctx, 0); err != nil {
		return err
	}
	if err := rt.Barrier(ctx, nil); err != nil {
		return err
	}
	// Only the two legal writes changed this rank's memory.
	mine := s.Bytes()
	n := int64(len(mine))
	for i := int64(0); i < n; i++ {
		want := byte(p.me*13 + int(i))
		switch {
		case i < 8:
			want = byte(left*13 + int(i) + 8)
		case i >= n-500:
			want = byte(left*13 + int(i-(n-500)+8))
		}
		if mine[i] != want {
			return fmt.Errorf("byte %d of my %d-byte segment is %d, want %d: a refused access wrote", i, n, mine[i], want)
		}
	}
	return nil
}

// Rule: the target checks bounds again. Rank 0 re-creates segment 6 with
// 64 bytes on its own while the others still believe it has 4096, and
// deletes segment 61: their writes, reads and atomics pass the local check
// and are refused at rank 0 with a remote error (never a RankError); rank
// 0's memory stays as it was, it counts the refused frames, and the
// connections stay usable.
func caseRemoteBounds(ctx context.Context, p *prog) error {
	rt := p.rt
	if _, err := rt.SegmentCreate(ctx, 6, 4096, nil); err != nil {
		return err
	}
	if _, err := rt.SegmentCreate(ctx, 61, 4096, nil); err != nil {
		return err
	}
	if p.me == 0 {
		if err := rt.SegmentDelete(6); err != nil {
			return err
		}
		if err := rt.SegmentDelete(61); err != nil {
			return err
		}
		solo, err := rt.NewGroup(300, []int{0})
		if err != nil {
			return err
		}
		s, err := rt.SegmentCreate(ctx, 6, 64, solo)
		if err != nil {
			return err
		}
		for i := range s.Bytes() {
			s.Bytes()[i] = 0xA5
		}
	}
	before := rt.Stats()
	if err := rt.Barrier(ctx, nil); err != nil {
		return err
	}
	if p.me != 0 {
		s, _ := rt.Segment(6)
		for i := range s.Bytes() {
			s.Bytes()[i] = byte(p.me)
		}
		expectRemote := func(what string, err error, want error) error {
			if !errors.Is(err, pgas.ErrRemote) || !errors.Is(err, want) || isRankError(err, 0) {
				return fmt.Errorf("%s: %v; want a remote %v and no RankError", what, err, want)
			}
			return nil
		}
		if err := rt.Write(ctx, 0, 0, loc(6, 32), loc(6, 0), 128); err != nil {
			return fmt.Errorf("write that only the target can refuse: posting it failed: %w", err)
		}
		if err := expectRemote("wait for a write past the target's end", rt.Wait(ctx, 0), pgas.ErrBounds); err != nil {
			return err
		}
		if err := rt.Write(ctx, 0, 0, loc(61, 0), loc(6, 0), 8); err != nil {
			return err
		}
		if err := expectRemote("wait for a write to a deleted segment", rt.Wait(ctx, 0), pgas.ErrNoSegment); err != nil {
			return err
		}
		if err := rt.Read(ctx, 1, 0, loc(6, 32), loc(6, 1024), 128); err != nil {
			return err
		}
		if err := expectRemote("wait for a read past the target's end", rt.Wait(ctx, 1), pgas.ErrBounds); err != nil {
			return err
		}
		_, err := rt.FetchAdd(ctx, 0, loc(6, 128), 1)
		if err := expectRemote("fetch_add past the target's end", err, pgas.ErrBounds); err != nil {
			return err
		}
		// The connection still works: a legal write plus notification.
		off := int64(8 * (p.me - 1))
		if err := rt.WriteNotify(ctx, 0, 0, loc(6, off), loc(6, 0), 8, segments.NotificationID(p.me), 1); err != nil {
			return err
		}
		if err := rt.Wait(ctx, 0); err != nil {
			return fmt.Errorf("legal write after the refusals: %w", err)
		}
		if got := rt.Stats().RemoteErrors - before.RemoteErrors; got < 2 {
			return fmt.Errorf("RemoteErrors grew by %d, want at least 2 (two refused writes)", got)
		}
	} else {
		for r := 1; r < p.n; r++ {
			id := segments.NotificationID(r)
			if _, err := rt.NotifyWaitSome(ctx, 6, id, 1); err != nil {
				return err
			}
			rt.NotifyReset(6, id)
		}
		s, _ := rt.Segment(6)
		for i, b := range s.Bytes() {
			want := byte(0xA5)
			if w := i / 8; w < p.n-1 {
				want = byte(w + 1)
			}
			if b != want {
				return fmt.Errorf("byte %d of the 64-byte segment is %#x, want %#x: a refused operation wrote", i, b, want)
			}
		}
		if got, want := rt.Stats().FramesRejected-before.FramesRejected, uint64(2*(p.n-1)); got < want {
			return fmt.Errorf("FramesRejected grew by %d, want at least %d", got, want)
		}
	}
	return nil
}

// Reads: many small reads and one large read from every rank (and from
// self) land where they should after one Wait.
func caseRead(ctx context.Context, p *prog) error {
	rt := p.rt
	const size, chunk = 1 << 20, 128 << 10
	src, err := rt.SegmentCreate(ctx, 7, size, nil)
	if err != nil {
		return err
	}
	dst, err := rt.SegmentCreate(ctx, 17, int64(p.n*chunk+p.n*64*8), nil)
	if err != nil {
		return err
	}
	val := func(r, i int) byte { return byte(r*7 + i*3 + i>>10) }
	for i := range src.Bytes() {
		src.Bytes()[i] = val(p.me, i)
	}
	if err := rt.Barrier(ctx, nil); err != nil {
		return err
	}
	small := int64(p.n * chunk)
	for r := 0; r < p.n; r++ {
		off := int64(1000*r + 8)
		if err := rt.Read(ctx, 2, r, loc(7, off), loc(17, int64(r*chunk)), chunk); err != nil {
			return err
		}
		for k := int64(0); k < 8; k++ { // 8 reads of 8 B from scattered places
			if err := rt.Read(ctx, 2, r, loc(7, k*4099), loc(17, small+int64(r)*64+k*8), 8); err != nil {
				return err
			}
		}
	}
	if err := rt.Wait(ctx, 2); err != nil {
		return err
	}
	d := dst.Bytes()
	for r := 0; r < p.n; r++ {
		off := 1000*r + 8
		for i := 0; i < chunk; i++ {
			if got, want := d[r*chunk+i], val(r, off+i); got != want {
				return fmt.Errorf("large read from rank %d: byte %d is %d, want %d", r, i, got, want)
			}
		}
		for k := 0; k < 8; k++ {
			for j := 0; j < 8; j++ {
				if got, want := d[int(small)+r*64+k*8+j], val(r, k*4099+j); got != want {
					return fmt.Errorf("small read %d from rank %d: byte %d is %d, want %d", k, r, j, got, want)
				}
			}
		}
	}
	return nil
}
