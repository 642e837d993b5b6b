package shm

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gaspigo/gaspigo/internal/auth"
	"github.com/gaspigo/gaspigo/transport"
	"github.com/gaspigo/gaspigo/transport/transporttest"
)

// A process of another job (another token) gets no ring mapped: its Send
// fails with ErrNoPath, the listener counts a refusal, and nothing is
// delivered.
func TestForeignTokenRefused(t *testing.T) {
	ts, recs := startCluster(t, 1)
	cfg := DefaultConfig()
	cfg.Self, cfg.Token = 1, auth.NewToken()
	stranger, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer stranger.Close()
	if err := stranger.SetPeers(map[transport.Proc]string{0: ts[0].Addr()}); err != nil {
		t.Fatal(err)
	}
	if err := stranger.Start(transporttest.NewRecorder()); err != nil {
		t.Fatal(err)
	}
	h := transport.Header{Type: transport.FramePassive}
	err = stranger.Send(transporttest.Context(t, transporttest.Timeout), 0, &h, []byte("let me in"))
	if !errors.Is(err, ErrNoPath) || !errors.Is(err, transport.ErrAuth) {
		t.Fatalf("Send with a foreign token: got %v, want ErrNoPath and ErrAuth", err)
	}
	// Proc 1 is not a peer of ts[0] either; both reasons refuse it.
	ctx := transporttest.Context(t, transporttest.Timeout)
	for ts[0].Stats().Refused.Load() == 0 {
		runtime.Gosched()
		if ctx.Err() != nil {
			t.Fatal("the refusal was not counted")
		}
	}
	if n := len(recs[0].Frames()); n != 0 {
		t.Fatalf("%d frames delivered from a foreign process", n)
	}
}

