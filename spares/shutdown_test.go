package spares

import (
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/internal/auth"
	"github.com/hashicorp/raft"
)

// Shutdown tests: a node whose only peer never answers, so that Raft's
// shutdown waits on an RPC to it. Shutdown must return in bounded time
// (Config.ShutdownTimeout); the guard of 30s is far above the bound and
// far below the waits the tests set up (forever, or 10 minutes), so the
// tests fail without the bound and pass with it on a busy machine.

const shutdownGuard = 30 * time.Second

// silentPeer starts node 0 of a two-voter job whose other voter, proc 1,
// is a TCP listener that never answers. mut adjusts node 0's config.
func silentPeer(t *testing.T, mut func(*Config)) (*Node, net.Listener) {
	t.Helper()
	listen := func() net.Listener {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		return ln
	}
	raftLn, ctlLn, peerRaft, peerCtl := listen(), listen(), listen(), listen()
	t.Cleanup(func() { peerRaft.Close(); peerCtl.Close() })
	members := []Member{
		{Proc: 0, Host: "h0", Addr: "data-0", RaftAddr: raftLn.Addr().String(), CtlAddr: ctlLn.Addr().String()},
		{Proc: 1, Host: "h1", Addr: "data-1", RaftAddr: peerRaft.Addr().String(), CtlAddr: peerCtl.Addr().String()},
	}
	cfg := LocalConfig()
	cfg.Proc, cfg.Members, cfg.NumRanks, cfg.Token = 0, members, 2, auth.NewToken()
	cfg.RaftListener, cfg.CtlListener = raftLn, ctlLn
	cfg.Logger = testLogger()
	cfg.ShutdownTimeout = 200 * time.Millisecond
	if mut != nil {
		mut(&cfg)
	}
	n, err := NewNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return n, peerRaft
}

// shutdownWithin runs n.Shutdown and fails the test if it is still
// blocked after shutdownGuard.
func shutdownWithin(t *testing.T, n *Node) (time.Duration, error) {
	t.Helper()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- n.Shutdown() }()
	select {
	case err := <-done:
		return time.Since(start), err
	case <-time.After(shutdownGuard):
		t.Fatalf("Shutdown still blocked after %v (ShutdownTimeout %v): Raft's shutdown is not bounded", shutdownGuard, n.cfg.ShutdownTimeout)
		return 0, nil
	}
}

// stuckConn is a connection whose reads and writes block until release
// closes, whatever its deadlines and whether it was closed: a send stuck
// for ever, out of reach of the transport's own remedies.
type stuckConn struct {
	net.Conn
	entered func()
	release <-chan struct{}
}

func (c *stuckConn) Read([]byte) (int, error)  { c.entered(); <-c.release; return 0, net.ErrClosed }
func (c *stuckConn) Write([]byte) (int, error) { c.entered(); <-c.release; return 0, net.ErrClosed }

// A Raft RPC that never returns (its connection ignores deadlines and
// Close) holds hashicorp/raft's Shutdown for ever; Node.Shutdown abandons
// it after ShutdownTimeout and a quarter more, and says so.
func TestShutdownAbandonsStuckRaft(t *testing.T) {
	release := make(chan struct{})
	entered := make(chan struct{})
	var once sync.Once
	var peerRaft string
	n, _ := silentPeer(t, func(c *Config) {
		peerRaft = c.Members[1].RaftAddr
		c.WrapConn = func(conn net.Conn) net.Conn {
			if conn.RemoteAddr().String() != peerRaft {
				return conn
			}
			return &stuckConn{Conn: conn, release: release, entered: func() { once.Do(func() { close(entered) }) }}
		}
	})
	t.Cleanup(func() { close(release) }) // lets the abandoned goroutines end
	select {
	case <-entered: // Raft is in an RPC to the silent peer (a pre-vote)
	case <-time.After(shutdownGuard):
		t.Fatal("Raft never dialed its peer")
	}
	took, err := shutdownWithin(t, n)
	if !errors.Is(err, errTimeout) {
		t.Fatalf("Shutdown = %v, want an error wrapping ErrTimeout (Raft abandoned)", err)
	}
	if took < n.cfg.ShutdownTimeout {
		t.Errorf("Shutdown took %v, less than ShutdownTimeout %v: it did not give Raft its time", took, n.cfg.ShutdownTimeout)
	}
	if again := n.Shutdown(); again != err {
		t.Errorf("second Shutdown = %v, want the first one's %v", again, err)
	}
	if _, ok := <-n.watch(); ok {
		t.Error("Watch channel still open after an abandoned Shutdown")
	}
}

