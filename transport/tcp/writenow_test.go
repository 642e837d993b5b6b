package tcp

import (
	"bytes"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/transport"
	"github.com/gaspigo/gaspigo/transport/transporttest"
)

// seqRecorder is a handler that checks each frame's payload and records
// the sequence numbers in arrival order.
type seqRecorder struct {
	t    *testing.T
	mu   sync.Mutex
	got  []uint64
	want int
	all  chan struct{}
	gate chan struct{} // when not nil, the first frame waits for it
}

func newSeqRecorder(t *testing.T, want int) *seqRecorder {
	return &seqRecorder{t: t, want: want, all: make(chan struct{})}
}

func (r *seqRecorder) handler() *handler {
	return newHandler(func(from transport.Proc, h *transport.Header, p transport.Payload) error {
		buf := make([]byte, p.Len())
		if err := p.ReadInto(buf); err != nil {
			return err
		}
		if r.gate != nil && h.Seq == 1 {
			<-r.gate
		}
		if !bytes.Equal(buf, payloadFor(from, h.Seq, len(buf))) {
			r.t.Errorf("frame %d: payload corrupted", h.Seq)
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		r.got = append(r.got, h.Seq)
		if len(r.got) == r.want {
			close(r.all)
		}
		return nil
	})
}

func (r *seqRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

// inOrder waits for every frame and checks that seq 1..want came in order.
func (r *seqRecorder) inOrder() {
	r.t.Helper()
	select {
	case <-r.all:
	case <-time.After(wait):
		r.t.Fatalf("%d of %d frames arrived", r.count(), r.want)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, s := range r.got {
		if s != uint64(i+1) {
			r.t.Fatalf("frame %d arrived in place %d: order %v", s, i+1, r.got)
		}
	}
}

// Rule (Config.Linger): a frame sent with SendLater waits in the batch
// until a small frame sent with Send follows it to the same peer, and
// leaves before it, in call order.
func TestSendLaterWaitsForAFrameThatMustLeave(t *testing.T) {
	ts := newCluster(t, 2, nil)
	rec := newSeqRecorder(t, 4)
	if err := ts[1].Start(rec.handler()); err != nil {
		t.Fatal(err)
	}
	if err := ts[0].Start(newHandler(nil)); err != nil {
		t.Fatal(err)
	}
	connOf(t, ts[0], 1)
	ts[0].cfg.Linger = time.Hour // no timer within the test: only the Send takes them
	ctx := transporttest.Context(t, wait)
	for seq := uint64(1); seq <= 3; seq++ {
		h := transport.Header{Type: transport.FrameWrite, Seq: seq}
		if err := ts[0].SendLater(ctx, 1, &h, payloadFor(0, seq, 64)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond)
	if n := rec.count(); n != 0 {
		t.Fatalf("%d lingering frames arrived with no frame after them", n)
	}
	if out := ts[0].Stats().FramesOut; out != 0 {
		t.Fatalf("%d frames written with no frame after them", out)
	}
	h := transport.Header{Type: transport.FrameNotify, Seq: 4}
	if err := ts[0].Send(ctx, 1, &h, payloadFor(0, 4, 8)); err != nil {
		t.Fatal(err)
	}
	rec.inOrder()
}

// Rule (Config.Linger): a frame sent with SendLater and nothing after it
// leaves once Linger has passed.
func TestSendLaterLeavesAfterLinger(t *testing.T) {
	ts := newCluster(t, 2, func(c *Config) { c.Linger = time.Millisecond })
	rec := newSeqRecorder(t, 2)
	if err := ts[1].Start(rec.handler()); err != nil {
		t.Fatal(err)
	}
	if err := ts[0].Start(newHandler(nil)); err != nil {
		t.Fatal(err)
	}
	ctx := transporttest.Context(t, wait)
	for seq := uint64(1); seq <= 2; seq++ {
		h := transport.Header{Type: transport.FrameWrite, Seq: seq}
		if err := ts[0].SendLater(ctx, 1, &h, payloadFor(0, seq, 100)); err != nil {
			t.Fatal(err)
		}
	}
	rec.inOrder()
}

// Rule (conn.writeNow): small frames that must leave now are written by
// their callers while the connection is idle; when the socket is full the
// rest goes to the connection's writer, ahead of what is queued since, so
// every frame arrives whole and in order. The receiver holds its first
// frame until the sender has filled both socket buffers.
func TestSmallFramesInOrderPastAFullSocket(t *testing.T) {
	if testTLS {
		t.Skip("writeNow needs a raw socket; under TLS small frames go through the writer")
	}
	const frames, size = 200, 1000
	ts := newCluster(t, 2, func(c *Config) {
		c.SocketReadBuffer, c.SocketWriteBuffer = 8<<10, 8<<10
		c.BatchBytes = 64 << 10
	})
	rec := newSeqRecorder(t, frames)
	rec.gate = make(chan struct{})
	if err := ts[1].Start(rec.handler()); err != nil {
		t.Fatal(err)
	}
	if err := ts[0].Start(newHandler(nil)); err != nil {
		t.Fatal(err)
	}
	c := connOf(t, ts[0], 1)
	if c.now == nil {
		t.Fatalf("no raw socket under the dialed connection (%T)", c.nc)
	}
	ctx := transporttest.Context(t, wait)
	sent := make(chan error, 1)
	go func() {
		for seq := uint64(1); seq <= frames; seq++ {
			h := transport.Header{Type: transport.FrameNotify, Seq: seq}
			if err := ts[0].Send(ctx, 1, &h, payloadFor(0, seq, size)); err != nil {
				sent <- err
				return
			}
		}
		sent <- nil
	}()
	deadline := time.Now().Add(wait)
	for c.nowShort.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if c.nowShort.Load() == 0 {
		t.Fatal("no write of a caller found the socket full: the case was not exercised")
	}
	close(rec.gate)
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	rec.inOrder()
}

// rawSocket finds the socket under a plain or an accepted connection, and
// none under a wrapper it does not know (a fault injector must see every
// byte).
func TestRawSocketOnlyThroughKnownWrappers(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if rawSocket(nc) == nil {
		t.Error("no raw socket under a plain TCP connection")
	}
	if rawSocket(&watchedConn{Conn: nc, sealed: true}) == nil {
		t.Error("no raw socket under an accepted connection")
	}
	if rawSocket(writeCounter{Conn: nc}) != nil {
		t.Error("a raw socket under an unknown wrapper: its writes would go around it")
	}
}
