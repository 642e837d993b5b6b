package tcp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/transport"
	"github.com/gaspigo/gaspigo/transport/transporttest"
)

var orderSizes = []int{0, 1, 7, 48, 100, 4095, 4096, 65535, 65536, 65537, 300_000, 1 << 20, 4 << 20}

// Rule (transport/doc.go): frames from one process to another arrive in
// order, each once, intact, with Src set to the authenticated sender and
// the other header fields kept; a payload the handler does not read is
// discarded without disturbing the next frame; a handler error drops the
// frame but keeps the connection. Every pair sends both ways at once.
func TestOrdering(t *testing.T) {
	for _, n := range []int{2, 4} {
		for _, spin := range []time.Duration{0, 50 * time.Microsecond} {
			if spin > 0 && n > 2 {
				continue
			}
			t.Run(fmt.Sprintf("procs=%d/spin=%v", n, spin), func(t *testing.T) {
				testOrdering(t, n, spin, testTLS)
			})
		}
	}
	if !testTLS {
		// Frames inside TLS records: small ones coalesced, large ones split.
		t.Run("procs=2/tls", func(t *testing.T) { testOrdering(t, 2, 0, true) })
	}
}

func testOrdering(t *testing.T, n int, spin time.Duration, tls bool) {
	perPair := 2 * len(orderSizes)
	if n > 2 {
		perPair = len(orderSizes) + 3
	}
	sizeOf := func(src transport.Proc, seq uint64) int {
		return orderSizes[(int(seq)*5+int(src))%len(orderSizes)]
	}
	ts := newCluster(t, n, func(c *Config) { c.PollSpin, c.TLS = spin, tls })
	ctx := transporttest.Context(t, wait)
	var errs transporttest.Errors
	var remaining atomic.Int64
	remaining.Store(int64(n * (n - 1) * perPair))
	allDone := make(chan struct{})
	rejected := errors.New("rejected on purpose")
	hs := make([]*handler, n)
	for i := range n {
		next := make([]uint64, n) // per sender; HandleFrame is serial per sender
		hs[i] = newHandler(func(from transport.Proc, h *transport.Header, p transport.Payload) error {
			defer func() {
				if remaining.Add(-1) == 0 {
					close(allDone)
				}
			}()
			if h.Src != from || int(from) >= n || from == transport.Proc(i) {
				errs.Add("proc %d: frame from %d with Src %d", i, from, h.Src)
				return p.Discard()
			}
			if h.Seq != next[from] {
				errs.Add("proc %d: from %d got Seq %d, want %d", i, from, h.Seq, next[from])
			}
			next[from] = h.Seq + 1
			want := sizeOf(from, h.Seq)
			if int(h.Len) != want || p.Len() != want || h.Type != transport.FrameWrite ||
				h.Off != h.Seq*3 || h.A != uint64(i) || h.B != ^h.Seq || h.Epoch != 7 || h.Seg != 9 {
				errs.Add("proc %d: from %d Seq %d: header %+v, payload len %d, want len %d", i, from, h.Seq, *h, p.Len(), want)
				return p.Discard()
			}
			switch h.Seq % 5 {
			case 2:
				return nil // not read: the transport discards it
			case 4:
				if err := p.Discard(); err != nil {
					errs.Add("proc %d: Discard: %v", i, err)
				}
				return rejected
			}
			dst := make([]byte, want)
			if err := p.ReadInto(dst); err != nil {
				errs.Add("proc %d: from %d Seq %d: ReadInto: %v", i, from, h.Seq, err)
			} else if !bytes.Equal(dst, payloadFor(from, h.Seq, want)) {
				errs.Add("proc %d: from %d Seq %d: payload corrupted", i, from, h.Seq)
			}
			if err := p.ReadInto(dst); err == nil {
				errs.Add("proc %d: a second ReadInto of one payload succeeded", i)
			}
			return nil
		})
		if err := ts[i].Start(hs[i]); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for from := range n {
		for to := range n {
			if from == to {
				continue
			}
			wg.Go(func() {
				for seq := range uint64(perPair) {
					h := transport.Header{Type: transport.FrameWrite, Seg: 9, Epoch: 7, Src: 12345, Seq: seq, Off: seq * 3, A: uint64(to), B: ^seq}
					if err := ts[from].Send(ctx, transport.Proc(to), &h, payloadFor(transport.Proc(from), seq, sizeOf(transport.Proc(from), seq))); err != nil {
						errs.Add("Send %d->%d Seq %d: %v", from, to, seq, err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	select {
	case <-allDone:
	case <-ctx.Done():
		t.Fatalf("%d frames missing after %v", remaining.Load(), wait)
	}
	errs.Report(t)
	for i, h := range hs {
		noDowns(t, h)
		st := ts[i].Stats()
		var wantBytes uint64
		rejects := 0
		for from := range n {
			if from == i {
				continue
			}
			for seq := range uint64(perPair) {
				wantBytes += uint64(sizeOf(transport.Proc(from), seq))
				if seq%5 == 4 {
					rejects++
				}
			}
		}
		want := uint64((n - 1) * perPair)
		if st.FramesIn != want || st.FramesOut != want || st.BytesIn != wantBytes || st.HandlerErrors != uint64(rejects) {
			t.Errorf("proc %d stats %+v; want FramesIn=FramesOut=%d BytesIn=%d HandlerErrors=%d", i, st, want, wantBytes, rejects)
		}
		if st.HandshakesRefused != 0 || st.BadFrames != 0 || st.PeersDown != 0 {
			t.Errorf("proc %d stats %+v: refusals, bad frames or downs in a clean run", i, st)
		}
	}
}

// Rule: Send is safe from many goroutines; frames never interleave on the
// wire and each goroutine's frames arrive in its order.
func TestConcurrentSenders(t *testing.T) {
	const (
		senders = 8
		frames  = 60
	)
	sizes := []int{0, 5, 48, 1000, 16 << 10, 70_000}
	ts := newCluster(t, 2, nil)
	ctx := transporttest.Context(t, wait)
	var errs transporttest.Errors
	var remaining atomic.Int64
	remaining.Store(2 * senders * frames)
	done := make(chan struct{})
	for i := range ts {
		next := make([]uint64, senders)
		h := newHandler(func(from transport.Proc, h *transport.Header, p transport.Payload) error {
			defer func() {
				if remaining.Add(-1) == 0 {
					close(done)
				}
			}()
			g := h.A
			if g >= senders {
				errs.Add("proc %d: sender id %d out of range", i, g)
				return p.Discard()
			}
			if h.Seq != next[g] {
				errs.Add("proc %d: goroutine %d: Seq %d, want %d", i, g, h.Seq, next[g])
			}
			next[g] = h.Seq + 1
			dst := make([]byte, p.Len())
			if err := p.ReadInto(dst); err != nil {
				errs.Add("proc %d: ReadInto: %v", i, err)
			} else if !bytes.Equal(dst, payloadFor(transport.Proc(g), h.Seq, len(dst))) {
				errs.Add("proc %d: goroutine %d Seq %d: payload corrupted (interleaved frames?)", i, g, h.Seq)
			}
			return nil
		})
		if err := ts[i].Start(h); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for i := range ts {
		for g := range uint64(senders) {
			wg.Go(func() {
				for seq := range uint64(frames) {
					size := sizes[(seq+g)%uint64(len(sizes))]
					h := transport.Header{Type: transport.FramePassive, A: g, Seq: seq}
					if err := ts[i].Send(ctx, transport.Proc(1-i), &h, payloadFor(transport.Proc(g), seq, size)); err != nil {
						errs.Add("Send from %d goroutine %d: %v", i, g, err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatalf("%d frames missing after %v", remaining.Load(), wait)
	}
	errs.Report(t)
}

// Rule: a receiver reads each payload straight into its destination (here
// a 16 MiB "segment" written piecewise, in shuffled order, by frames of
// 1 B..4 MiB) and the destination ends up equal to the source.
func TestPayloadIntoSegment(t *testing.T) {
	const segSize = 16 << 20
	src := make([]byte, segSize)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < segSize; i += 8 {
		binary.LittleEndian.PutUint64(src[i:], rng.Uint64())
	}
	type piece struct{ off, len int }
	var pieces []piece
	cycle := []int{1, 4095, 65536, 1 << 20, 3, 4 << 20, 300_000, 65537, 48}
	for off, i := 0, 0; off < segSize; i++ {
		l := min(cycle[i%len(cycle)], segSize-off)
		pieces = append(pieces, piece{off, l})
		off += l
	}
	rng.Shuffle(len(pieces), func(i, j int) { pieces[i], pieces[j] = pieces[j], pieces[i] })

	ts := newCluster(t, 2, nil)
	ctx := transporttest.Context(t, wait)
	seg := make([]byte, segSize)
	var errs transporttest.Errors
	var got atomic.Int64
	done := make(chan struct{})
	h1 := newHandler(func(_ transport.Proc, h *transport.Header, p transport.Payload) error {
		end := h.Off + uint64(h.Len)
		if end > segSize {
			errs.Add("frame writes [%d,%d) outside the segment", h.Off, end)
			return p.Discard()
		}
		if err := p.ReadInto(seg[h.Off:end]); err != nil {
			errs.Add("ReadInto: %v", err)
		}
		if got.Add(1) == int64(len(pieces)) {
			close(done)
		}
		return nil
	})
	if err := ts[0].Start(newHandler(nil)); err != nil {
		t.Fatal(err)
	}
	if err := ts[1].Start(h1); err != nil {
		t.Fatal(err)
	}
	for i, pc := range pieces {
		h := transport.Header{Type: transport.FrameWrite, Seq: uint64(i), Off: uint64(pc.off)}
		if err := ts[0].Send(ctx, 1, &h, src[pc.off:pc.off+pc.len]); err != nil {
			t.Fatalf("Send piece %d: %v", i, err)
		}
	}
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatalf("%d of %d pieces arrived", got.Load(), len(pieces))
	}
	errs.Report(t)
	if !bytes.Equal(seg, src) {
		t.Fatal("segment differs from the source")
	}
}
