package bootstrap

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/internal/auth"
)

// countingListener counts the bytes the server writes on its connections.
type countingListener struct {
	net.Listener
	written atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, n: &l.written}, nil
}

type countingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c *countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.n.Add(int64(n))
	return n, err
}

// scaleSizes are the job sizes TestRendezvousScale registers: 512 by
// default (-short: none): above what the shared admission gate holds;
// GASPIGO_RENDEZVOUS_SCALE=512,4096 for others.
func scaleSizes(t *testing.T) []int {
	v := os.Getenv("GASPIGO_RENDEZVOUS_SCALE")
	if v == "" {
		if testing.Short() {
			t.Skip("-short")
		}
		return []int{512}
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 2 || n > MaxProcs {
			t.Fatalf("GASPIGO_RENDEZVOUS_SCALE=%q: want sizes 2..%d separated by commas", v, MaxProcs)
		}
		out = append(out, n)
	}
	return out
}

// Rule (doc.go, Rendezvous protocol; STYLE 17): the rendezvous is no
// funnel. N processes registering at once all get the table, none is shed
// by the admission gate or times out in its handshake (so no registration
// is repeated), and the server writes the table once per process in one
// encoding: at most N table messages plus N small acks. It logs the
// figures (time until all registered, until the last table arrived, bytes
// the server wrote). The clients speak the protocol as RegisterWith does
// (handshake, hello, ack, table) but decode only process 0's table: N
// clients decoding N tables in one process would measure the decoder
// N times over, not the server.
func TestRendezvousScale(t *testing.T) {
	for _, n := range scaleSizes(t) {
		t.Run(fmt.Sprint("procs=", n), func(t *testing.T) {
			var cl *countingListener
			j := startServer(t, n, n-n/8, func(c *ServerConfig) {
				cl = &countingListener{Listener: c.Listener}
				c.Listener = cl
				c.HandshakeTimeout = DefaultServerConfig().HandshakeTimeout
			})
			start := time.Now()
			regC := make(chan time.Duration, 1)
			stop := make(chan struct{})
			defer close(stop)
			go func() {
				select {
				case <-j.srv.Complete():
					regC <- time.Since(start)
				case <-stop:
				}
			}()
			var wg sync.WaitGroup
			var failed atomic.Int64
			var tableBytes atomic.Int64
			var firstErr atomic.Pointer[error]
			frames := make([]int, n)
			conns := make([]net.Conn, n)
			defer func() {
				for _, c := range conns {
					if c != nil {
						c.Close()
					}
				}
			}()
			for p := range n {
				wg.Go(func() {
					c, size, err := rawRegister(j, uint32(p), n-n/8, p == 0)
					conns[p], frames[p] = c, size
					if err != nil {
						failed.Add(1)
						firstErr.CompareAndSwap(nil, &err)
						return
					}
					if p == 0 {
						tableBytes.Store(int64(size))
					}
				})
			}
			wg.Wait()
			wall := time.Since(start)
			registered := <-regC
			if f := failed.Load(); f > 0 {
				t.Fatalf("%d of %d registrations failed; first: %v", f, n, *firstErr.Load())
			}
			for p, f := range frames {
				if f != frames[0] {
					t.Fatalf("process %d got a table of %d bytes, process 0 one of %d", p, f, frames[0])
				}
			}
			st := j.srv.Stats()
			written := cl.written.Load()
			tb := tableBytes.Load()
			load, _ := os.ReadFile("/proc/loadavg")
			t.Logf("procs=%d: all registered in %v, all tables in %v; server wrote %d bytes (%.0f per process; the table is %d bytes); accepted %d connections, shed %d, handshake timeouts %d, refused %d; loadavg %s",
				n, registered.Round(time.Millisecond), wall.Round(time.Millisecond), written, float64(written)/float64(n), tb, st.Accepted, st.Shed, st.TimedOut, st.Refused, strings.TrimSpace(string(load)))
			if st.Shed != 0 || st.TimedOut != 0 || st.Refused != 0 || st.Accepted != uint64(n) {
				t.Errorf("registrations were repeated: accepted %d connections for %d processes, shed %d, timed out %d, refused %d; first log lines:\n%s",
					st.Accepted, n, st.Shed, st.TimedOut, st.Refused, j.log.warnings(5))
			}
			// The handshake writes a few hundred bytes per connection; the
			// table goes once to each process.
			if max := int64(n) * (tb + 1024); written > max {
				t.Errorf("the server wrote %d bytes, more than %d (one table of %d bytes and 1 KiB per process)", written, max, tb)
			}
		})
	}
}

