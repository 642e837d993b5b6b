package tcp

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/internal/auth"
	"github.com/gaspigo/gaspigo/transport"
	"github.com/gaspigo/gaspigo/transport/transporttest"
)

// Rule: when a peer's transport closes, PeerDown is called once within a
// bounded time, whichever side dialed, and Sends to it then fail with an
// error wrapping ErrPeerDown (a *PeerDownError); the other connections
// stay up.
func TestPeerDownOnClose(t *testing.T) {
	ts := newCluster(t, 3, nil)
	rs := make([]*recv, 3)
	for i := range ts {
		rs[i] = newRecv()
		if err := ts[i].Start(rs[i]); err != nil {
			t.Fatal(err)
		}
	}
	exchange(t, ts[0], ts[1], rs[0], rs[1], 1)
	exchange(t, ts[1], ts[2], rs[1], rs[2], 2)
	exchange(t, ts[0], ts[2], rs[0], rs[2], 3)

	ctx := transporttest.Context(t, wait)
	for _, victim := range []transport.Proc{2, 0} { // the higher one, then the lower one
		if err := ts[victim].Close(); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		d := waitDown(t, rs[1].handler, victim)
		t.Logf("PeerDown(%d) after %v: %v", victim, time.Since(start), d.err)
		if d.err == nil {
			t.Errorf("PeerDown(%d) with a nil error", victim)
		}
		h := transport.Header{Type: transport.FramePassive}
		err := ts[1].Send(ctx, victim, &h, []byte("x"))
		var pde *PeerDownError
		if !errors.Is(err, transport.ErrPeerDown) || !errors.As(err, &pde) || pde.Peer != victim {
			t.Errorf("Send to closed peer %d: %v, want a *PeerDownError wrapping ErrPeerDown", victim, err)
		}
	}
	noDowns(t, rs[1].handler)
	if st := ts[1].Stats(); st.PeersDown != 2 {
		t.Errorf("PeersDown = %d, want 2", st.PeersDown)
	}
}

// Rule: a refused dial after retries is a PeerDown, and Sends fail with
// ErrPeerDown: three connects refused in a row (nothing listens at the
// peer's address any more) end the retries before DialMaxElapsed.
func TestDialGivesUp(t *testing.T) {
	tr := newOne(t, 0, auth.NewToken(), func(c *Config) {
		c.DialInitialInterval = 5 * time.Millisecond
		c.DialMaxInterval = 20 * time.Millisecond
		c.DialMaxElapsed = time.Minute
	}, hooks{})
	if err := tr.SetPeers(map[transport.Proc]string{1: deadAddr(t)}); err != nil {
		t.Fatal(err)
	}
	h := newHandler(nil)
	if err := tr.Start(h); err != nil {
		t.Fatal(err)
	}
	hd := transport.Header{Type: transport.FramePassive}
	if err := tr.Send(transporttest.Context(t, wait), 1, &hd, nil); !errors.Is(err, transport.ErrPeerDown) {
		t.Errorf("first Send to a peer nobody listens for: %v, want ErrPeerDown once the dial gave up", err)
	}
	d := waitDown(t, h, 1)
	if !strings.Contains(d.err.Error(), "nothing listens") {
		t.Errorf("PeerDown cause %q does not say that nothing listens", d.err)
	}
	if err := tr.Send(transporttest.Context(t, wait), 1, &hd, nil); !errors.Is(err, transport.ErrPeerDown) {
		t.Errorf("Send after the dial gave up: %v, want ErrPeerDown", err)
	}
	if st := tr.Stats(); st.DialAttempts != deadRefusals || st.PeersDown != 1 {
		t.Errorf("stats %+v: want %d dial attempts and one peer down", st, deadRefusals)
	}
}

