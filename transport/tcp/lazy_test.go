package tcp

import (
	"context"
	"errors"
	"math/bits"
	"sync"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/internal/auth"
	"github.com/gaspigo/gaspigo/transport"
	"github.com/gaspigo/gaspigo/transport/transporttest"
)

// Rule (package doc, Connections): when both ends of a pair dial each
// other at once, the connection dialed by the lower Proc is kept and the
// other closed unused (counted in DialsCrossed on both ends), without a
// refusal or a PeerDown; the frames both ends sent first arrive, in order.
// The hook holds each end's first dial attempt until both have begun
// dialing, so the dials always cross.
func TestDialsCross(t *testing.T) {
	token := auth.NewToken()
	var both sync.WaitGroup
	both.Add(2)
	var once [2]sync.Once
	hold := func(self int) hooks {
		return hooks{onDial: func(transport.Proc) {
			once[self].Do(func() {
				both.Done()
				both.Wait()
			})
		}}
	}
	ts := []*Transport{newOne(t, 0, token, nil, hold(0)), newOne(t, 1, token, nil, hold(1))}
	addrs := map[transport.Proc]string{0: ts[0].Addr(), 1: ts[1].Addr()}
	rs := []*recv{newRecv(), newRecv()}
	for i, tr := range ts {
		if err := tr.SetPeers(addrs); err != nil {
			t.Fatal(err)
		}
		if err := tr.Start(rs[i]); err != nil {
			t.Fatal(err)
		}
	}
	const frames = 50
	ctx := transporttest.Context(t, wait)
	var wg sync.WaitGroup
	var errs transporttest.Errors
	for i, tr := range ts {
		wg.Go(func() {
			for seq := range uint64(frames) {
				h := transport.Header{Type: transport.FramePassive, Seq: seq}
				if err := tr.Send(ctx, transport.Proc(1-i), &h, payloadFor(tr.Self(), seq, 100)); err != nil {
					errs.Add("Send %d->%d Seq %d: %v", i, 1-i, seq, err)
					return
				}
			}
		})
	}
	wg.Wait()
	errs.Report(t)
	for i, r := range rs {
		for want := range uint64(frames) {
			select {
			case got := <-r.seqs:
				if got != want {
					t.Fatalf("proc %d got Seq %d, want %d", i, got, want)
				}
			case <-ctx.Done():
				t.Fatalf("proc %d: Seq %d never arrived", i, want)
			}
		}
	}
	// Proc 1's own dial may still be on its way (a TLS handshake is
	// slow): it ends crossed, counted at both ends.
	deadline := time.Now().Add(wait)
	for ts[0].Stats().DialsCrossed == 0 || ts[1].Stats().DialsCrossed == 0 {
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond) // real sockets: poll with a deadline
	}
	for i, tr := range ts {
		st := tr.Stats()
		// Proc 1 may try again while proc 0's dial is on its way: one
		// crossed dial or more.
		if st.Connections != 1 || st.DialsCrossed == 0 || st.HandshakesRefused != 0 || st.PeersDown != 0 {
			t.Errorf("proc %d stats %+v: want one connection, crossed dials, no refusal, no peer down", i, st)
		}
	}
	ts[0].mu.Lock()
	kept := ts[0].peers[1].conn.dialed
	ts[0].mu.Unlock()
	if !kept {
		t.Error("the connection kept is not the one proc 0, the lower, dialed")
	}
	noDowns(t, rs[0].handler)
	noDowns(t, rs[1].handler)
}

