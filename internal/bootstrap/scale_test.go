package bootstrap

import (
	"context"
	"fmt"
	"net"
	"os"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
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

// Rule (doc.go, Rendezvous protocol and the table's way down; STYLE 17):
// the rendezvous is no funnel. N processes registering at once (each as
// RegisterWith does, with its table relay) all get the same table, none
// is shed by the admission gate or times out in its handshake (so no
// registration is repeated), and the rendezvous writes the whole table
// only to the relay tree's first relayRoots processes: O(N) bytes, not N
// tables. It logs the figures (time until all registered, until the last
// table arrived, bytes the server wrote).
func TestRendezvousScale(t *testing.T) {
	for _, n := range scaleSizes(t) {
		t.Run(fmt.Sprint("procs=", n), func(t *testing.T) {
			descriptors(t, 4*n+n/8+64)
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
			var firstErr atomic.Pointer[error]
			tables := make([]Table, n)
			sessions := make([]*Session, n)
			defer func() {
				for _, s := range sessions {
					if s != nil {
						s.Close()
					}
				}
			}()
			for p := range n {
				wg.Go(func() {
					env, self, cfg := j.envFor(uint32(p)), memberFor(uint32(p)), DefaultClientConfig()
					env.NumRanks = n - n/8
					ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
					defer cancel()
					s, tb, err := RegisterWith(ctx, cfg, env, self)
					sessions[p], tables[p] = s, tb
					if err != nil {
						failed.Add(1)
						firstErr.CompareAndSwap(nil, &err)
					}
				})
			}
			wg.Wait()
			wall := time.Since(start)
			registered := <-regC
			if f := failed.Load(); f > 0 {
				t.Fatalf("%d of %d registrations failed; first: %v", f, n, *firstErr.Load())
			}
			for p := range tables {
				if !reflect.DeepEqual(tables[p], tables[0]) {
					t.Fatalf("process %d got another table than process 0", p)
				}
			}
			tmsg, err := encodeMsg(&envelope{Kind: msgTable, Table: &tables[0]}, MaxServerMessage)
			if err != nil {
				t.Fatal(err)
			}
			tb := int64(len(tmsg))
			st := j.srv.Stats()
			written := cl.written.Load()
			load, _ := os.ReadFile("/proc/loadavg")
			t.Logf("procs=%d: all registered in %v, all tables in %v; server wrote %d bytes (%.0f per process; the table is %d bytes, written whole %d times, %d of them asked for); accepted %d connections, shed %d, handshake timeouts %d, refused %d; loadavg %s",
				n, registered.Round(time.Millisecond), wall.Round(time.Millisecond), written, float64(written)/float64(n), tb, st.Tables, st.Asked, st.Accepted, st.Shed, st.TimedOut, st.Refused, strings.TrimSpace(string(load)))
			if st.Shed != 0 || st.TimedOut != 0 || st.Refused != 0 || st.Accepted != uint64(n) {
				t.Errorf("registrations were repeated: accepted %d connections for %d processes, shed %d, timed out %d, refused %d; first log lines:\n%s",
					st.Accepted, n, st.Shed, st.TimedOut, st.Refused, j.log.warnings(5))
			}
			// The whole table to the tree's first relayRoots processes; the
			// handshake, the ack and a notice (a few hundred bytes) to each.
			if st.Tables != uint64(relayRoots) || st.Asked != 0 {
				t.Errorf("the rendezvous wrote the whole table %d times (%d asked for), want %d (the relay tree's first level)", st.Tables, st.Asked, relayRoots)
			}
			if max := int64(relayRoots)*tb + int64(n)*1024; written > max {
				t.Errorf("the server wrote %d bytes, more than %d (the table of %d bytes %d times and 1 KiB per process)", written, max, tb, relayRoots)
			}
		})
	}
}

// descriptors makes sure the test process may open n files: the
// processes of the test live in one process, each with its rendezvous
// connection (both ends) and its relay connection under way (both ends),
// one in eight with a relay listener. It raises the soft limit, and the hard one where it may.
func descriptors(t *testing.T, n int) {
	t.Helper()
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur >= uint64(n) {
		return
	}
	lim.Cur = uint64(n)
	lim.Max = max(lim.Max, lim.Cur)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Skipf("the test needs %d file descriptors, and the limit cannot be raised (%v): run it under ulimit -n %d", n, err, n)
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
