package pgas

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/gaspigo/gaspigo/segments"
	"github.com/gaspigo/gaspigo/transport"
	"github.com/gaspigo/gaspigo/transport/mem"
)

// queuing is a mem transport with the Queuer capability; it counts the
// frames queued through it.
type queuing struct {
	*mem.Transport
	queued atomic.Int64
}

func (q *queuing) Queue(to transport.Proc, h *transport.Header, payload []byte) bool {
	if q.Send(context.Background(), to, h, payload) != nil {
		return false
	}
	q.queued.Add(1)
	return true
}

// Rule: over a transport that can queue without blocking (Queuer), the
// ack a waiting sender asks for is sent from the target's reader, and a
// refusal still reaches the sender ahead of any ack covering it.
func TestAckFromReader(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var qs []*queuing
		rts, _ := newJob(t, 2, 3, func(c *Config) {
			q := &queuing{Transport: c.Transport.(*mem.Transport)}
			qs = append(qs, q)
			c.Transport = q
		})
		createSeg(t, rts, 1, 4096)
		ctx := context.Background()
		for round := range 20 {
			for i := range 64 {
				if err := rts[0].WriteNotify(ctx, 0, 1, Loc{1, int64(8 * i)}, Loc{1, 0}, 8, segments.NotificationID(i%4), uint32(round+1)); err != nil {
					t.Fatal(err)
				}
			}
			if err := rts[0].Wait(ctx, 0); err != nil {
				t.Fatalf("round %d: Wait: %v", round, err)
			}
		}
		if qs[1].queued.Load() == 0 {
			t.Fatal("no ack was queued from the target's reader")
		}
		// A refused write among good ones: Wait reports the refusal.
		if err := rts[0].Write(ctx, 0, 1, Loc{1, 0}, Loc{1, 0}, 8); err != nil {
			t.Fatal(err)
		}
		mismatchedSeg(rts, 2, 16)
		if err := rts[0].Write(ctx, 0, 1, Loc{2, 8}, Loc{2, 0}, 64); err != nil {
			t.Fatal(err)
		}
		if err := rts[0].Write(ctx, 0, 1, Loc{1, 8}, Loc{1, 0}, 8); err != nil {
			t.Fatal(err)
		}
		err := rts[0].Wait(ctx, 0)
		if !errors.Is(err, ErrRemote) || !errors.Is(err, ErrBounds) {
			t.Fatalf("Wait = %v, want the remote bounds refusal", err)
		}
		if err := rts[0].Write(ctx, 0, 1, Loc{1, 0}, Loc{1, 0}, 8); err != nil {
			t.Fatal(err)
		}
		if err := rts[0].Wait(ctx, 0); err != nil {
			t.Fatalf("Wait after the refusal: %v", err)
		}
	})
}