// warnings returns the first n log lines at warning level.
func (l *logRecorder) warnings(n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.lines {
		if strings.HasPrefix(line, "WARN") && len(out) < n {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// stallListener wraps the server's listener: writes to a connection whose
// remote address the test marked stalled block until their write deadline
// (or the end of the test), as writes to a process that stopped reading
// do once the socket buffers are full.
type stallListener struct {
	net.Listener
	mu      sync.Mutex
	stalled map[string]bool
	done    chan struct{}
}

func (l *stallListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &stallConn{Conn: c, l: l}, nil
}

func (l *stallListener) stall(remote string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stalled[remote] = true
}

type stallConn struct {
	net.Conn
	l        *stallListener
	deadline atomic.Pointer[time.Time]
}

func (c *stallConn) SetWriteDeadline(t time.Time) error {
	c.deadline.Store(&t)
	return c.Conn.SetWriteDeadline(t)
}

func (c *stallConn) Write(b []byte) (int, error) {
	c.l.mu.Lock()
	stalled := c.l.stalled[c.RemoteAddr().String()]
	c.l.mu.Unlock()
	if !stalled {
		return c.Conn.Write(b)
	}
	var expire <-chan time.Time
	if d := c.deadline.Load(); d != nil && !d.IsZero() {
		t := time.NewTimer(time.Until(*d))
		defer t.Stop()
		expire = t.C
	}
	select {
	case <-expire:
	case <-c.l.done:
	}
	return 0, os.ErrDeadlineExceeded
}

// stalledClient registers proc, reads its ack, and from then on reads
// nothing: the server's writes to it stall.
func stalledClient(t *testing.T, j *testJob, l *stallListener, proc uint32) {
	t.Helper()
	c, err := net.DialTimeout("tcp", j.env.Rendezvous, testDeadline)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(testDeadline))
	rw, _, err := auth.Dial(c, j.env.Token, auth.PurposeRendezvous, proc, j.env.TLS)
	if err != nil {
		t.Fatal(err)
	}
	env := j.envFor(proc)
	h := &envelope{Kind: msgHello, Hello: &hello{Version: protoVersion, NumProcs: env.NumProcs, NumRanks: env.NumRanks, JobID: env.JobID,
		Member: Member{Proc: proc, Addr: memberFor(proc).Addr, Host: env.Host, Pid: 1000 + int(proc)}}}
	if err := writeMsg(rw, h, MaxClientMessage); err != nil {
		t.Fatal(err)
	}
	if m, err := readMsg(rw, MaxServerMessage); err != nil || m.Kind != msgAck {
		t.Fatalf("stalled client %d: %v, %+v", proc, err, m)
	}
	l.stall(c.LocalAddr().String())
}

// Rule (doc.go, Rendezvous protocol): processes that register and then do
// not read (stopped, swapped out, on a congested link) do not hold up the
// table for the others: the writes overlap, each bounded by WriteTimeout.
func TestTableNotHeldUpByStalledReaders(t *testing.T) {
	var sl *stallListener
	j := startServer(t, 4, 4, func(c *ServerConfig) {
		sl = &stallListener{Listener: c.Listener, stalled: map[string]bool{}, done: make(chan struct{})}
		c.Listener = sl
		c.WriteTimeout = time.Minute
	})
	t.Cleanup(func() { close(sl.done) })
	// The stalled ones have the lowest ids: the table goes to them first.
	stalledClient(t, j, sl, 0)
	stalledClient(t, j, sl, 1)
	a, b := j.registerAsync(t, 2), j.registerAsync(t, 3)
	for _, ch := range []<-chan regResult{a, b} {
		if r := recv(t, ch); r.err != nil || len(r.table.Members) != 4 {
			t.Fatalf("registration: %v, %d members", r.err, len(r.table.Members))
		}
	}
}

// rawRegister registers proc as RegisterWith does and returns its
// connection and the size of the table's frame; only when decode is set
// is the table decoded and checked.
func rawRegister(j *testJob, proc uint32, nranks int, decode bool) (net.Conn, int, error) {
	c, err := net.DialTimeout("tcp", j.env.Rendezvous, time.Minute)
	if err != nil {
		return nil, 0, err
	}
	c.SetDeadline(time.Now().Add(3 * time.Minute))
	rw, _, err := auth.Dial(c, j.env.Token, auth.PurposeRendezvous, proc, j.env.TLS)
	if err != nil {
		return c, 0, err
	}
	env := j.envFor(proc)
	self := memberFor(proc)
	self.Host, self.Pid = env.Host, 1000+int(proc)
	h := &envelope{Kind: msgHello, Hello: &hello{Version: protoVersion, NumProcs: env.NumProcs, NumRanks: nranks, JobID: env.JobID, Member: self}}
	if err := writeMsg(rw, h, MaxClientMessage); err != nil {
		return c, 0, err
	}
	for {
		var hdr [4]byte
		if _, err := io.ReadFull(rw, hdr[:]); err != nil {
			return c, 0, err
		}
		body := make([]byte, binary.BigEndian.Uint32(hdr[:]))
		if _, err := io.ReadFull(rw, body); err != nil {
			return c, 0, err
		}
		if len(body) < 64 {
			m, err := decodeBody(body)
			if err != nil || m.Kind != msgAck {
				return c, 0, fmt.Errorf("process %d: expected an ack: %v %+v", proc, err, m)
			}
			continue
		}
		if decode {
			m, err := decodeBody(body)
			if err != nil || m.Kind != msgTable || m.Table.Validate() != nil || len(m.Table.Members) != env.NumProcs {
				return c, 0, fmt.Errorf("process %d: bad table: %v", proc, err)
			}
		}
		return c, 4 + len(body), nil
	}
}
