package shm

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gaspigo/gaspigo/transport"
)

// Send writes one frame into the ring to peer to. A frame that fits the
// ring is written whole once there is room for it, so a Send that gives
// up on ctx has written nothing. A larger frame streams through the ring;
// if ctx ends in the middle of one, the rest is copied and written in the
// background (the frame is not cut: that would turn a timeout into a
// failure), and Send returns ctx's error. The first Send to a peer
// connects to it; if that fails, the error wraps ErrNoPath.
func (t *Transport) Send(ctx context.Context, to transport.Proc, h *transport.Header, payload []byte) error {
	if t.isClosed() {
		return transport.ErrClosed
	}
	if len(payload) > transport.MaxPayload {
		return fmt.Errorf("%w: %d bytes, cap %d", transport.ErrTooLarge, len(payload), transport.MaxPayload)
	}
	p := t.peer(to)
	if p == nil {
		return fmt.Errorf("%w: proc %d", transport.ErrUnknownPeer, to)
	}
	select {
	case p.sem <- struct{}{}:
	default:
		select {
		case p.sem <- struct{}{}:
		case <-ctx.Done():
			return fmt.Errorf("shm: send to proc %d: waiting for the ring: %w", to, ctx.Err())
		case <-t.closing:
			return transport.ErrClosed
		}
	}
	held := true
	defer func() {
		if held {
			<-p.sem
		}
	}()
	if err := p.downErr(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("shm: send to proc %d: %w", to, err)
	}
	if p.out == nil {
		if err := t.dial(p); err != nil {
			return t.dialFailed(p, err)
		}
	}
	if err := t.hold(ctx, p.ctx, len(payload), true); err != nil {
		if derr := p.downErr(); derr != nil {
			return derr
		}
		return fmt.Errorf("shm: send to proc %d: %w", to, err)
	}
	h.Len, h.Src = uint32(len(payload)), t.self
	h.Encode(p.hdr[:])
	o := p.out
	need := uint64(transport.HeaderSize + len(payload))
	stop := func() error {
		if err := p.downErr(); err != nil {
			return err
		}
		return ctx.Err()
	}
	if need <= o.r.size() {
		if err := t.room(ctx, o, need, stop); err != nil {
			return t.sendErr(to, err)
		}
		o.r.put(o.tail, p.hdr[:])
		o.r.put(o.tail+transport.HeaderSize, payload)
		o.publish(need)
		t.sent(len(payload))
		return nil
	}
	// Stream: the header, then the payload as room appears.
	parts := [2][]byte{p.hdr[:], payload}
	for i, b := range parts {
		for len(b) > 0 {
			want := min(uint64(len(b)), o.r.size()/4)
			if err := t.room(ctx, o, want, stop); err != nil {
				if ctx.Err() == nil || p.isDown() {
					return t.sendErr(to, err)
				}
				// Part of the frame is in the ring: finish it in the
				// background with a copy of the rest.
				rest := make([]byte, 0, len(b)+len(payload))
				rest = append(rest, b...)
				if i == 0 {
					rest = append(rest, payload...)
				}
				if !t.goTracked(func() { t.finishFrame(p, rest, len(payload)) }) {
					return transport.ErrClosed
				}
				held = false
				return fmt.Errorf("shm: send to proc %d: %w (the frame is completed in the background)", to, ctx.Err())
			}
			n := min(o.free(), uint64(len(b)))
			o.r.put(o.tail, b[:n])
			o.publish(n)
			b = b[n:]
		}
	}
	t.sent(len(payload))
	return nil
}

func (t *Transport) sent(n int) {
	t.stats.FramesOut.Add(1)
	t.stats.BytesOut.Add(uint64(n))
}

func (t *Transport) sendErr(to transport.Proc, err error) error {
	var pe *PeerError
	if errors.As(err, &pe) || errors.Is(err, transport.ErrClosed) {
		return err
	}
	return fmt.Errorf("shm: send to proc %d: %w", to, err)
}

// finishFrame writes the rest of a frame whose Send gave up on its ctx,
// then hands back the send token.
func (t *Transport) finishFrame(p *peer, rest []byte, payloadLen int) {
	defer func() { <-p.sem }()
	o := p.out
	for len(rest) > 0 {
		want := min(uint64(len(rest)), o.r.size()/4)
		if err := t.room(context.Background(), o, want, p.downErr); err != nil {
			return
		}
		n := min(o.free(), uint64(len(rest)))
		o.r.put(o.tail, rest[:n])
		o.publish(n)
		rest = rest[n:]
	}
	t.sent(payloadLen)
}

// free is the room in the ring, as far as the producer can tell.
func (o *outbound) free() uint64 {
	used := o.tail - o.r.head.Load()
	if used > o.r.size() {
		return 0 // a broken consumer; room waits until the connection fails
	}
	return o.r.size() - used
}

// publish makes n more bytes visible to the consumer and wakes it if it
// sleeps.
func (o *outbound) publish(n uint64) {
	o.tail += n
	o.r.tail.Store(o.tail)
	if o.r.consIdle.Load() != 0 && o.r.consIdle.CompareAndSwap(1, 0) {
		o.raw.wake() // an error fails the peer through watch
	}
}

// room waits until the ring has want bytes free.
func (t *Transport) room(ctx context.Context, o *outbound, want uint64, stop func() error) error {
	ready := func() bool { return o.free() >= want }
	if ready() {
		return nil
	}
	if ctx.Done() != nil {
		defer context.AfterFunc(ctx, func() { signal(o.wake) })()
	}
	sleep := func(d time.Duration) {
		timer := time.NewTimer(d)
		defer timer.Stop()
		select {
		case <-o.wake:
		case <-timer.C:
		}
	}
	return waitFor(ready, stop, o.r.prodIdle, sleep, time.Duration(t.spin.Load()), time.Duration(t.nap.Load()))
}