// Rule: the first Send to a peer dials it, whichever of the two is the
// higher; the peer files the connection even before its Start (its frames
// wait), and its own Sends then use the same connection: one per pair.
func TestHigherSideDials(t *testing.T) {
	ts := newCluster(t, 2, nil)
	r1 := newRecv()
	if err := ts[1].Start(r1); err != nil {
		t.Fatal(err)
	}
	if st := ts[1].Stats(); st.DialAttempts != 0 || st.Connections != 0 {
		t.Fatalf("stats after Start %+v: nothing may be dialed before a Send", st)
	}
	h := transport.Header{Type: transport.FramePassive, Seq: 1}
	if err := ts[1].Send(transporttest.Context(t, wait), 0, &h, []byte("early")); err != nil {
		t.Fatalf("Send from the higher proc to one not started yet: %v", err)
	}
	r0 := newRecv()
	if err := ts[0].Start(r0); err != nil {
		t.Fatal(err)
	}
	r0.waitSeq(t, 1)
	exchange(t, ts[0], ts[1], r0, r1, 2)
	for i, tr := range ts {
		st := tr.Stats()
		if st.Connections != 1 || st.HandshakesRefused != 0 || st.DialsCrossed != 0 {
			t.Errorf("proc %d stats %+v: want one connection, no refusal, no crossed dial", i, st)
		}
	}
	if st := ts[0].Stats(); st.DialAttempts != 0 {
		t.Errorf("proc 0 dialed %d times; the connection proc 1 made serves both ways", st.DialAttempts)
	}
	noDowns(t, r0.handler)
	noDowns(t, r1.handler)
}

// Rule: Send never blocks past ctx, also while the peer does not read and
// the socket is full; a timeout is not a death (no PeerDown, the stream
// stays intact: a frame cut by the deadline is finished in the background).
func TestStuckWriteHonoursContext(t *testing.T) {
	t.Run("plain", func(t *testing.T) { testStuckWrite(t, testTLS) })
	if !testTLS {
		// A TLS record cut by the deadline is finished from its ciphertext.
		t.Run("tls", func(t *testing.T) { testStuckWrite(t, true) })
	}
}

