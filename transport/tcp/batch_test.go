package tcp

import (
	"bytes"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/transport"
	"github.com/gaspigo/gaspigo/transport/transporttest"
)

// writeCounter counts the writes made on a dialed connection.
type writeCounter struct {
	net.Conn
	n *atomic.Int64
}

func (w writeCounter) Write(b []byte) (int, error) {
	w.n.Add(1)
	return w.Conn.Write(b)
}

func (w writeCounter) NetConn() net.Conn { return w.Conn }

// connOf returns tr's connection to peer, which is up.
func connOf(t *testing.T, tr *Transport, peer transport.Proc) *conn {
	t.Helper()
	c, err := tr.connTo(transporttest.Context(t, wait), peer) // dials it, as a first Send would
	if err != nil {
		t.Fatalf("connecting proc %d to %d: %v", tr.self, peer, err)
	}
	return c
}

// Rule (Config.BatchFrame): small frames queued while the connection is
// being written go out together, in Send order, with one write; a large
// frame sent after them follows them on the wire.
func TestBatchOneWrite(t *testing.T) {
	if testTLS {
		t.Skip("counts plain socket writes; TLS batches its records itself")
	}
	var writes atomic.Int64
	ts := newCluster(t, 2, func(c *Config) {
		if c.Self == 0 {
			c.WrapConn = func(nc net.Conn) net.Conn { return writeCounter{nc, &writes} }
		}
	})
	const small, large = 100, 3
	var mu sync.Mutex
	var got []uint64
	all := make(chan struct{})
	h1 := newHandler(func(_ transport.Proc, h *transport.Header, p transport.Payload) error {
		buf := make([]byte, p.Len())
		if err := p.ReadInto(buf); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		if !bytes.Equal(buf, payloadFor(0, h.Seq, len(buf))) {
			t.Errorf("frame %d: payload corrupted", h.Seq)
		}
		got = append(got, h.Seq)
		if len(got) == small+large {
			close(all)
		}
		return nil
	})
	if err := ts[1].Start(h1); err != nil {
		t.Fatal(err)
	}
	if err := ts[0].Start(newHandler(nil)); err != nil {
		t.Fatal(err)
	}
	c := connOf(t, ts[0], 1)
	ctx := transporttest.Context(t, wait)

	c.wsem <- struct{}{} // hold the write token: nothing reaches the wire
	before := writes.Load()
	for seq := range uint64(small) {
		h := transport.Header{Type: transport.FramePassive, Seq: seq}
		if err := ts[0].Send(ctx, 1, &h, payloadFor(0, seq, 8+int(seq%3)*100)); err != nil {
			t.Fatalf("Send %d: %v", seq, err)
		}
	}
	if n := writes.Load() - before; n != 0 {
		t.Fatalf("%d writes while the token was held; small frames must be queued", n)
	}
	<-c.wsem // the writer takes the batch
	deadline := time.Now().Add(wait)
	for {
		c.bmu.Lock()
		empty := len(c.batch) == 0
		c.bmu.Unlock()
		if empty {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the writer never took the batch")
		}
		time.Sleep(time.Millisecond)
	}
	// Large frames (above BatchFrame) are written by Send itself, after the
	// batch the writer took.
	for seq := uint64(small); seq < small+large; seq++ {
		h := transport.Header{Type: transport.FrameWrite, Seq: seq}
		if err := ts[0].Send(ctx, 1, &h, payloadFor(0, seq, 64<<10)); err != nil {
			t.Fatalf("Send %d: %v", seq, err)
		}
	}
	select {
	case <-all:
	case <-time.After(wait):
		t.Fatal("not every frame arrived")
	}
	mu.Lock()
	defer mu.Unlock()
	for i, s := range got {
		if s != uint64(i) {
			t.Fatalf("frame %d has Seq %d: order broken: %v", i, s, got)
		}
	}
	// One write for the 100 queued frames; the large ones may take a few
	// each (a writev can return short on a full socket buffer).
	if n := writes.Load() - before; n < 1+large || n > 1+large*4 {
		t.Fatalf("%d writes for %d small and %d large frames; want one for the batch plus the large frames'", n, small, large)
	}
	if st := ts[0].Stats(); st.FramesOut < small+large {
		t.Fatalf("FramesOut %d, want at least %d", st.FramesOut, small+large)
	}
}

// Rule: a Send that returned nil for a queued frame is as good as one that
// wrote it: Close writes what is still batched before it cuts the
// connection, and Queue, the non-blocking form, batches the same way.
func TestBatchFlushedAtClose(t *testing.T) {
	ts := newCluster(t, 2, nil)
	const frames = 50
	r := newRecv()
	if err := ts[1].Start(r); err != nil {
		t.Fatal(err)
	}
	if err := ts[0].Start(newHandler(nil)); err != nil {
		t.Fatal(err)
	}
	c := connOf(t, ts[0], 1)
	c.wsem <- struct{}{} // the writer cannot write until Close runs
	for seq := range uint64(frames) {
		h := transport.Header{Type: transport.FramePassive, Seq: seq}
		if seq%2 == 0 {
			if err := ts[0].Send(transporttest.Context(t, wait), 1, &h, []byte("x")); err != nil {
				t.Fatalf("Send %d: %v", seq, err)
			}
		} else if !ts[0].Queue(1, &h, []byte("y")) {
			t.Fatalf("Queue %d refused a small frame to a connected peer", seq)
		}
	}
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		ts[0].Close()
	}()
	<-c.wsem // Close (or the writer) takes the token and writes the batch
	for seq := range uint64(frames) {
		select {
		case s := <-r.seqs:
			if s != seq {
				t.Fatalf("got Seq %d, want %d", s, seq)
			}
		case <-time.After(wait):
			t.Fatalf("frame %d, queued before Close, never arrived", seq)
		}
	}
	<-closed
	h := transport.Header{Type: transport.FramePassive}
	if ts[0].Queue(1, &h, nil) {
		t.Fatal("Queue after Close accepted a frame")
	}
	big := make([]byte, ts[0].cfg.BatchFrame)
	if ts[1].Queue(0, &h, big) {
		t.Fatal("Queue accepted a frame above BatchFrame")
	}
}
