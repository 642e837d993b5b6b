package tcp

import (
	"context"
	"errors"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/internal/auth"
	"github.com/gaspigo/gaspigo/transport"
	"github.com/gaspigo/gaspigo/transport/transporttest"
)

func TestConfigValidate(t *testing.T) {
	good := func() Config {
		c := LocalConfig()
		c.Self = 3
		c.Token = auth.NewToken()
		return c
	}
	for _, base := range []func() Config{good, func() Config {
		c := DefaultConfig()
		c.Self, c.Token = 0, auth.NewToken()
		return c
	}} {
		c := base()
		if err := c.Validate(); err != nil {
			t.Errorf("valid config rejected: %v", err)
		}
	}
	cases := []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"NoSelf", func(c *Config) { c.Self = transport.NoProc }, "Self"},
		{"NoToken", func(c *Config) { c.Token = nil }, "Token is weak: 0 bytes, want at least 16"},
		{"ShortToken", func(c *Config) { c.Token = auth.NewToken()[:8] }, "Token is weak: 8 bytes"},
		{"ZeroToken", func(c *Config) { c.Token = make([]byte, 32) }, "Token is weak: all 32 bytes are 0x00 (use a random token of 32 bytes: gaspirun --new-token"},
		{"NoAddr", func(c *Config) { c.ListenAddr = "" }, "ListenAddr"},
		{"BadAddr", func(c *Config) { c.ListenAddr = "localhost" }, `ListenAddr "localhost"`},
		{"Handshake", func(c *Config) { c.HandshakeTimeout = 0 }, "HandshakeTimeout"},
		{"DialTimeout", func(c *Config) { c.DialTimeout = -1 }, "DialTimeout"},
		{"Initial", func(c *Config) { c.DialInitialInterval = 0 }, "DialInitialInterval"},
		{"MaxInterval", func(c *Config) { c.DialMaxInterval = c.DialInitialInterval / 2 }, "DialMaxInterval"},
		{"MaxElapsed", func(c *Config) { c.DialMaxElapsed = c.DialInitialInterval / 2 }, "DialMaxElapsed"},
		{"SmallBuffer", func(c *Config) { c.ReadBufferSize = 100 }, "ReadBufferSize 100"},
		{"SockRead", func(c *Config) { c.SocketReadBuffer = -1 }, "SocketReadBuffer"},
		{"SockWrite", func(c *Config) { c.SocketWriteBuffer = -1 }, "SocketWriteBuffer"},
		{"Spin", func(c *Config) { c.PollSpin = time.Second }, "PollSpin 1s"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := good()
			tc.mod(&c)
			before := c
			err := c.Validate()
			if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate = %v, want ErrConfig naming %q", err, tc.want)
			}
			if c.Self != before.Self || c.ListenAddr != before.ListenAddr || c.ReadBufferSize != before.ReadBufferSize {
				t.Error("Validate changed the config")
			}
			if _, err := New(c); !errors.Is(err, ErrConfig) {
				t.Errorf("New with an invalid config: %v, want ErrConfig", err)
			}
		})
	}
	t.Run("ListenerReplacesAddr", func(t *testing.T) {
		c := good()
		c.ListenAddr = ""
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		c.Listener = ln
		if err := c.Validate(); err != nil {
			t.Fatalf("config with a Listener and no ListenAddr: %v", err)
		}
		tr, err := New(c)
		if err != nil {
			t.Fatal(err)
		}
		if tr.Addr() != ln.Addr().String() {
			t.Errorf("Addr() = %s, want the listener's %s", tr.Addr(), ln.Addr())
		}
		_ = tr.Close()
		if _, err := ln.Accept(); err == nil {
			t.Error("Close left the adopted listener open")
		}
	})
}

// Rule: a pre-bound listener works end to end.
func TestPreBoundListener(t *testing.T) {
	token := auth.NewToken()
	ts := make([]*Transport, 2)
	addrs := map[transport.Proc]string{}
	for i := range ts {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ts[i] = newOne(t, transport.Proc(i), token, func(c *Config) { c.Listener = ln }, hooks{})
		addrs[transport.Proc(i)] = ln.Addr().String()
	}
	rs := []*recv{newRecv(), newRecv()}
	for i, tr := range ts {
		if err := tr.SetPeers(addrs); err != nil {
			t.Fatal(err)
		}
		if err := tr.Start(rs[i]); err != nil {
			t.Fatal(err)
		}
	}
	exchange(t, ts[0], ts[1], rs[0], rs[1], 1)
}

