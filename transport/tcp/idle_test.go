package tcp

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/transport"
	"github.com/gaspigo/gaspigo/transport/transporttest"
)

// waitStats polls tr's Stats until ok holds, for at most wait.
func waitStats(t *testing.T, tr *Transport, what string, ok func(Stats) bool) Stats {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		st := tr.Stats()
		if ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("proc %d: %s: not within %v (stats %+v)", tr.Self(), what, wait, st)
		}
		time.Sleep(time.Millisecond) // real sockets: poll with a deadline
	}
}

// idlePair is two started transports with a 40 ms IdleTimeout that
// exchanged a frame each way (Seq 1).
func idlePair(t *testing.T) ([]*Transport, *recv, *recv) {
	ts := newCluster(t, 2, func(c *Config) { c.IdleTimeout = 40 * time.Millisecond })
	ha, hb := newRecv(), newRecv()
	ts[0].Start(ha)
	ts[1].Start(hb)
	exchange(t, ts[0], ts[1], ha, hb, 1)
	return ts, ha, hb
}

// An idle connection is closed by both ends without a PeerDown, and the
// next Send dials again.
func TestIdleConnectionClosedAndReopened(t *testing.T) {
	ts, ha, hb := idlePair(t)
	for _, tr := range ts {
		waitStats(t, tr, "the idle connection closed", func(s Stats) bool { return s.Connections == 0 && s.IdleClosed == 1 })
		if tr.Connected(1 - tr.Self()) {
			t.Errorf("proc %d: Connected after the idle close", tr.Self())
		}
	}
	exchange(t, ts[0], ts[1], ha, hb, 2)
	if !ts[0].Connected(1) || !ts[1].Connected(0) {
		t.Error("not connected again after a Send")
	}
	noDowns(t, ha.handler)
	noDowns(t, hb.handler)
}

// A peer that ended while its connection was closed for idleness is
// found down by the next Send's dial, and reported once.
func TestIdleClosedPeerEndedThenSendFails(t *testing.T) {
	ts, ha, _ := idlePair(t)
	waitStats(t, ts[0], "the idle connection closed", func(s Stats) bool { return s.Connections == 0 })
	ts[1].Close()
	h := transport.Header{Type: transport.FramePassive, Seq: 2}
	err := ts[0].Send(transporttest.Context(t, wait), 1, &h, []byte("anyone?"))
	var pd *PeerDownError
	if !errors.As(err, &pd) {
		t.Fatalf("Send to the ended peer: %v, want a *PeerDownError", err)
	}
	waitDown(t, ha.handler, 1)
}

// The close handshake runs concurrently with Sends in both directions,
// large and batched, and replies queued from the handler: thousands of
// rounds, each a burst of frames then a pause drawn around IdleTimeout, so
// that closes start while frames are being sent, both ends close at once,
// and frames wait for the next connection. Every frame arrives exactly
// once, in the order of its sender's Sends, its bytes intact; every
// reply arrives; no PeerDown.
func TestIdleCloseRacesSends(t *testing.T) {
	const idle = 2 * time.Millisecond
	rounds, budget := 3000, 8*time.Second
	if testing.Short() {
		rounds = 300
	}
	ts := newCluster(t, 2, func(c *Config) { c.IdleTimeout = idle })
	type side struct {
		h       *handler
		next    atomic.Uint64 // next Seq expected from the other side
		replies sync.Map
		nreply  atomic.Int64
	}
	var errs transporttest.Errors
	sides := make([]*side, 2)
	for i := range sides {
		s := &side{}
		s.next.Store(1)
		me := transport.Proc(i)
		s.h = newHandler(func(from transport.Proc, h *transport.Header, p transport.Payload) error {
			if h.Type == transport.FrameAck {
				if _, dup := s.replies.LoadOrStore(h.Seq, true); dup {
					errs.Add("proc %d: reply %d twice", me, h.Seq)
				}
				s.nreply.Add(1)
				return p.Discard()
			}
			buf := make([]byte, p.Len())
			if err := p.ReadInto(buf); err != nil {
				return err
			}
			if want := s.next.Load(); h.Seq != want {
				errs.Add("proc %d: frame Seq %d from %d, want %d", me, h.Seq, from, want)
			}
			s.next.Store(h.Seq + 1)
			if !bytes.Equal(buf, payloadFor(from, h.Seq, len(buf))) {
				errs.Add("proc %d: frame Seq %d from %d: payload differs", me, h.Seq, from)
			}
			if h.Flags&transport.FlagAck != 0 {
				r := transport.Header{Type: transport.FrameAck, Seq: h.Seq}
				if !ts[me].Queue(from, &r, nil) {
					// Not connected now (closing): from a goroutine, as a
					// handler must.
					go func() {
						ctx, cancel := context.WithTimeout(context.Background(), wait)
						defer cancel()
						if err := ts[me].Send(ctx, from, &r, nil); err != nil {
							errs.Add("proc %d: reply %d: %v", me, r.Seq, err)
						}
					}()
				}
			}
			return nil
		})
		sides[i] = s
		ts[i].Start(s.h)
	}
	sent := make([]uint64, 2)
	acked := make([]int64, 2)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range ts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			me, to := transport.Proc(i), transport.Proc(1-i)
			rng := rand.New(rand.NewPCG(uint64(i)+7, 11))
			ctx := context.Background()
			var seq uint64
			for r := 0; r < rounds && time.Since(start) < budget; r++ {
				for range 1 + rng.IntN(6) {
					seq++
					size := rng.IntN(200)
					if rng.IntN(8) == 0 {
						size = 8<<10 + rng.IntN(64<<10) // above BatchFrame: written by Send itself
					}
					h := transport.Header{Type: transport.FrameWrite, Seq: seq}
					if rng.IntN(4) == 0 {
						h.Flags = transport.FlagAck
						acked[i]++
					}
					sctx, cancel := context.WithTimeout(ctx, wait)
					err := ts[me].Send(sctx, to, &h, payloadFor(me, seq, size))
					cancel()
					if err != nil {
						errs.Add("proc %d: Send Seq %d: %v", me, seq, err)
						return
					}
				}
				time.Sleep(time.Duration(rng.IntN(int(3 * idle))))
			}
			sent[i] = seq
		}()
	}
	wg.Wait()
	errs.Report(t)
	if t.Failed() {
		return
	}
	for i, s := range sides {
		other := 1 - i
		deadline := time.Now().Add(wait)
		for {
			if s.nreply.Load() == acked[i] && s.next.Load() == sent[other]+1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("proc %d: got frames up to Seq %d of %d, replies %d of %d", i, s.next.Load()-1, sent[other], s.nreply.Load(), acked[i])
			}
			time.Sleep(time.Millisecond)
		}
		noDowns(t, s.h)
	}
	errs.Report(t)
	closed := ts[0].Stats().IdleClosed + ts[1].Stats().IdleClosed
	t.Logf("%d and %d frames, %d and %d replies in %v; %d idle closes (both ends counted)",
		sent[0], sent[1], acked[0], acked[1], time.Since(start).Round(time.Millisecond), closed)
	if closed < 100 {
		t.Errorf("only %d idle closes: the race was hardly exercised", closed)
	}
}
