package tcp

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/internal/auth"
	"github.com/gaspigo/gaspigo/transport"
	"github.com/gaspigo/gaspigo/transport/transporttest"
)

// Rule (transport.PeerAdder): AddPeer refuses what cannot be a peer's
// address, this process, and a known peer at another address, with
// ErrPeers, and changes nothing then; the same address again is a no-op;
// after Close it says ErrClosed.
func TestAddPeerBadInput(t *testing.T) {
	token := auth.NewToken()
	tr := newOne(t, 1, token, nil, hooks{})
	if err := tr.Start(newRecv()); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []struct {
		p    transport.Proc
		addr string
	}{
		{transport.NoProc, "127.0.0.1:4000"},
		{5, ""},
		{5, "nonsense"},
		{5, "127.0.0.1"},
		{5, "127.0.0.1:0"},
		{5, "127.0.0.1:65536"},
		{5, "127.0.0.1:http"},
		{1, "127.0.0.1:4000"}, // this process
	} {
		if err := tr.AddPeer(bad.p, bad.addr); !errors.Is(err, ErrPeers) {
			t.Errorf("AddPeer(%d, %q) = %v, want ErrPeers", bad.p, bad.addr, err)
		}
	}
	h := transport.Header{Type: transport.FramePassive}
	if err := tr.Send(transporttest.Context(t, wait), 5, &h, nil); !errors.Is(err, transport.ErrUnknownPeer) {
		t.Errorf("a refused AddPeer was applied: Send to 5 = %v, want ErrUnknownPeer", err)
	}

	if err := tr.AddPeer(5, "127.0.0.1:4000"); err != nil {
		t.Fatalf("AddPeer(5): %v", err)
	}
	if err := tr.AddPeer(5, "127.0.0.1:4000"); err != nil {
		t.Errorf("AddPeer(5) again with the same address: %v, want nil", err)
	}
	if err := tr.AddPeer(5, "127.0.0.1:4001"); !errors.Is(err, ErrPeers) {
		t.Errorf("AddPeer(5) at another address: %v, want ErrPeers", err)
	}
	if err := tr.SetPeers(map[transport.Proc]string{5: "127.0.0.1:4001"}); !errors.Is(err, ErrPeers) {
		t.Errorf("SetPeers moving the added peer: %v, want ErrPeers", err)
	}
	tr.Close()
	if err := tr.AddPeer(6, "127.0.0.1:4000"); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("AddPeer after Close: %v, want ErrClosed", err)
	}
}

