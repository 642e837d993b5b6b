package mem_test

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/gaspigo/gaspigo/transport"
	"github.com/gaspigo/gaspigo/transport/mem"
	"github.com/gaspigo/gaspigo/transport/transporttest"
)

// Rule: an endpoint added after the network formed (a process that joins
// the job) takes the next Proc; the others reach it only once AddPeer gave
// them its address (or it connected to them first), as over TCP; it
// reaches the first endpoints from the start. AddPeer refuses what names
// no endpoint of it with ErrBadProc and changes nothing then.
func TestAddEndpointAndPeer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := newNet(t, 3, mem.LocalConfig())
		recs := startAll(t, nw)
		j, err := nw.AddEndpoint()
		if err != nil {
			t.Fatal(err)
		}
		if j.Self() != 3 || nw.Size() != 4 || nw.Endpoint(3) != j || len(nw.Transports()) != 4 {
			t.Fatalf("AddEndpoint: proc %d, size %d; want proc 3 of 4", j.Self(), nw.Size())
		}
		rj := transporttest.NewRecorder()
		if err := j.Start(rj); err != nil {
			t.Fatal(err)
		}
		if err := trySend(nw, 0, 3, 1); !errors.Is(err, transport.ErrUnknownPeer) {
			t.Fatalf("Send to the joiner before AddPeer = %v, want ErrUnknownPeer", err)
		}
		ep0 := nw.Endpoint(0)
		for _, bad := range []struct {
			p    transport.Proc
			addr string
		}{
			{transport.NoProc, "mem:3"},
			{0, ep0.Addr()}, // this endpoint
			{4, "mem:4"},    // no such endpoint yet
			{3, "mem:2"},
			{3, ""},
		} {
			if err := ep0.AddPeer(bad.p, bad.addr); !errors.Is(err, mem.ErrBadProc) {
				t.Errorf("AddPeer(%d, %q) = %v, want ErrBadProc", bad.p, bad.addr, err)
			}
		}
		if err := trySend(nw, 0, 3, 1); !errors.Is(err, transport.ErrUnknownPeer) {
			t.Fatalf("a refused AddPeer was applied: Send = %v, want ErrUnknownPeer", err)
		}
		for range 2 { // twice: the same address again is a no-op
			if err := ep0.AddPeer(3, j.Addr()); err != nil {
				t.Fatalf("AddPeer(3, %q): %v", j.Addr(), err)
			}
		}
		if err := ep0.AddPeer(1, "mem:1"); err != nil {
			t.Errorf("AddPeer of a first endpoint with its address: %v, want nil", err)
		}
		send(t, nw, 0, 3, 1)
		// The joiner reaches the first endpoints at once, and proc 1
		// answers over the connection it made.
		send(t, nw, 3, 1, 2)
		send(t, nw, 1, 3, 3)
		if err := trySend(nw, 2, 3, 4); !errors.Is(err, transport.ErrUnknownPeer) {
			t.Errorf("Send from an endpoint that neither added nor heard from the joiner = %v, want ErrUnknownPeer", err)
		}
		if _, err := rj.WaitFrames(t.Context(), 2); err != nil {
			t.Fatal(err)
		}
		if _, err := recs[1].WaitFrames(t.Context(), 1); err != nil {
			t.Fatal(err)
		}
		if got := slices.Sorted(slices.Values(seqs(rj.Frames()))); !slices.Equal(got, []uint64{1, 3}) {
			t.Errorf("the joiner got seqs %v, want [1 3]", got)
		}

		// An endpoint added after a partition is in no group of it.
		if err := nw.Partition([]transport.Proc{0}, []transport.Proc{1, 2}); err != nil {
			t.Fatal(err)
		}
		k, err := nw.AddEndpoint()
		if err != nil {
			t.Fatal(err)
		}
		if err := nw.Partition([]transport.Proc{0, 4}); err != nil {
			t.Fatalf("a partition naming the new endpoint: %v", err)
		}
		if err := nw.Kill(k.Self()); err != nil || nw.Alive(k.Self()) {
			t.Fatalf("Kill of the new endpoint: %v, alive %v", err, nw.Alive(k.Self()))
		}
		nw.Heal()
		if err := nw.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := nw.AddEndpoint(); !errors.Is(err, mem.ErrNetworkClosed) {
			t.Errorf("AddEndpoint after Close = %v, want ErrNetworkClosed", err)
		}
	})
}

// Rule: endpoints are added safely while the others send, partition and
// add peers (run with -race).
func TestAddEndpointConcurrent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := newNet(t, 4, mem.LocalConfig())
		recs := startAll(t, nw)
		const joiners = 50
		added := make(chan *mem.Transport, joiners)
		var wg sync.WaitGroup
		wg.Go(func() {
			defer close(added)
			for range joiners {
				ep, err := nw.AddEndpoint()
				if err != nil {
					t.Errorf("AddEndpoint: %v", err)
					return
				}
				if err := ep.Start(transporttest.NewRecorder()); err != nil {
					t.Errorf("Start of proc %d: %v", ep.Self(), err)
				}
				added <- ep
			}
		})
		wg.Go(func() {
			for ep := range added {
				if err := nw.Endpoint(0).AddPeer(ep.Self(), ep.Addr()); err != nil {
					t.Errorf("AddPeer(%d): %v", ep.Self(), err)
				}
				h := transport.Header{Type: transport.FramePassive, Seq: uint64(ep.Self())}
				if err := nw.Endpoint(0).Send(t.Context(), ep.Self(), &h, nil); err != nil {
					t.Errorf("Send to proc %d: %v", ep.Self(), err)
				}
				if err := ep.Send(t.Context(), 1, &h, nil); err != nil {
					t.Errorf("Send from proc %d: %v", ep.Self(), err)
				}
				if ep.Self()%7 == 0 {
					nw.Partition([]transport.Proc{ep.Self(), 2})
					nw.Heal()
				}
			}
		})
		for i := range 200 {
			send(t, nw, 2, 3, uint64(i))
			_ = nw.Size()
			_ = nw.Alive(transport.Proc(i % 60))
		}
		wg.Wait()
		if _, err := recs[3].WaitFrames(t.Context(), 200); err != nil {
			t.Fatal(err)
		}
		if _, err := recs[1].WaitFrames(t.Context(), joiners); err != nil {
			t.Fatal(err)
		}
		if nw.Size() != 4+joiners {
			t.Fatalf("size %d after %d joins, want %d", nw.Size(), joiners, 4+joiners)
		}
	})
}
