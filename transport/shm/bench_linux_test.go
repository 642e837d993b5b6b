package shm

import (
	"context"
	"testing"

	"github.com/gaspigo/gaspigo/transport"
)

// echo sends every frame back to its sender, from a goroutine of its own
// (a handler must not send on the reader's behalf).
type echo struct {
	tr *Transport
	ch chan transport.Header
}

func (e *echo) HandleFrame(from transport.Proc, h *transport.Header, p transport.Payload) error {
	p.Discard()
	e.ch <- *h
	return nil
}
func (e *echo) PeerDown(transport.Proc, error) {}

type pong struct{ ch chan struct{} }

func (p *pong) HandleFrame(from transport.Proc, h *transport.Header, pl transport.Payload) error {
	pl.Discard()
	p.ch <- struct{}{}
	return nil
}
func (p *pong) PeerDown(transport.Proc, error) {}

// BenchmarkPingPong8: an 8-byte frame there and back between two
// transports of one process; ns/op is the round trip.
func BenchmarkPingPong8(b *testing.B) {
	ts := newCluster(b, 2, nil)
	e := &echo{tr: ts[1], ch: make(chan transport.Header, 1)}
	pg := &pong{ch: make(chan struct{}, 1)}
	ts[0].Start(pg)
	ts[1].Start(e)
	ctx := context.Background()
	go func() {
		for h := range e.ch {
			ts[1].Send(ctx, 0, &h, make([]byte, 8))
		}
	}()
	defer close(e.ch)
	buf := make([]byte, 8)
	b.ResetTimer()
	for range b.N {
		h := transport.Header{Type: transport.FramePassive}
		if err := ts[0].Send(ctx, 1, &h, buf); err != nil {
			b.Fatal(err)
		}
		<-pg.ch
	}
}

// BenchmarkStream1M: 1 MiB frames one way; MB/s is the bandwidth.
func BenchmarkStream1M(b *testing.B) {
	ts := newCluster(b, 2, func(c *Config) { c.RingSize = DefaultRingSize })
	got := make(chan struct{}, 1<<20)
	dst := make([]byte, 1<<20)
	ts[0].Start(&pong{ch: make(chan struct{}, 1)})
	ts[1].Start(readInto{dst, got})
	ctx := context.Background()
	buf := make([]byte, 1<<20)
	b.SetBytes(1 << 20)
	b.ResetTimer()
	for range b.N {
		h := transport.Header{Type: transport.FrameWrite}
		if err := ts[0].Send(ctx, 1, &h, buf); err != nil {
			b.Fatal(err)
		}
	}
	for range b.N {
		<-got
	}
}

type readInto struct {
	dst []byte
	got chan struct{}
}

func (r readInto) HandleFrame(from transport.Proc, h *transport.Header, p transport.Payload) error {
	err := p.ReadInto(r.dst[:p.Len()])
	r.got <- struct{}{}
	return err
}
func (r readInto) PeerDown(transport.Proc, error) {}
