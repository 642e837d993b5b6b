package transporttest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/transport"
)

// Cases about contexts, blocking and Close.

// Rule: Send never blocks past ctx; with a context already done it returns
// at once, with nil or the context's error.
func testCanceledContext(t *testing.T, f Factory) {
	ts, _ := startAll(t, f, 2)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	h := transport.Header{Type: transport.FramePassive}
	done := make(chan error, 1)
	go func() { done <- ts[0].Send(ctx, 1, &h, []byte("x")) }()
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("Send with a canceled context: got %v, want nil or context.Canceled", err)
		}
	case <-time.After(Timeout):
		t.Fatalf("Send with a canceled context still blocked after %v", Timeout)
	}
}

// Rule: Send never blocks past ctx. The receiver stalls in HandleFrame, so
// the sender must eventually block (transports have bounded buffers) and
// return the context's error; after the receiver resumes, every frame that
// Send accepted arrives in order, unless the connection was failed (with
// PeerDown) because a frame was cut short.
func testBlockedReceiver(t *testing.T, f Factory) {
	const (
		frameSize = 1 << 20
		maxFrames = 128 // 128 MiB: more than any sane transport buffers
		sendWait  = time.Second
	)
	ts := newTransports(t, f, 2)
	release := make(chan struct{})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unblock) // runs before the factory's cleanup closes the transports
	rec := NewRecorder()
	var blocked atomic.Bool
	stall := handlerFunc{
		frame: func(from transport.Proc, h *transport.Header, p transport.Payload) error {
			err := rec.HandleFrame(from, h, p)
			if blocked.CompareAndSwap(false, true) {
				<-release
			}
			return err
		},
		down: rec.PeerDown,
	}
	sender := NewRecorder()
	if err := ts[0].Start(sender); err != nil {
		t.Fatal(err)
	}
	if err := ts[1].Start(stall); err != nil {
		t.Fatal(err)
	}
	accepted := 0
	var lastErr error
	for seq := range uint64(maxFrames) {
		ctx, cancel := context.WithTimeout(t.Context(), sendWait)
		h := transport.Header{Type: transport.FrameWrite, Seq: seq}
		start := time.Now()
		err := ts[0].Send(ctx, 1, &h, payloadFor(0, seq, frameSize))
		elapsed := time.Since(start)
		cancel()
		if elapsed > sendWait+Timeout {
			t.Fatalf("Send Seq %d took %v with a %v context", seq, elapsed, sendWait)
		}
		if err != nil {
			lastErr = err
			break
		}
		accepted++
	}
	switch {
	case lastErr == nil:
		t.Errorf("%d Sends of %d bytes all succeeded while the receiver was stalled: buffering looks unbounded", maxFrames, frameSize)
	case !errors.Is(lastErr, context.DeadlineExceeded):
		t.Errorf("Send to a stalled receiver after %d frames: got %v, want an error wrapping context.DeadlineExceeded", accepted, lastErr)
	}
	unblock()
	ctx := timeoutCtx(t)
	err := rec.Wait(ctx, func(frames []Frame, downs []Down) bool {
		return len(frames) >= accepted || len(downs) > 0
	})
	if err != nil {
		t.Fatalf("after release, of %d accepted frames: %v", accepted, err)
	}
	frames := rec.Frames()
	for i, fr := range frames {
		if fr.Header.Seq != uint64(i) {
			t.Fatalf("after release, frame %d has Seq %d", i, fr.Header.Seq)
		}
		if !bytes.Equal(fr.Payload, payloadFor(0, uint64(i), frameSize)) {
			t.Fatalf("frame Seq %d: payload corrupted", i)
		}
	}
	if downs := rec.Downs(); len(frames) < accepted && len(downs) == 0 {
		t.Errorf("%d of %d accepted frames arrived and no PeerDown reported the loss", len(frames), accepted)
	}
}

// Rule: after Close, Send returns ErrClosed; Close is idempotent.
func testSendAfterClose(t *testing.T, f Factory) {
	ts, _ := startAll(t, f, 2)
	ctx := timeoutCtx(t)
	h := transport.Header{Type: transport.FramePassive}
	if err := ts[0].Send(ctx, 1, &h, []byte("before")); err != nil {
		t.Fatalf("Send before Close: %v", err)
	}
	if err := ts[0].Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := ts[0].Close(); err != nil {
		t.Errorf("second Close: %v, want nil (Close is idempotent)", err)
	}
	for _, to := range []transport.Proc{1, 0} {
		h := transport.Header{Type: transport.FramePassive}
		if err := ts[0].Send(ctx, to, &h, []byte("after")); !errors.Is(err, transport.ErrClosed) {
			t.Errorf("Send to %d after Close: got %v, want ErrClosed", to, err)
		}
	}
}

