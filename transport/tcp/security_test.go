package tcp

import (
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

// Rule (docs/design.md §9.6): a connection that fails the job-token handshake, or
// that breaks the connection rules, is refused, logged and counted, never
// produces PeerDown, and the job goes on.
func TestRefusals(t *testing.T) {
	token := auth.NewToken()
	ev := newEvents()
	t0 := newOne(t, 0, token, nil, hooks{})
	t1 := newOne(t, 1, token, nil, ev.hooks())
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
	exchange(t, t0, t1, r0, r1, 1)

	refusals := uint64(0)
	check := func(t *testing.T, want string) {
		t.Helper()
		err := ev.waitRefused(t)
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q does not mention %q", err, want)
		}
		refusals++
		if st := t1.Stats(); st.HandshakesRefused != refusals {
			t.Errorf("HandshakesRefused = %d, want %d", st.HandshakesRefused, refusals)
		}
	}
	// Each case ends with the refused connection closed by t1.
	closedByServer := func(t *testing.T, nc net.Conn) {
		t.Helper()
		_ = nc.SetReadDeadline(time.Now().Add(wait))
		if _, err := io.Copy(io.Discard, nc); err != nil && !isReset(err) {
			t.Errorf("refused connection not closed: %v", err)
		}
	}

	t.Run("WrongToken", func(t *testing.T) {
		nc, err := rawDial(t, t1.Addr(), auth.NewToken(), 0)
		if !errors.Is(err, auth.ErrAuth) {
			t.Errorf("handshake with a wrong token: %v, want auth.ErrAuth", err)
		}
		check(t, "wrong job token")
		closedByServer(t, nc)
	})
	t.Run("WrongPurpose", func(t *testing.T) {
		nc, err := net.Dial("tcp", t1.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		_ = nc.SetDeadline(time.Now().Add(wait))
		if _, err := auth.Handshake(nc, token, auth.PurposeControl, 0, true); err == nil {
			t.Error("handshake for another purpose succeeded")
		}
		check(t, "purpose")
	})
	t.Run("Duplicate", func(t *testing.T) {
		nc, err := rawDial(t, t1.Addr(), token, 0) // proc 0 is connected already, by its own dial
		if !errors.Is(err, errVerdict) {
			t.Fatalf("handshake: %v, want a refusal verdict", err)
		}
		check(t, "already connected")
		closedByServer(t, nc)
	})
	t.Run("ClaimsSelf", func(t *testing.T) {
		nc, err := rawDial(t, t1.Addr(), token, 1)
		if err == nil {
			t.Fatal("a connection claiming to be proc 1 was accepted by proc 1")
		}
		check(t, "this process")
		closedByServer(t, nc)
	})
	t.Run("Garbage", func(t *testing.T) {
		nc, err := net.Dial("tcp", t1.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		_, _ = nc.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n0123456789012345678901234567890123456789"))
		check(t, "bad magic")
		closedByServer(t, nc)
	})
	t.Run("Probe", func(t *testing.T) {
		nc, err := net.Dial("tcp", t1.Addr())
		if err != nil {
			t.Fatal(err)
		}
		_ = nc.Close()
		select {
		case <-ev.probes:
		case <-time.After(wait):
			t.Fatal("probe connection not seen")
		}
		if st := t1.Stats(); st.Probes != 1 || st.HandshakesRefused != refusals {
			t.Errorf("stats %+v: want 1 probe and no new refusal", st)
		}
	})

	// The job went on: the original connection still works and nobody was
	// reported down.
	exchange(t, t0, t1, r0, r1, 2)
	noDowns(t, r0.handler)
	noDowns(t, r1.handler)
	if st := t1.Stats(); st.PeersDown != 0 || st.BadFrames != 0 {
		t.Errorf("stats %+v: refusals must not count as downs or bad frames", st)
	}
}

// Rule: a client that connects and says nothing is cut off after
// HandshakeTimeout and refused.
func TestSilentClientTimesOut(t *testing.T) {
	ev := newEvents()
	tr := newOne(t, 1, auth.NewToken(), func(c *Config) { c.HandshakeTimeout = 100 * time.Millisecond }, ev.hooks())
	nc, err := net.Dial("tcp", tr.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	err = ev.waitRefused(t)
	if !strings.Contains(err.Error(), "timeout") {
		t.Errorf("refusal %q does not mention the timeout", err)
	}
	if st := tr.Stats(); st.HandshakesRefused != 1 {
		t.Errorf("HandshakesRefused = %d, want 1", st.HandshakesRefused)
	}
}

// Rule: a dialer whose peer fails the handshake (another job listening at
// the address) retries, counts the refusals, and finally reports the peer
// down.
func TestDialWrongJob(t *testing.T) {
	other := newOne(t, 1, auth.NewToken(), nil, hooks{})
	ev := newEvents()
	tr := newOne(t, 0, auth.NewToken(), func(c *Config) {
		c.DialInitialInterval = 5 * time.Millisecond
		c.DialMaxInterval = 20 * time.Millisecond
		c.DialMaxElapsed = 100 * time.Millisecond
	}, ev.hooks())
	if err := tr.SetPeers(map[transport.Proc]string{1: other.Addr()}); err != nil {
		t.Fatal(err)
	}
	h := newHandler(nil)
	if err := tr.Start(h); err != nil {
		t.Fatal(err)
	}
	hd := transport.Header{Type: transport.FramePassive}
	if err := tr.Send(transporttest.Context(t, wait), 1, &hd, nil); !errors.Is(err, transport.ErrPeerDown) {
		t.Errorf("Send to a peer of another job: %v, want ErrPeerDown once the dialer gave up", err)
	}
	if err := ev.waitRefused(t); !errors.Is(err, transport.ErrAuth) {
		t.Errorf("refusal %v does not wrap transport.ErrAuth", err)
	}
	d := waitDown(t, h, 1)
	if !errors.Is(d.err, transport.ErrAuth) {
		t.Errorf("PeerDown cause %v does not wrap transport.ErrAuth", d.err)
	}
}
