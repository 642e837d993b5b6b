package shm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/gaspigo/gaspigo/transport"
)

// errStopped ends a consumer whose peer was failed (by fail).
var errStopped = errors.New("shm: consumer stopped")

// consume delivers the frames of in's ring to the handler until the peer
// fails.
func (t *Transport) consume(p *peer, in *inbound) {
	defer close(in.done)
	defer in.cancel()
	var hb [transport.HeaderSize]byte
	var h transport.Header // lent to the handler for each frame: one for the ring's life
	pl := &ringPayload{t: t, p: p, in: in}
	for {
		if err := t.avail(in, transport.HeaderSize); err != nil {
			if err != errStopped {
				t.fail(p, err)
			}
			return
		}
		in.take(hb[:])
		var err error
		h, err = transport.DecodeHeader(hb[:])
		if err != nil {
			t.fail(p, fmt.Errorf("%w: from proc %d: %w", ErrCorrupt, p.id, err))
			return
		}
		h.Src = p.id // the authenticated peer, whatever the ring says
		if err := t.hold(in.ctx, in.ctx, int(h.Len), false); err != nil {
			return // halted
		}
		pl.left, pl.n, pl.err = int(h.Len), int(h.Len), nil
		_ = t.handler.HandleFrame(p.id, &h, pl)
		if pl.err == nil && pl.left > 0 {
			_ = pl.Discard()
		}
		if pl.err != nil {
			if pl.err != errStopped {
				t.fail(p, pl.err)
			}
			return
		}
		t.stats.FramesIn.Add(1)
		t.stats.BytesIn.Add(uint64(h.Len))
	}
}

// used is the number of bytes in in's ring, checked: a count outside the
// ring is corruption.
func (in *inbound) used() (uint64, error) {
	tail := in.r.tail.Load()
	u := tail - in.head
	if tail < in.head || u > in.r.size() {
		return 0, fmt.Errorf("%w: tail %d, head %d, size %d", ErrCorrupt, tail, in.head, in.r.size())
	}
	return u, nil
}

// avail waits until in's ring holds at least want bytes.
func (t *Transport) avail(in *inbound, want uint64) error {
	var bad error
	ready := func() bool {
		u, err := in.used()
		if err != nil {
			bad = err
			return true
		}
		return u >= want
	}
	stop := func() error {
		if in.stop.Load() || (in.drain.Load() && !ready()) {
			return errStopped
		}
		return nil
	}
	if err := waitFor(ready, stop, in.r.consIdle, in.sleep, time.Duration(t.spin.Load()), time.Duration(t.nap.Load())); err != nil {
		return err
	}
	if in.stop.Load() {
		return errStopped
	}
	return bad
}

// sleep waits for a wake-up byte on the ring's connection, for at most d.
// The consumer reads its connection itself (no goroutine in between): its
// end is the producer's failure, found when the consumer next sleeps, that
// is once it has delivered everything the producer published.
func (in *inbound) sleep(d time.Duration) {
	_ = in.conn.SetReadDeadline(time.Now().Add(d))
	_, err := in.raw.read(in.buf[:])
	var ne net.Error
	switch {
	case err == nil, errors.As(err, &ne) && ne.Timeout():
	case errors.Is(err, net.ErrClosed):
		// Closed here by fail, which set stop or drain first.
	default:
		if err == io.EOF {
			err = errors.New("connection closed by peer")
		}
		in.t.failAs(in.p, fmt.Errorf("shm: proc %d: %w", in.p.id, err), true)
	}
}

// take copies len(b) bytes out of in's ring (they are there) and frees
// them, waking the producer if it waits for room.
func (in *inbound) take(b []byte) {
	in.r.get(in.head, b)
	in.head += uint64(len(b))
	in.r.head.Store(in.head)
	if in.r.prodIdle.Load() != 0 && in.r.prodIdle.CompareAndSwap(1, 0) {
		in.raw.wake() // an error fails the peer through watch
	}
}

// ringPayload is a frame's payload, read from the ring as it arrives.
type ringPayload struct {
	t    *Transport
	p    *peer
	in   *inbound
	n    int // Len
	left int // bytes not read yet
	err  error
}

func (pl *ringPayload) Len() int { return pl.n }

func (pl *ringPayload) ReadInto(dst []byte) error {
	if len(dst) != pl.n || pl.left != pl.n {
		return fmt.Errorf("shm: ReadInto with %d bytes for a %d-byte payload (%d unread)", len(dst), pl.n, pl.left)
	}
	return pl.read(dst)
}

func (pl *ringPayload) Discard() error {
	var scratch [4096]byte
	for pl.left > 0 && pl.err == nil {
		pl.read(scratch[:min(pl.left, len(scratch))])
	}
	return pl.err
}

// read takes the next len(b) bytes of the payload, as they arrive.
func (pl *ringPayload) read(b []byte) error {
	for len(b) > 0 && pl.err == nil {
		if err := pl.t.avail(pl.in, 1); err != nil {
			pl.err = err
			break
		}
		u, _ := pl.in.used()
		n := min(int(u), len(b))
		pl.in.take(b[:n])
		b = b[n:]
		pl.left -= n
	}
	return pl.err
}

// hold applies Config.Faults to a frame of n payload bytes (send: before
// it is written; else before it is delivered); it returns early when ctx
// or stop ends.
func (t *Transport) hold(ctx, stop context.Context, n int, send bool) error {
	f := t.cfg.Faults
	if f == nil {
		return nil
	}
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(stop, cancel)()
	return f.Hold(hctx, n, send)
}