// Rule: when a process closes, every peer it was connected to gets
// PeerDown for it once, within a bounded time; later Sends to it fail with
// ErrPeerDown; other connections are unaffected; the closed transport calls
// its handler no more once Close has returned.
func testCloseNotifiesPeers(t *testing.T, f Factory) {
	const n = 3
	ts, recs := startAll(t, f, n)
	ctx := timeoutCtx(t)
	// Connect every pair both ways.
	for from := range n {
		for to := range n {
			if from == to {
				continue
			}
			h := transport.Header{Type: transport.FramePassive, Seq: uint64(from)}
			if err := ts[from].Send(ctx, transport.Proc(to), &h, []byte("hello")); err != nil {
				t.Fatalf("Send %d->%d: %v", from, to, err)
			}
		}
	}
	for i, r := range recs {
		if _, err := r.WaitFrames(ctx, n-1); err != nil {
			t.Fatalf("proc %d: %v", i, err)
		}
	}
	const victim = transport.Proc(n - 1)
	if err := ts[victim].Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	framesAtClose, downsAtClose := len(recs[victim].Frames()), len(recs[victim].Downs())

	for p := transport.Proc(0); p < victim; p++ {
		d, err := recs[p].WaitDown(ctx, victim)
		if err != nil {
			t.Fatalf("proc %d: %v", p, err)
		}
		if d.Err == nil {
			t.Errorf("proc %d: PeerDown(%d) with a nil error", p, victim)
		}
		h := transport.Header{Type: transport.FramePassive}
		if err := ts[p].Send(ctx, victim, &h, []byte("anyone?")); !errors.Is(err, transport.ErrPeerDown) {
			t.Errorf("proc %d: Send to closed proc %d: got %v, want an error wrapping ErrPeerDown", p, victim, err)
		}
	}
	// The surviving pair still talks.
	h := transport.Header{Type: transport.FramePassive, Seq: 42}
	if err := ts[0].Send(ctx, 1, &h, []byte("still up")); err != nil {
		t.Fatalf("Send 0->1 after proc %d closed: %v", victim, err)
	}
	if err := recs[1].Wait(ctx, func(frames []Frame, _ []Down) bool {
		return len(frames) > 0 && frames[len(frames)-1].Header.Seq == 42
	}); err != nil {
		t.Fatalf("0->1 after proc %d closed: %v", victim, err)
	}
	for p := transport.Proc(0); p < victim; p++ {
		count := 0
		for _, d := range recs[p].Downs() {
			if d.Peer != victim {
				t.Errorf("proc %d: unexpected PeerDown(%d): %v", p, d.Peer, d.Err)
			} else {
				count++
			}
		}
		if count != 1 {
			t.Errorf("proc %d: PeerDown(%d) called %d times, want once", p, victim, count)
		}
	}
	if fr, dn := len(recs[victim].Frames()), len(recs[victim].Downs()); fr != framesAtClose || dn != downsAtClose {
		t.Errorf("closed proc %d: handler called after Close returned (frames %d->%d, downs %d->%d)",
			victim, framesAtClose, fr, downsAtClose, dn)
	}
}

// Rule: Close while frames flow: senders to the closed process stop with
// ErrPeerDown instead of hanging, the closed process's own sender stops with
// ErrClosed, and Close returns.
func testCloseUnderLoad(t *testing.T, f Factory) {
	const n = 3
	ts, recs := startAll(t, f, n)
	ctx := timeoutCtx(t)
	results := make(chan string, n)
	var wg sync.WaitGroup
	loop := func(from, to transport.Proc, want error) {
		defer wg.Done()
		for seq := uint64(0); ; seq++ {
			h := transport.Header{Type: transport.FrameWrite, Seq: seq}
			err := ts[from].Send(ctx, to, &h, payloadFor(from, seq, 4096))
			if err == nil {
				continue
			}
			if !errors.Is(err, want) {
				results <- fmt.Sprintf("sender %d->%d stopped after %d frames with %v, want an error wrapping %v", from, to, seq, err, want)
			}
			return
		}
	}
	wg.Add(3)
	go loop(1, 0, transport.ErrPeerDown)
	go loop(2, 0, transport.ErrPeerDown)
	go loop(0, 1, transport.ErrClosed)
	if err := recs[0].Wait(ctx, func(frames []Frame, _ []Down) bool { return len(frames) >= 50 }); err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- ts[0].Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-ctx.Done():
		t.Fatalf("Close under load did not return within %v", Timeout)
	}
	wg.Wait()
	close(results)
	for s := range results {
		t.Error(s)
	}
	for _, p := range []transport.Proc{1, 2} {
		if _, err := recs[p].WaitDown(ctx, 0); err != nil {
			t.Errorf("proc %d: %v", p, err)
		}
	}
}