// A ring whose shared tail says more than the ring holds (a broken or
// malicious peer) fails that peer's connection with ErrCorrupt, once,
// without reading out of bounds.
func TestCorruptTail(t *testing.T) {
	ts, recs := startCluster(t, 2)
	ctx := transporttest.Context(t, transporttest.Timeout)
	h := transport.Header{Type: transport.FramePassive}
	if err := ts[0].Send(ctx, 1, &h, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if _, err := recs[1].WaitFrames(ctx, 1); err != nil {
		t.Fatal(err)
	}
	p := ts[0].peer(1)
	p.sem <- struct{}{}
	p.out.r.tail.Store(p.out.tail + 10*p.out.r.size())
	p.out.r.consIdle.Store(0)
	p.out.conn.Write(wakeByte)
	<-p.sem
	d, err := recs[1].WaitDown(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(d.Err, ErrCorrupt) || !errors.Is(d.Err, transport.ErrPeerDown) {
		t.Fatalf("PeerDown error %v, want ErrCorrupt and ErrPeerDown", d.Err)
	}
}

// Config.Validate names what is wrong.
func TestConfigValidate(t *testing.T) {
	good := DefaultConfig()
	good.Self, good.Token = 0, auth.NewToken()
	if err := good.Validate(); err != nil {
		t.Fatalf("good config: %v", err)
	}
	for name, mod := range map[string]func(*Config){
		"no self":       func(c *Config) { c.Self = transport.NoProc },
		"short token":   func(c *Config) { c.Token = c.Token[:4] },
		"odd ring":      func(c *Config) { c.RingSize = MinRingSize + 1 },
		"tiny ring":     func(c *Config) { c.RingSize = MinRingSize / 2 },
		"negative spin": func(c *Config) { c.Spin = -1 },
		"no handshake":  func(c *Config) { c.HandshakeTimeout = 0 },
	} {
		c := good
		mod(&c)
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: got %v, want ErrConfig", name, err)
		}
	}
}

// Rule (package doc, Rings): a ring is set up by the first Send over it,
// never at Start: processes that send around a ring hold rings only with
// their two neighbours (Connected), whatever the number of processes.
func TestRingsOnFirstUse(t *testing.T) {
	const n = 8
	ts, recs := startCluster(t, n)
	for i, tr := range ts {
		for j := range n {
			if tr.Connected(transport.Proc(j)) {
				t.Fatalf("proc %d connected to %d before any Send", i, j)
			}
		}
	}
	ctx := transporttest.Context(t, transporttest.Timeout)
	for i, tr := range ts {
		h := transport.Header{Type: transport.FramePassive}
		if err := tr.Send(ctx, transport.Proc((i+1)%n), &h, []byte("next")); err != nil {
			t.Fatal(err)
		}
	}
	for i, r := range recs {
		if _, err := r.WaitFrames(ctx, 1); err != nil {
			t.Fatalf("proc %d: %v", i, err)
		}
	}
	for i, tr := range ts {
		for j := range n {
			want := j == (i+1)%n || j == (i+n-1)%n
			if got := tr.Connected(transport.Proc(j)); got != want {
				t.Errorf("proc %d: Connected(%d) = %v, want %v", i, j, got, want)
			}
		}
	}
}

// Rule (ErrNoPath, dialFailed): when this process cannot set up its ring
// to a peer whose ring to it works (the peer's handshake ran out of time
// on a starved host; here its listener is gone), the Send fails with
// ErrNoPath for a router to take TCP, and nothing else changes: no
// PeerDown, and the peer's frames keep arriving.
func TestDialBackFailureKeepsPeer(t *testing.T) {
	ts, recs := startCluster(t, 2)
	ctx := transporttest.Context(t, transporttest.Timeout)
	h := transport.Header{Type: transport.FramePassive, Seq: 1}
	if err := ts[1].Send(ctx, 0, &h, []byte("first")); err != nil {
		t.Fatal(err)
	}
	if _, err := recs[0].WaitFrames(ctx, 1); err != nil {
		t.Fatal(err)
	}
	ts[1].ln.Close() // proc 0 cannot connect to proc 1 any more
	h = transport.Header{Type: transport.FramePassive}
	if err := ts[0].Send(ctx, 1, &h, []byte("back")); !errors.Is(err, ErrNoPath) {
		t.Fatalf("Send 0->1 with proc 1's listener gone: %v, want ErrNoPath", err)
	}
	h = transport.Header{Type: transport.FramePassive, Seq: 2}
	if err := ts[1].Send(ctx, 0, &h, []byte("second")); err != nil {
		t.Fatal(err)
	}
	if _, err := recs[0].WaitFrames(ctx, 2); err != nil {
		t.Fatal(err)
	}
	if !ts[0].Connected(1) {
		t.Error("proc 0 lost proc 1's ring")
	}
	if d := recs[0].Downs(); len(d) != 0 {
		t.Errorf("PeerDown after a failed dial back: %v", d)
	}
}

// Rule (package doc, Rings): a ring is established only once its sender
// confirmed the receiver's acknowledgement. A sender that gives the ring
// up before (its set-up ran out of time) costs the receiver no PeerDown,
// and its next ring is accepted.
func TestUnconfirmedRingDropped(t *testing.T) {
	ts, recs := startCluster(t, 2)
	// Proc 1's set-up, by hand, up to the acknowledgement, then given up.
	nc, err := net.Dial("unix", ts[0].Addr())
	if err != nil {
		t.Fatal(err)
	}
	c := nc.(*net.UnixConn)
	_ = c.SetDeadline(time.Now().Add(transporttest.Timeout))
	if _, err := auth.Handshake(c, ts[1].cfg.Token, auth.PurposeShm, 1, true); err != nil {
		t.Fatal(err)
	}
	fd, r, err := newRing(MinRingSize)
	if err != nil {
		t.Fatal(err)
	}
	defer r.unmap()
	var msg [offerSize]byte
	binary.LittleEndian.PutUint32(msg[0:], offerMagic)
	binary.LittleEndian.PutUint32(msg[4:], ringVersion)
	binary.LittleEndian.PutUint64(msg[8:], r.size())
	_, _, err = c.WriteMsgUnix(msg[:], unix.UnixRights(fd), nil)
	unix.Close(fd)
	if err != nil {
		t.Fatal(err)
	}
	var ack [1]byte
	if _, err := io.ReadFull(c, ack[:]); err != nil || ack[0] != 1 {
		t.Fatalf("acknowledgement %v, %v", ack, err)
	}
	c.Close() // no confirmation

	ctx := transporttest.Context(t, transporttest.Timeout)
	h := transport.Header{Type: transport.FramePassive, Seq: 7}
	if err := ts[1].Send(ctx, 0, &h, []byte("the real ring")); err != nil {
		t.Fatalf("Send 1->0 after an unconfirmed ring: %v", err)
	}
	frames, err := recs[0].WaitFrames(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if frames[0].Header.Seq != 7 {
		t.Errorf("frame Seq %d, want 7", frames[0].Header.Seq)
	}
	if d := recs[0].Downs(); len(d) != 0 {
		t.Errorf("PeerDown after an unconfirmed ring: %v", d)
	}
}