func testStuckWrite(t *testing.T, tls bool) {
	token := auth.NewToken()
	tr := newOne(t, 1, token, func(c *Config) { c.SocketWriteBuffer, c.TLS = 64<<10, tls }, hooks{})
	h1 := newHandler(nil)
	if err := tr.Start(h1); err != nil {
		t.Fatal(err)
	}
	// A hand-driven proc 0 that connects and then does not read.
	raw, err := rawDialTLS(t, tr.Addr(), token, 0, tls)
	if err != nil {
		t.Fatal(err)
	}
	waitUp(t, tr, 0)
	const size = 1 << 20
	accepted := 0
	var lastErr error
	for seq := range uint64(64) {
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		h := transport.Header{Type: transport.FrameWrite, Seq: seq}
		start := time.Now()
		err := tr.Send(ctx, 0, &h, payloadFor(1, seq, size))
		cancel()
		if el := time.Since(start); el > wait {
			t.Fatalf("Send took %v with a 300ms context", el)
		}
		if err != nil {
			lastErr = err
			break
		}
		accepted++
	}
	if !errors.Is(lastErr, context.DeadlineExceeded) || errors.Is(lastErr, transport.ErrPeerDown) {
		t.Fatalf("Send to a peer that does not read: %v, want DeadlineExceeded and not ErrPeerDown", lastErr)
	}
	t.Logf("%d frames of %d bytes accepted before the timeout: %v", accepted, size, lastErr)

	// A cancellation (not a deadline) unblocks a Send too.
	ctx, cancel := context.WithCancel(t.Context())
	stop := time.AfterFunc(50*time.Millisecond, cancel)
	defer stop.Stop()
	h := transport.Header{Type: transport.FrameWrite, Seq: 1000}
	if err := tr.Send(ctx, 0, &h, payloadFor(1, 1000, size)); !errors.Is(err, context.Canceled) {
		t.Fatalf("Send with a cancelled context: %v, want context.Canceled", err)
	}

	// The peer reads again: every frame it gets is whole and in order, and
	// nothing was lost among those Send accepted.
	type result struct {
		seqs []uint64
		err  error
	}
	got := make(chan result, 1)
	go func() {
		var r result
		for {
			h, p, err := readFrame(raw)
			if err != nil {
				r.err = err
				break
			}
			if h.Seq != 5000 && !bytes.Equal(p, payloadFor(1, h.Seq, size)) {
				r.err = errors.New("payload corrupted")
				break
			}
			r.seqs = append(r.seqs, h.Seq)
			if h.Seq == 5000 {
				break
			}
		}
		got <- r
	}()
	h = transport.Header{Type: transport.FramePassive, Seq: 5000}
	if err := tr.Send(transporttest.Context(t, wait), 0, &h, []byte("marker")); err != nil {
		t.Fatalf("Send after the timeouts: %v", err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("reading the stream after the timeouts: %v (seqs %v)", r.err, r.seqs)
	}
	if len(r.seqs) < accepted+1 {
		t.Fatalf("got %d frames, want at least the %d accepted plus the marker: %v", len(r.seqs), accepted, r.seqs)
	}
	for i := range accepted {
		if r.seqs[i] != uint64(i) {
			t.Fatalf("frame %d has Seq %d: %v", i, r.seqs[i], r.seqs)
		}
	}
	noDowns(t, h1)
}

// Rule: a malformed frame from an authenticated peer is counted, closes the
// connection and makes the peer down; a wrong Src on the wire is replaced by
// the authenticated proc.
func TestBadFrames(t *testing.T) {
	token := auth.NewToken()
	t.Run("SrcOverwritten", func(t *testing.T) {
		tr := newOne(t, 1, token, nil, hooks{})
		type seen struct {
			from transport.Proc
			h    transport.Header
			p    []byte
		}
		frames := make(chan seen, 1)
		if err := tr.Start(newHandler(func(from transport.Proc, h *transport.Header, p transport.Payload) error {
			b := make([]byte, p.Len())
			err := p.ReadInto(b)
			frames <- seen{from, *h, b}
			return err
		})); err != nil {
			t.Fatal(err)
		}
		raw, err := rawDial(t, tr.Addr(), token, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := writeFrame(raw, transport.Header{Type: transport.FrameNotify, Src: 7, Seq: 3}, []byte("abc")); err != nil {
			t.Fatal(err)
		}
		select {
		case s := <-frames:
			if s.from != 0 || s.h.Src != 0 || s.h.Seq != 3 || string(s.p) != "abc" {
				t.Errorf("got from=%d %+v %q; want from=0 Src=0 Seq=3 \"abc\"", s.from, s.h, s.p)
			}
		case <-time.After(wait):
			t.Fatal("frame did not arrive")
		}
	})
	cases := []struct {
		name string
		hdr  func(b []byte)
		want string
	}{
		{"BadType", func(b []byte) { b[4] = 200 }, "unknown frame type"},
		{"ZeroType", func(b []byte) { b[4] = 0 }, "unknown frame type"},
		{"TooLong", func(b []byte) { b[0], b[1], b[2], b[3] = 0xFF, 0xFF, 0xFF, 0xFF }, "above cap"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr := newOne(t, 1, token, nil, hooks{})
			h := newHandler(func(_ transport.Proc, _ *transport.Header, _ transport.Payload) error {
				t.Error("a malformed frame reached the handler")
				return nil
			})
			if err := tr.Start(h); err != nil {
				t.Fatal(err)
			}
			raw, err := rawDial(t, tr.Addr(), token, 0)
			if err != nil {
				t.Fatal(err)
			}
			var b [transport.HeaderSize]byte
			(&transport.Header{Type: transport.FrameWrite}).Encode(b[:])
			c.hdr(b[:])
			if _, err := raw.Write(b[:]); err != nil {
				t.Fatal(err)
			}
			d := waitDown(t, h, 0)
			if !errors.Is(d.err, transport.ErrBadFrame) || !strings.Contains(d.err.Error(), c.want) {
				t.Errorf("PeerDown cause %v, want ErrBadFrame saying %q", d.err, c.want)
			}
			_ = raw.SetReadDeadline(time.Now().Add(wait))
			if _, err := io.Copy(io.Discard, raw); err != nil && !isReset(err) {
				t.Errorf("connection not closed after a bad frame: %v", err)
			}
			if st := tr.Stats(); st.BadFrames != 1 || st.PeersDown != 1 {
				t.Errorf("stats %+v, want one bad frame and one peer down", st)
			}
		})
	}
	t.Run("TruncatedPayload", func(t *testing.T) {
		tr := newOne(t, 1, token, nil, hooks{})
		readErr := make(chan error, 1)
		h := newHandler(func(_ transport.Proc, _ *transport.Header, p transport.Payload) error {
			err := p.ReadInto(make([]byte, p.Len()))
			readErr <- err
			return err
		})
		if err := tr.Start(h); err != nil {
			t.Fatal(err)
		}
		raw, err := rawDial(t, tr.Addr(), token, 0)
		if err != nil {
			t.Fatal(err)
		}
		var b [transport.HeaderSize]byte
		(&transport.Header{Type: transport.FrameWrite, Len: 1000}).Encode(b[:])
		_, _ = raw.Write(append(b[:], "only part of it"...))
		_ = raw.Close()
		if err := <-readErr; !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("ReadInto of a truncated payload: %v, want io.ErrUnexpectedEOF", err)
		}
		waitDown(t, h, 0)
	})
}

func isReset(err error) bool {
	var ne *net.OpError
	return errors.As(err, &ne) && strings.Contains(err.Error(), "reset")
}