// Rule: SetPeers may add peers later (a membership change); the first
// Send either way connects them. Bad tables are rejected whole.
func TestSetPeers(t *testing.T) {
	token := auth.NewToken()
	t1 := newOne(t, 1, token, nil, hooks{})
	r1 := newRecv()
	if err := t1.Start(r1); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []map[transport.Proc]string{
		{0: "nonsense"},
		{transport.NoProc: "127.0.0.1:1"},
		{0: "127.0.0.1:1", 2: ""},
	} {
		if err := t1.SetPeers(bad); !errors.Is(err, ErrPeers) {
			t.Errorf("SetPeers(%v) = %v, want ErrPeers", bad, err)
		}
	}
	h := transport.Header{Type: transport.FramePassive}
	if err := t1.Send(transporttest.Context(t, wait), 0, &h, nil); !errors.Is(err, transport.ErrUnknownPeer) {
		t.Errorf("a rejected table was partly applied: Send to 0 = %v, want ErrUnknownPeer", err)
	}

	// Later, procs 0 and 2 join.
	t0 := newOne(t, 0, token, nil, hooks{})
	t2 := newOne(t, 2, token, nil, hooks{})
	all := map[transport.Proc]string{0: t0.Addr(), 1: t1.Addr(), 2: t2.Addr()}
	for _, tr := range []*Transport{t0, t1, t2, t1} { // twice: an identical table is fine
		if err := tr.SetPeers(all); err != nil {
			t.Fatalf("SetPeers on proc %d: %v", tr.Self(), err)
		}
	}
	r0, r2 := newRecv(), newRecv()
	if err := t0.Start(r0); err != nil {
		t.Fatal(err)
	}
	if err := t2.Start(r2); err != nil {
		t.Fatal(err)
	}
	exchange(t, t0, t1, r0, r1, 1)
	exchange(t, t1, t2, r1, r2, 2)
	if err := t1.SetPeers(map[transport.Proc]string{2: t0.Addr()}); !errors.Is(err, ErrPeers) {
		t.Errorf("moving a known peer: %v, want ErrPeers", err)
	}
}

func TestSendErrors(t *testing.T) {
	ts := newCluster(t, 2, nil)
	ctx := transporttest.Context(t, wait)
	h := transport.Header{Type: transport.FramePassive}
	if err := ts[0].Send(ctx, 1, &h, nil); !errors.Is(err, ErrNotStarted) {
		t.Errorf("Send before Start: %v, want ErrNotStarted", err)
	}
	r0 := newRecv()
	if err := ts[0].Start(r0); err != nil {
		t.Fatal(err)
	}
	if err := ts[0].Start(r0); !errors.Is(err, ErrStarted) {
		t.Errorf("second Start: %v, want ErrStarted", err)
	}
	if err := ts[1].Start(nil); err == nil {
		t.Error("Start(nil) succeeded")
	}
	big := make([]byte, transport.MaxPayload+1)
	if err := ts[0].Send(ctx, 1, &h, big); !errors.Is(err, transport.ErrTooLarge) {
		t.Errorf("Send of MaxPayload+1 bytes: %v, want ErrTooLarge", err)
	}
	for _, to := range []transport.Proc{0, 2, transport.NoProc} {
		if err := ts[0].Send(ctx, to, &h, nil); !errors.Is(err, transport.ErrUnknownPeer) {
			t.Errorf("Send to %d: %v, want ErrUnknownPeer", to, err)
		}
	}

	// Close is idempotent, concurrent calls all return, and everything
	// after it says ErrClosed.
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			if err := ts[0].Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
	}
	wg.Wait()
	if err := ts[0].Send(ctx, 1, &h, []byte("x")); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Send after Close: %v, want ErrClosed", err)
	}
	if err := ts[0].Send(ctx, 1, &h, big); !errors.Is(err, transport.ErrTooLarge) {
		t.Errorf("oversized Send after Close: %v, want ErrTooLarge (checked first)", err)
	}
	if err := ts[0].SetPeers(nil); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("SetPeers after Close: %v, want ErrClosed", err)
	}
	if err := ts[0].Start(r0); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Start after Close: %v, want ErrClosed", err)
	}
	noDowns(t, r0.handler)
}

// Rule: Close stops every goroutine the transport started, including a
// dialer retrying an unreachable peer, one retrying a peer that refuses its
// handshake, a handshake with a silent client, and the readers, and it
// returns promptly.
func TestCloseStopsGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	ts := newCluster(t, 2, nil)
	rs := []*recv{newRecv(), newRecv()}
	dead := deadAddr(t)
	for i, tr := range ts {
		if err := tr.SetPeers(map[transport.Proc]string{7: dead}); err != nil {
			t.Fatal(err)
		}
		if err := tr.Start(rs[i]); err != nil {
			t.Fatal(err)
		}
		// The Send gives up; its dialer goes on retrying.
		ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		h := transport.Header{Type: transport.FramePassive}
		_ = tr.Send(ctx, 7, &h, nil)
		cancel()
	}
	exchange(t, ts[0], ts[1], rs[0], rs[1], 1)
	// A Send to a peer of another job: its dialer retries the refusals.
	t3 := newOne(t, 3, auth.NewToken(), nil, hooks{})
	if err := t3.SetPeers(map[transport.Proc]string{2: ts[1].Addr()}); err != nil {
		t.Fatal(err)
	}
	if err := t3.Start(newRecv()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	h := transport.Header{Type: transport.FramePassive}
	_ = t3.Send(ctx, 2, &h, nil)
	cancel()
	silent, err := net.Dial("tcp", ts[0].Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()

	start := time.Now()
	for _, tr := range append(ts, t3) {
		if err := tr.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if el := time.Since(start); el > wait/2 {
		t.Errorf("Close took %v", el)
	}
	deadline := time.Now().Add(wait)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		runtime.Gosched()
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines after Close, %d before:\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}
}