// Rule: a process that joins after the job formed (a new Proc, its
// address learnt later) is reached once AddPeer gave its address: before
// it, a Send to it says ErrUnknownPeer; after it, the first Send dials it.
// A joiner's own dial is accepted before its address is known, replies
// go back over that connection, and AddPeer afterwards keeps it.
func TestAddPeerJoiner(t *testing.T) {
	ts := newCluster(t, 2, nil)
	token := ts[0].cfg.Token
	joiner := newOne(t, 5, token, nil, hooks{})
	if err := joiner.SetPeers(map[transport.Proc]string{0: ts[0].Addr(), 1: ts[1].Addr()}); err != nil {
		t.Fatal(err)
	}
	rs := []*recv{newRecv(), newRecv()}
	rj := newRecv()
	for i, tr := range ts {
		if err := tr.Start(rs[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := joiner.Start(rj); err != nil {
		t.Fatal(err)
	}
	ctx := transporttest.Context(t, wait)
	h := transport.Header{Type: transport.FramePassive, Seq: 1}
	if err := ts[0].Send(ctx, 5, &h, nil); !errors.Is(err, transport.ErrUnknownPeer) {
		t.Fatalf("Send to the joiner before AddPeer = %v, want ErrUnknownPeer", err)
	}
	if err := ts[0].AddPeer(5, joiner.Addr()); err != nil {
		t.Fatal(err)
	}
	exchange(t, ts[0], joiner, rs[0], rj, 1)

	// The joiner dials proc 1 first; proc 1 answers over that connection,
	// and learning the address afterwards changes nothing.
	exchange(t, joiner, ts[1], rj, rs[1], 2)
	if err := ts[1].AddPeer(5, joiner.Addr()); err != nil {
		t.Fatalf("AddPeer of a peer connected before its address was known: %v", err)
	}
	exchange(t, ts[1], joiner, rs[1], rj, 3)
	if st := ts[1].Stats(); st.Connections != 1 || st.DialAttempts != 0 || !ts[1].Connected(5) {
		t.Errorf("proc 1: %d connections, %d dials, connected to the joiner %v; want the joiner's one connection kept, no dial",
			st.Connections, st.DialAttempts, ts[1].Connected(5))
	}
	for _, r := range append(rs, rj) {
		noDowns(t, r.handler)
	}
}

// Rule: AddPeer is safe against concurrent Sends and dials: senders that
// try the joiner before its address is known get ErrUnknownPeer and
// nothing else, and once AddPeer returned every one of them gets
// through on one connection.
func TestAddPeerConcurrentSends(t *testing.T) {
	ts := newCluster(t, 1, nil)
	joiner := newOne(t, 9, ts[0].cfg.Token, nil, hooks{})
	r0, rj := newRecv(), newRecv()
	if err := ts[0].Start(r0); err != nil {
		t.Fatal(err)
	}
	if err := joiner.Start(rj); err != nil {
		t.Fatal(err)
	}
	ctx := transporttest.Context(t, wait)
	const senders = 8
	added := make(chan struct{})
	var wg sync.WaitGroup
	errs := &transporttest.Errors{}
	for i := range senders {
		wg.Go(func() {
			for {
				after := false // AddPeer had returned before this Send began
				select {
				case <-added:
					after = true
				default:
				}
				h := transport.Header{Type: transport.FramePassive, Seq: uint64(100 + i)}
				err := ts[0].Send(ctx, 9, &h, []byte("hello"))
				switch {
				case err == nil:
					return
				case !errors.Is(err, transport.ErrUnknownPeer):
					errs.Add("sender %d: Send to the joiner = %v, want nil or ErrUnknownPeer", i, err)
					return
				case after:
					errs.Add("sender %d: ErrUnknownPeer after AddPeer returned: %v", i, err)
					return
				case ctx.Err() != nil:
					errs.Add("sender %d: %v", i, ctx.Err())
					return
				}
			}
		})
	}
	if err := ts[0].AddPeer(9, joiner.Addr()); err != nil {
		t.Fatal(err)
	}
	close(added)
	wg.Wait()
	errs.Report(t)
	got := map[uint64]bool{}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for len(got) < senders {
		select {
		case s := <-rj.seqs:
			got[s] = true
		case <-timer.C:
			t.Fatalf("the joiner got frames %v within %v, want one from each of %d senders", got, wait, senders)
		}
	}
	if got := ts[0].Stats().Connections; got != 1 {
		t.Errorf("%d connections to the joiner, want 1", got)
	}
	noDowns(t, r0.handler)
	noDowns(t, rj.handler)
}

// Rule (Disconnect before Start): a peer given up on before the
// transport has a handler (a joiner's runtime cuts off the processes its
// first view lists as failed, then starts the transport) is marked down
// at once, and Start tells the handler, once.
func TestDisconnectBeforeStart(t *testing.T) {
	tr := newOne(t, 1, auth.NewToken(), nil, hooks{})
	if err := tr.SetPeers(map[transport.Proc]string{2: "127.0.0.1:4000"}); err != nil {
		t.Fatal(err)
	}
	cause := errors.New("declared failed in epoch 3")
	tr.Disconnect(2, cause) // no handler yet: must not crash
	h := newHandler(nil)
	if err := tr.Start(h); err != nil {
		t.Fatal(err)
	}
	if d := waitDown(t, h, 2); !errors.Is(d.err, cause) {
		t.Fatalf("PeerDown(2) after Start with %v, want %v", d.err, cause)
	}
	tr.Disconnect(2, cause) // already down: nothing more
	select {
	case d := <-h.downs:
		t.Fatalf("a second PeerDown %+v for a peer already reported down", d)
	case <-time.After(100 * time.Millisecond):
	}
}