// Rule (package doc, Connections): a process holds connections only to
// the peers it talks to. 64 processes on loopback run a dissemination
// barrier (each sends to the processes 1, 2, 4, ... 32 ahead and hears
// from those as far behind): each then holds at most 2*log2(64) = 12
// connections, not 63, and no handshake timed out or was refused.
func TestConnectionsOnlyToPartners(t *testing.T) {
	const n = 64
	// 64 processes' handshakes (TLS ones with PGAS_TLS=1) share this test
	// process: bound them as generously as every other wait here.
	ts := newCluster(t, n, func(c *Config) { c.HandshakeTimeout = wait })
	type mailbox struct {
		mu   sync.Mutex
		got  map[[2]uint64]bool // (from, round)
		wake chan struct{}
	}
	boxes := make([]*mailbox, n)
	for i, tr := range ts {
		mb := &mailbox{got: map[[2]uint64]bool{}, wake: make(chan struct{})}
		boxes[i] = mb
		h := newHandler(func(from transport.Proc, h *transport.Header, p transport.Payload) error {
			mb.mu.Lock()
			mb.got[[2]uint64{uint64(from), h.A}] = true
			close(mb.wake)
			mb.wake = make(chan struct{})
			mb.mu.Unlock()
			return p.Discard()
		})
		if err := tr.Start(h); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { noDowns(t, h) })
	}
	ctx := transporttest.Context(t, wait)
	barrier := func(i int) error {
		mb := boxes[i]
		for d, round := 1, uint64(0); d < n; d, round = d*2, round+1 {
			h := transport.Header{Type: transport.FrameColl, A: round}
			if err := ts[i].Send(ctx, transport.Proc((i+d)%n), &h, nil); err != nil {
				return err
			}
			key := [2]uint64{uint64((i - d + n) % n), round}
			for {
				mb.mu.Lock()
				ok, wake := mb.got[key], mb.wake
				mb.mu.Unlock()
				if ok {
					break
				}
				select {
				case <-wake:
				case <-ctx.Done():
					return context.Cause(ctx)
				}
			}
		}
		return nil
	}
	var wg sync.WaitGroup
	var errs transporttest.Errors
	for i := range n {
		wg.Go(func() {
			if err := barrier(i); err != nil {
				errs.Add("proc %d: barrier: %v", i, err)
			}
		})
	}
	wg.Wait()
	errs.Report(t)
	limit := 2 * bits.Len(n-1)
	most := 0
	for i, tr := range ts {
		st := tr.Stats()
		most = max(most, st.Connections)
		if st.Connections > limit || st.HandshakesTimedOut != 0 || st.HandshakesRefused != 0 || st.PeersDown != 0 {
			t.Errorf("proc %d stats %+v: want at most %d connections, no handshake timed out or refused, nobody down", i, st, limit)
		}
	}
	t.Logf("%d processes: at most %d connections each", n, most)
}

// Rule (package doc, the accept verdict): a dial the acceptor accepted
// counts only once the dialer confirms it. A dialer that gives up
// before confirming (its handshake ran out of time) costs no PeerDown
// and no refusal: the acceptor drops the connection when it closes, or
// when the dialer's next attempt arrives, and its own Sends, which waited
// meanwhile, then dial.
func TestUnconfirmedDialDropped(t *testing.T) {
	if testTLS {
		t.Skip("drives the handshake by hand over plain TCP")
	}
	ts := newCluster(t, 3, nil)
	rs := []*recv{newRecv(), newRecv(), newRecv()}
	for i, tr := range ts {
		if err := tr.Start(rs[i]); err != nil {
			t.Fatal(err)
		}
	}
	token := ts[0].cfg.Token
	ctx := transporttest.Context(t, wait)

	// Proc 0's dial to proc 1 accepted, never confirmed, then closed:
	// proc 1's Send waits for it, then dials proc 0 itself.
	nc, err := rawDialVerdict(t, ts[1].Addr(), token, 0, false, false)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	h := transport.Header{Type: transport.FramePassive, Seq: 0}
	err = ts[1].Send(short, 0, &h, nil)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Send 1->0 while 0's dial awaits its confirmation: %v, want to wait (DeadlineExceeded)", err)
	}
	sent := make(chan error, 1)
	go func() {
		h := transport.Header{Type: transport.FramePassive, Seq: 1}
		sent <- ts[1].Send(ctx, 0, &h, []byte("after the abandoned dial"))
	}()
	_ = nc.Close()
	if err := <-sent; err != nil {
		t.Fatalf("Send 1->0 after an unconfirmed dial of 0's: %v", err)
	}
	rs[0].waitSeq(t, 1)

	// Proc 0's dial to proc 2 accepted and not confirmed; its next
	// attempt is confirmed and replaces it.
	stale, err := rawDialVerdict(t, ts[2].Addr(), token, 0, false, false)
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := rawDialVerdict(t, ts[2].Addr(), token, 0, false, true)
	if err != nil {
		t.Fatalf("the second attempt: %v", err)
	}
	if err := writeFrame(fresh, transport.Header{Type: transport.FramePassive, Src: 0, Seq: 2}, []byte("x")); err != nil {
		t.Fatal(err)
	}
	rs[2].waitSeq(t, 2)
	_ = stale.Close()
	for i, tr := range ts {
		if st := tr.Stats(); st.HandshakesRefused != 0 || st.PeersDown != 0 {
			t.Errorf("proc %d stats %+v: want no refusal and nobody down", i, st)
		}
		noDowns(t, rs[i].handler)
	}
}
