package tcp

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/internal/admit"
	"github.com/gaspigo/gaspigo/internal/auth"
	"github.com/gaspigo/gaspigo/transport"
)

// Rule (package doc, internal/admit): unauthenticated connections are
// bounded per process, the oldest silent one is shed when the gate is
// full, and a peer connects through a flood of idle connections from its
// own address (127.0.0.1 here, like the flood) with no refusal and no
// PeerDown.
func TestPeerConnectsThroughIdleFlood(t *testing.T) {
	const held = 700 // more than the shared gate's per-source bound (384)
	token := auth.NewToken()
	t1 := newOne(t, 1, token, nil, hooks{})

	var (
		mu    sync.Mutex
		conns []net.Conn
		stop  = make(chan struct{})
		done  = make(chan struct{})
	)
	defer func() {
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	}()
	dialIdle := func() {
		c, err := net.DialTimeout("tcp", t1.Addr(), wait)
		if err != nil {
			return
		}
		mu.Lock()
		conns = append(conns, c)
		if len(conns) > held {
			conns[0].Close()
			conns = conns[1:]
		}
		mu.Unlock()
	}
	for range held {
		dialIdle()
	}
	deadline := time.Now().Add(wait)
	for t1.Stats().HandshakesAccepted < held && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond) // real sockets: poll with a deadline
	}
	st := t1.Stats()
	bound := admit.DefaultLimits().MaxPerSource
	if p := admit.Shared().Pending(); st.HandshakesAccepted < held || st.HandshakesShed == 0 || p > bound {
		t.Fatalf("after %d idle connections: %+v, %d pending; want all accepted, some shed and at most %d pending", held, st, p, bound)
	}
	// The flood goes on while a peer connects and exchanges frames.
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			dialIdle()
		}
	}()
	t0 := newOne(t, 0, token, nil, hooks{})
	addrs := map[transport.Proc]string{0: t0.Addr(), 1: t1.Addr()}
	for _, tr := range []*Transport{t0, t1} {
		if err := tr.SetPeers(addrs); err != nil {
			t.Fatal(err)
		}
	}
	r0, r1 := newRecv(), newRecv()
	if err := t0.Start(r0); err != nil {
		t.Fatal(err)
	}
	if err := t1.Start(r1); err != nil {
		t.Fatal(err)
	}
	begin := time.Now()
	exchange(t, t0, t1, r0, r1, 1)
	took := time.Since(begin)
	close(stop)
	<-done
	noDowns(t, r0.handler)
	noDowns(t, r1.handler)
	st = t1.Stats()
	t.Logf("peer connected and exchanged in %v under the flood; %+v", took.Round(time.Millisecond), st)
	if st.HandshakesRefused != st.HandshakesTimedOut {
		t.Errorf("%d refusals other than timeouts of idle connections; the peer must be admitted", st.HandshakesRefused-st.HandshakesTimedOut)
	}
}
