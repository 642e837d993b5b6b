package transporttest

import (
	"bytes"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/gaspigo/gaspigo/transport"
)

// Cases about frames: their fields, payloads, order and refusals.

// Rule: Self returns this process's ID.
func testSelf(t *testing.T, f Factory) {
	ts := newTransports(t, f, 3)
	for i, tr := range ts {
		if got := tr.Self(); got != transport.Proc(i) {
			t.Errorf("transport %d: Self() = %d", i, got)
		}
	}
}

// Rule: header fields arrive intact; Send sets Src to the sender and Len
// from the payload, whatever the caller put there.
func testHeaderFields(t *testing.T, f Factory) {
	ts, recs := startAll(t, f, 2)
	ctx := timeoutCtx(t)
	want := transport.Header{
		Type:  transport.FrameWrite,
		Flags: transport.FlagNotify | transport.FlagAck,
		Seg:   0xBEEF,
		Epoch: 0xDEADBEEF,
		Seq:   1<<40 + 3,
		Off:   1<<50 + 5,
		A:     ^uint64(0),
		B:     12345,
	}
	h := want
	h.Src = 77   // wrong on purpose: Send must overwrite it
	h.Len = 9999 // likewise
	payload := bytes.Clone(payloadFor(0, 1, 300))
	if err := ts[0].Send(ctx, 1, &h, payload); err != nil {
		t.Fatalf("Send 0->1: %v", err)
	}
	empty := transport.Header{Type: transport.FramePassive, Seq: 2, Len: 5}
	if err := ts[1].Send(ctx, 0, &empty, nil); err != nil {
		t.Fatalf("Send 1->0 with no payload: %v", err)
	}

	got, err := recs[1].WaitFrames(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	want.Src, want.Len = 0, 300
	if got[0].From != 0 {
		t.Errorf("HandleFrame from = %d, want 0", got[0].From)
	}
	if got[0].Header != want {
		t.Errorf("header\n got %+v\nwant %+v", got[0].Header, want)
	}
	if !bytes.Equal(got[0].Payload, payload) {
		t.Errorf("payload differs (len %d, want %d)", len(got[0].Payload), len(payload))
	}

	got, err = recs[0].WaitFrames(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got[0].From != 1 || got[0].Header.Src != 1 || got[0].Header.Len != 0 || len(got[0].Payload) != 0 {
		t.Errorf("empty frame arrived as from=%d header %+v with %d payload bytes; want from=1 Src=1 Len=0 and no payload",
			got[0].From, got[0].Header, len(got[0].Payload))
	}
	if got[0].Header.Type != transport.FramePassive || got[0].Header.Seq != 2 {
		t.Errorf("empty frame header %+v: Type or Seq changed", got[0].Header)
	}
	noDowns(t, recs)
}

// Rule: Send returns once the payload may be reused.
func testPayloadReuse(t *testing.T, f Factory) {
	ts, recs := startAll(t, f, 2)
	ctx := timeoutCtx(t)
	const frames = 16
	buf := make([]byte, 64<<10)
	for seq := range uint64(frames) {
		copy(buf, payloadFor(0, seq, len(buf)))
		h := transport.Header{Type: transport.FrameWrite, Seq: seq}
		if err := ts[0].Send(ctx, 1, &h, buf); err != nil {
			t.Fatalf("Send seq %d: %v", seq, err)
		}
		clear(buf) // the caller reuses the slice at once
	}
	got, err := recs[1].WaitFrames(ctx, frames)
	if err != nil {
		t.Fatal(err)
	}
	for i, fr := range got {
		if fr.Header.Seq != uint64(i) {
			t.Fatalf("frame %d has Seq %d", i, fr.Header.Seq)
		}
		if !bytes.Equal(fr.Payload, payloadFor(0, uint64(i), len(buf))) {
			t.Errorf("frame %d: payload changed after Send returned (the caller's later writes leaked in)", i)
		}
	}
}

// Rule: a receiver reads the payload straight into its destination, or
// discards it, and later frames are unaffected.
func testReadInto(t *testing.T, f Factory) {
	ts := newTransports(t, f, 2)
	ctx := timeoutCtx(t)
	const size = 256 << 10
	seg := make([]byte, size)
	var errs Errors
	done := make(chan struct{})
	var got atomic.Int64
	h1 := handlerFunc{
		frame: func(from transport.Proc, h *transport.Header, p transport.Payload) error {
			if p.Len() != int(h.Len) {
				errs.Add("Payload.Len() = %d, header Len = %d", p.Len(), h.Len)
			}
			if h.Flags&flagDiscard != 0 {
				if err := p.Discard(); err != nil {
					errs.Add("Discard: %v", err)
				}
			} else {
				end := h.Off + uint64(h.Len)
				if end > size {
					errs.Add("frame writes [%d,%d) past the %d-byte destination", h.Off, end, size)
					return p.Discard()
				}
				if err := p.ReadInto(seg[h.Off:end]); err != nil {
					errs.Add("ReadInto: %v", err)
				}
			}
			if got.Add(1) == 9 {
				close(done)
			}
			return nil
		},
	}
	if err := ts[0].Start(handlerFunc{}); err != nil {
		t.Fatal(err)
	}
	if err := ts[1].Start(h1); err != nil {
		t.Fatal(err)
	}
	src := payloadFor(0, 9, size)
	junk := bytes.Repeat([]byte{0xAA}, 4096)
	// Eight pieces of 32 KiB written out of order, with a discarded frame
	// in the middle; 9 frames in all.
	order := []int{3, 0, 7, 1, -1, 6, 2, 5, 4}
	for i, piece := range order {
		h := transport.Header{Type: transport.FrameWrite, Seq: uint64(i)}
		body := junk
		if piece < 0 {
			h.Flags = flagDiscard
		} else {
			h.Off = uint64(piece * size / 8)
			body = src[h.Off : h.Off+size/8]
		}
		if err := ts[0].Send(ctx, 1, &h, body); err != nil {
			t.Fatalf("Send %d: %v", i, err)
		}
	}
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatalf("only %d of 9 frames arrived within %v", got.Load(), Timeout)
	}
	errs.Report(t)
	if !bytes.Equal(seg, src) {
		t.Error("destination buffer differs from the data sent")
	}
}

const flagDiscard uint8 = 1 << 7

type handlerFunc struct {
	frame func(from transport.Proc, h *transport.Header, p transport.Payload) error
	down  func(peer transport.Proc, err error)
}

func (h handlerFunc) HandleFrame(from transport.Proc, hd *transport.Header, p transport.Payload) error {
	if h.frame == nil {
		return p.Discard()
	}
	return h.frame(from, hd, p)
}

func (h handlerFunc) PeerDown(peer transport.Proc, err error) {
	if h.down != nil {
		h.down(peer, err)
	}
}

var fifoSizes = []int{0, 1, 3, 48, 1000, 4096, 65536, 65537, 300_000, 1 << 20}

// Rule: frames from one process to another arrive in order, each once,
// intact; HandleFrame is serial for any one sender. Several senders send to
// one receiver at once, while the receiver sends back.
func testFIFO(t *testing.T, f Factory) {
	const (
		n        = 4
		perPeer  = 30 // frames from each of procs 1..n-1 to proc 0
		backward = 12 // frames from proc 0 to each of procs 1..n-1
	)
	ts := newTransports(t, f, n)
	ctx := timeoutCtx(t)
	sizeOf := func(src transport.Proc, seq uint64) int {
		return fifoSizes[(int(seq)*7+int(src))%len(fifoSizes)]
	}

	var errs Errors
	type peerState struct {
		next     uint64
		inFlight atomic.Int32
	}
	var remaining atomic.Int64
	remaining.Store((n-1)*perPeer + (n-1)*backward)
	allDone := make(chan struct{})
	for i := range n {
		states := make([]peerState, n)
		buf := make([]byte, 1<<20)
		var bufMu sync.Mutex // HandleFrame may run concurrently across senders
		h := handlerFunc{
			frame: func(from transport.Proc, h *transport.Header, p transport.Payload) error {
				if int(from) >= n {
					errs.Add("proc %d: frame from unknown proc %d", i, from)
					return p.Discard()
				}
				st := &states[from]
				if st.inFlight.Add(1) != 1 {
					errs.Add("proc %d: HandleFrame called concurrently for sender %d", i, from)
				}
				defer st.inFlight.Add(-1)
				if h.Src != from {
					errs.Add("proc %d: frame from %d has Src %d", i, from, h.Src)
				}
				if h.Seq != st.next {
					errs.Add("proc %d: from %d got Seq %d, want %d (order broken or frame lost/duplicated)", i, from, h.Seq, st.next)
				}
				st.next = h.Seq + 1
				want := sizeOf(from, h.Seq)
				if int(h.Len) != want || p.Len() != want {
					errs.Add("proc %d: from %d Seq %d: Len %d / Payload.Len %d, want %d", i, from, h.Seq, h.Len, p.Len(), want)
					return p.Discard()
				}
				bufMu.Lock()
				defer bufMu.Unlock()
				if err := p.ReadInto(buf[:want]); err != nil {
					errs.Add("proc %d: from %d Seq %d: ReadInto: %v", i, from, h.Seq, err)
				} else if !bytes.Equal(buf[:want], payloadFor(from, h.Seq, want)) {
					errs.Add("proc %d: from %d Seq %d: payload corrupted", i, from, h.Seq)
				}
				if remaining.Add(-1) == 0 {
					close(allDone)
				}
				return nil
			},
			down: func(peer transport.Proc, err error) {
				errs.Add("proc %d: unexpected PeerDown(%d): %v", i, peer, err)
			},
		}
		if err := ts[i].Start(h); err != nil {
			t.Fatal(err)
		}
	}

	var wg sync.WaitGroup
	send := func(from, to transport.Proc, count int) {
		defer wg.Done()
		for seq := range uint64(count) {
			h := transport.Header{Type: transport.FrameWrite, Seq: seq}
			if err := ts[from].Send(ctx, to, &h, payloadFor(from, seq, sizeOf(from, seq))); err != nil {
				errs.Add("Send %d->%d Seq %d: %v", from, to, seq, err)
				return
			}
		}
	}
	for p := transport.Proc(1); p < n; p++ {
		wg.Add(2)
		go send(p, 0, perPeer)
		go send(0, p, backward)
	}
	wg.Wait()
	select {
	case <-allDone:
	case <-ctx.Done():
		t.Errorf("%d frames still missing after %v", remaining.Load(), Timeout)
	}
	errs.Report(t)
}

// Rule: frames from one process to another arrive in order, each once,
// also when both ends of every pair send their first frames at the same
// time (a transport that connects on first use sees both ends dial each
// other at once and keeps one connection); nobody is reported down.
func testFirstSendsCross(t *testing.T, f Factory) {
	const (
		n       = 6
		perPair = 20 // frames each way between every pair
	)
	ts := newTransports(t, f, n)
	ctx := timeoutCtx(t)
	var errs Errors
	var remaining atomic.Int64
	remaining.Store(n * (n - 1) * perPair)
	allDone := make(chan struct{})
	for i := range n {
		next := make([]uint64, n) // per sender; HandleFrame is serial per sender
		h := handlerFunc{
			frame: func(from transport.Proc, h *transport.Header, p transport.Payload) error {
				if int(from) >= n || int(from) == i {
					errs.Add("proc %d: frame from proc %d", i, from)
					return p.Discard()
				}
				if h.Seq != next[from] {
					errs.Add("proc %d: from %d got Seq %d, want %d (order broken or frame lost/duplicated)", i, from, h.Seq, next[from])
				}
				next[from] = h.Seq + 1
				buf := make([]byte, p.Len())
				if err := p.ReadInto(buf); err != nil {
					errs.Add("proc %d: from %d Seq %d: ReadInto: %v", i, from, h.Seq, err)
				} else if !bytes.Equal(buf, payloadFor(from, h.Seq, len(buf))) {
					errs.Add("proc %d: from %d Seq %d: payload corrupted", i, from, h.Seq)
				}
				if remaining.Add(-1) == 0 {
					close(allDone)
				}
				return nil
			},
			down: func(peer transport.Proc, err error) {
				errs.Add("proc %d: unexpected PeerDown(%d): %v", i, peer, err)
			},
		}
		if err := ts[i].Start(h); err != nil {
			t.Fatal(err)
		}
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	for from := range n {
		for to := range n {
			if from == to {
				continue
			}
			wg.Go(func() {
				<-start
				for seq := range uint64(perPair) {
					h := transport.Header{Type: transport.FramePassive, Seq: seq}
					if err := ts[from].Send(ctx, transport.Proc(to), &h, payloadFor(transport.Proc(from), seq, 64+int(seq))); err != nil {
						errs.Add("Send %d->%d Seq %d: %v", from, to, seq, err)
						return
					}
				}
			})
		}
	}
	close(start)
	wg.Wait()
	select {
	case <-allDone:
	case <-ctx.Done():
		t.Errorf("%d frames still missing after %v", remaining.Load(), Timeout)
	}
	errs.Report(t)
}

// Rule: an error returned by HandleFrame drops that frame but the
// connection survives.
func testHandlerError(t *testing.T, f Factory) {
	ts := newTransports(t, f, 2)
	ctx := timeoutCtx(t)
	rejecting := errors.New("transporttest: rejected on purpose")
	rec := &Recorder{Reject: func(_ transport.Proc, h *transport.Header) error {
		if h.Seq%2 == 0 {
			return rejecting
		}
		return nil
	}}
	back := NewRecorder()
	if err := ts[0].Start(back); err != nil {
		t.Fatal(err)
	}
	if err := ts[1].Start(rec); err != nil {
		t.Fatal(err)
	}
	const frames = 20
	for seq := range uint64(frames) {
		h := transport.Header{Type: transport.FramePassive, Seq: seq}
		if err := ts[0].Send(ctx, 1, &h, payloadFor(0, seq, 100)); err != nil {
			t.Fatalf("Send Seq %d after rejected frames: %v", seq, err)
		}
	}
	got, err := rec.WaitFrames(ctx, frames)
	if err != nil {
		t.Fatal(err)
	}
	for i, fr := range got {
		if fr.Header.Seq != uint64(i) {
			t.Errorf("frame %d has Seq %d", i, fr.Header.Seq)
		}
	}
	h := transport.Header{Type: transport.FramePassive, Seq: 99}
	if err := ts[1].Send(ctx, 0, &h, []byte("still here")); err != nil {
		t.Fatalf("reply after rejected frames: %v", err)
	}
	if _, err := back.WaitFrames(ctx, 1); err != nil {
		t.Fatal(err)
	}
	noDowns(t, []*Recorder{back, rec})
}

// Rule: Send rejects a payload above MaxPayload with ErrTooLarge, and the
// connection stays usable.
func testTooLarge(t *testing.T, f Factory) {
	ts, recs := startAll(t, f, 2)
	ctx := timeoutCtx(t)
	big := make([]byte, transport.MaxPayload+1)
	h := transport.Header{Type: transport.FrameWrite}
	if err := ts[0].Send(ctx, 1, &h, big); !errors.Is(err, transport.ErrTooLarge) {
		t.Fatalf("Send of %d bytes: got %v, want ErrTooLarge", len(big), err)
	}
	h = transport.Header{Type: transport.FrameWrite, Seq: 1}
	if err := ts[0].Send(ctx, 1, &h, []byte("small")); err != nil {
		t.Fatalf("Send after ErrTooLarge: %v", err)
	}
	got, err := recs[1].WaitFrames(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got[0].Header.Seq != 1 || got[0].Header.Len != 5 || string(got[0].Payload) != "small" {
		t.Errorf("got frame %+v %q, want Seq 1 \"small\"", got[0].Header, got[0].Payload)
	}
	noDowns(t, recs)
}

// Rule: Send to a Proc the transport has no address for returns
// ErrUnknownPeer.
func testUnknownPeer(t *testing.T, f Factory) {
	ts, _ := startAll(t, f, 2)
	ctx := timeoutCtx(t)
	for _, to := range []transport.Proc{2, 1000, transport.NoProc} {
		h := transport.Header{Type: transport.FramePassive}
		if err := ts[0].Send(ctx, to, &h, nil); !errors.Is(err, transport.ErrUnknownPeer) {
			t.Errorf("Send to proc %d of 2: got %v, want ErrUnknownPeer", to, err)
		}
	}
}