// A peer that accepts Raft's connection and never answers holds Raft's
// RPC until TransportTimeout (10 minutes here). Shutdown closes the
// transport after ShutdownTimeout, which ends the dial under way, and Raft
// then stops: nothing is abandoned.
func TestShutdownCutsRPCsToSilentPeer(t *testing.T) {
	n, ln := silentPeer(t, func(c *Config) { c.TransportTimeout = 10 * time.Minute })
	accepted := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c // held open, never read
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		for c := range accepted {
			c.Close()
		}
	})
	select {
	case c := <-accepted: // Raft dialed the silent peer and waits in the handshake
		if c != nil {
			t.Cleanup(func() { c.Close() })
		}
	case <-time.After(shutdownGuard):
		t.Fatal("Raft never dialed its peer")
	}
	took, err := shutdownWithin(t, n)
	if err != nil {
		t.Fatalf("Shutdown = %v, want nil: closing the transport should have ended Raft's RPC", err)
	}
	if took < n.cfg.ShutdownTimeout {
		t.Errorf("Shutdown took %v, less than ShutdownTimeout %v: was Raft blocked at all?", took, n.cfg.ShutdownTimeout)
	}
}

// The Raft transport replicates one append at a time: pipelined
// replication can wedge for good (hashicorp/raft#612), and a wedged
// replication goroutine holds Raft's Shutdown for ever.
func TestRaftTransportDoesNotPipeline(t *testing.T) {
	n, _ := silentPeer(t, nil)
	defer n.Shutdown()
	n.mu.Lock()
	tr, _ := n.trans.(raft.Transport)
	n.mu.Unlock()
	if tr == nil {
		t.Fatal("the node runs no Raft transport")
	}
	_, err := tr.AppendEntriesPipeline(serverID(1), raft.ServerAddress(n.cfg.Members[1].RaftAddr))
	if !errors.Is(err, raft.ErrPipelineReplicationNotSupported) {
		t.Fatalf("AppendEntriesPipeline = %v, want raft.ErrPipelineReplicationNotSupported", err)
	}
}

// neverAnswered is a Raft future that Raft never answers, as happens to an
// Apply, a Barrier or a configuration change committed just before Raft's
// Shutdown (see Node.await).
type neverAnswered struct{ release <-chan struct{} }

func (f neverAnswered) Error() error { <-f.release; return raft.ErrRaftShutdown }

// A goroutine of the node's that waits on a Raft future must not hold
// Shutdown: the leader's reconcile waiting on a RemoveServer that Raft
// dropped at Shutdown made Shutdown run into its bound and return
// errTimeout (TestNodeFailuresUseSparesThenExhaust/all-raft under load).
func TestShutdownDoesNotWaitForUnansweredFuture(t *testing.T) {
	c := newCluster(t, 2, 0, 1, func(cfg *Config) { cfg.ShutdownTimeout = 500 * time.Millisecond })
	n := c.nodes[0]
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	waiting := make(chan struct{})
	got := make(chan error, 1)
	if !n.goFunc(func() {
		close(waiting)
		got <- n.await(neverAnswered{release})
	}) {
		t.Fatal("node closed")
	}
	<-waiting
	c.nodes[0] = nil
	took, err := shutdownWithin(t, n)
	if err != nil {
		t.Fatalf("Shutdown = %v after %v, want nil: a node goroutine waited on a future Raft never answers", err, took)
	}
	if err := <-got; !errors.Is(err, errClosed) {
		t.Fatalf("await = %v, want ErrClosed", err)
	}
}
