package spares

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// raftNode returns this process's Raft node, nil while it is a client
// (Config.VotersOnly).
func (n *Node) raftNode() *raft.Raft { return n.rft.Load() }

// startRaft starts this process's Raft node. With bootstrap, it first
// writes the initial configuration servers (every process of the
// all-Raft mode, or the initial voters) unless its stores hold state
// already. Without, it waits for the leader to add it. It is called once
// (under startMu); the node owns the Raft node from then on.
func (n *Node) startRaft(bootstrap bool, servers []raft.Server) error {
	hlog := newRaftLogger(n.log)
	stores, err := openRaftStores(&n.cfg, hlog)
	if err != nil {
		return err
	}
	trans, err := n.raftTransport(hlog)
	if err != nil {
		stores.close()
		return err
	}
	r, notifyCh, err := n.newRaft(bootstrap, servers, stores, trans, hlog)
	if err == nil {
		err = n.adoptRaft(r, trans, stores.bolt)
	}
	if err != nil {
		if c, ok := trans.(raft.WithClose); ok {
			c.Close()
		}
		stores.close()
		return err
	}
	n.runRaft(r, notifyCh, bootstrap, servers)
	return nil
}

// raftStores are a Raft node's log, stable and snapshot stores, and the
// bolt database behind the first two when they are on disk.
type raftStores struct {
	logs   raft.LogStore
	stable raft.StableStore
	snaps  raft.SnapshotStore
	bolt   *raftboltdb.BoltStore // nil: in memory
}

// openRaftStores opens the stores of cfg.Proc: in memory, or, with a
// StateDir, in StateDir/proc-<Proc> (owner-only). On failure it closes
// what it opened.
func openRaftStores(cfg *Config, hlog hclog.Logger) (raftStores, error) {
	if cfg.StateDir == "" {
		mem := raft.NewInmemStore()
		return raftStores{logs: mem, stable: mem, snaps: raft.NewInmemSnapshotStore()}, nil
	}
	dir := filepath.Join(cfg.StateDir, fmt.Sprintf("proc-%d", cfg.Proc))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return raftStores{}, fmt.Errorf("spares: state directory: %w", err)
	}
	bolt, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db")})
	if err != nil {
		return raftStores{}, fmt.Errorf("spares: open raft log in %s: %w", dir, err)
	}
	fss, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, hlog)
	if err != nil {
		bolt.Close()
		return raftStores{}, fmt.Errorf("spares: snapshot store in %s: %w", dir, err)
	}
	ps, err := newPrivateSnapshots(fss, filepath.Join(dir, "snapshots"))
	if err != nil {
		bolt.Close()
		return raftStores{}, fmt.Errorf("spares: snapshot store in %s: %w", dir, err)
	}
	return raftStores{logs: bolt, stable: bolt, snaps: ps, bolt: bolt}, nil
}

// close closes the bolt database, if any (the stores in memory need
// nothing).
func (s raftStores) close() {
	if s.bolt != nil {
		s.bolt.Close()
	}
}

// raftTransport returns the Raft transport: the Network's, or TCP over
// the node's authenticated stream.
func (n *Node) raftTransport(hlog hclog.Logger) (raft.Transport, error) {
	if nw := n.cfg.Network; nw != nil {
		trans, err := nw.RaftTransport(n.cfg.Proc, n.self.RaftAddr)
		if err != nil {
			return nil, fmt.Errorf("spares: raft transport: %w", err)
		}
		return trans, nil
	}
	return raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  n.stream,
		MaxPool: 3,
		Timeout: n.cfg.TransportTimeout,
		Logger:  hlog,
		// No pipelined replication: its sender and decoder can wedge
		// each other for good once a follower rejects an append or
		// answers with a newer term (hashicorp/raft#612), and the
		// wedged replication goroutine then holds Raft's Shutdown for
		// ever. The membership's log is a handful of small entries:
		// one append at a time costs nothing here.
		MaxRPCsInFlight: 1,
	}), nil
}

// raftConfig is Raft's configuration from the node's: its timings, and
// notifyCh to tell of leadership changes.
func (n *Node) raftConfig(notifyCh chan bool, hlog hclog.Logger) *raft.Config {
	cfg := n.cfg
	rc := raft.DefaultConfig()
	rc.LocalID = serverID(cfg.Proc)
	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.LeaderLeaseTimeout
	rc.CommitTimeout = cfg.CommitTimeout
	rc.SnapshotThreshold = cfg.SnapshotThreshold
	rc.TrailingLogs = cfg.SnapshotThreshold
	rc.NotifyCh = notifyCh
	rc.ShutdownOnRemove = false // a removed (declared failed) node keeps its last view readable
	rc.Logger = hlog
	return rc
}

// newRaft starts a Raft node over stores and trans, bootstrapped first
// with servers if asked, and returns it with the channel that tells of
// its leadership changes.
func (n *Node) newRaft(bootstrap bool, servers []raft.Server, s raftStores, trans raft.Transport, hlog hclog.Logger) (*raft.Raft, <-chan bool, error) {
	notifyCh := make(chan bool, 16)
	rc := n.raftConfig(notifyCh, hlog)
	if err := raft.ValidateConfig(rc); err != nil {
		return nil, nil, fmt.Errorf("%w: raft: %v", errConfig, err)
	}
	// The package-level bootstrap writes the same first log entry on every
	// process it is given to, voter or not (Raft.BootstrapCluster refuses
	// non-voters).
	if bootstrap {
		err := raft.BootstrapCluster(rc, s.logs, s.stable, s.snaps, trans, raft.Configuration{Servers: servers})
		if err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			return nil, nil, fmt.Errorf("spares: bootstrap raft: %w", err)
		}
	}
	r, err := raft.NewRaft(rc, n.fsm, s.logs, s.stable, s.snaps, trans)
	if err != nil {
		return nil, nil, fmt.Errorf("spares: start raft: %w", err)
	}
	return r, notifyCh, nil
}

// adoptRaft makes r the node's Raft node, and its transport and bolt
// store the node's to close, unless the node closed meanwhile: it then
// stops r and returns errClosed.
func (n *Node) adoptRaft(r *raft.Raft, trans raft.Transport, bolt *raftboltdb.BoltStore) error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		_ = r.Shutdown().Error()
		return errClosed
	}
	n.rft.Store(r)
	if c, ok := trans.(raft.WithClose); ok {
		n.trans = c // closed early by a Shutdown that Raft does not finish in time
	}
	if bolt != nil {
		n.stores = append(n.stores, bolt)
	}
	n.mu.Unlock()
	return nil
}

// runRaft starts the goroutines that work with the node's Raft node r:
// the leader watch (failover.go) and the leader loop. The first initial
// voter of a bootstrap stands for election first.
func (n *Node) runRaft(r *raft.Raft, notifyCh <-chan bool, bootstrap bool, servers []raft.Server) {
	obsCh := make(chan raft.Observation, 16)
	r.RegisterObserver(raft.NewObserver(obsCh, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	}))
	n.goFunc(func() { n.watchLeader(r, obsCh) })
	if i := slices.IndexFunc(servers, func(s raft.Server) bool { return s.Suffrage == raft.Voter }); bootstrap && i >= 0 && servers[i].ID == serverID(n.cfg.Proc) {
		n.standFirst(r)
	}
	if n.stream != nil {
		lost := n.leaderConnLost
		n.stream.onLost.Store(&lost)
	}
	n.goFunc(func() { n.leaderLoop(notifyCh) })
}

// hasRaftState reports whether this process's StateDir holds a Raft log
// from an earlier run (it then resumes Raft, whatever its role).
func hasRaftState(cfg *Config) bool {
	if cfg.StateDir == "" {
		return false
	}
	_, err := os.Stat(filepath.Join(cfg.StateDir, fmt.Sprintf("proc-%d", cfg.Proc), "raft.db"))
	return err == nil
}

// shouldStartRaft: a client of the voters-only mode that the state makes
// a voter starts Raft (the leader adds it with AddVoter next).
func (n *Node) shouldStartRaft(st *state) bool {
	if n.raftNode() != nil || !st.IsVoter(n.cfg.Proc) {
		return false
	}
	_, failed := st.Failed[n.cfg.Proc]
	return !failed
}

// maybeStartRaft starts Raft on a client that became a voter.
func (n *Node) maybeStartRaft() {
	n.startMu.Lock()
	defer n.startMu.Unlock()
	start, epoch := false, uint64(0)
	n.fsm.read(func(st *state, _ uint64) { start, epoch = n.shouldStartRaft(st), st.Epoch })
	if !start {
		return
	}
	if err := n.startRaft(false, nil); err != nil {
		if !errors.Is(err, errClosed) {
			n.log.Warn("spares: could not start raft as a new voter", "err", err)
		}
		return
	}
	n.log.Info("spares: this process is a voter now; raft started", "epoch", epoch)
}

func serverID(proc uint32) raft.ServerID { return raft.ServerID(strconv.FormatUint(uint64(proc), 10)) }

func procOfID(id raft.ServerID) (uint32, bool) {
	p, err := strconv.ParseUint(string(id), 10, 32)
	if err != nil || uint32(p) == noProc {
		return noProc, false
	}
	return uint32(p), true
}

// await returns the answer to a Raft future, or errClosed once the node
// is shut down, whichever comes first; see awaitCtx.
func (n *Node) await(f raft.Future) error { return n.awaitCtx(context.Background(), f) }

// awaitCtx returns the answer to a Raft future, or an error wrapping
// errTimeout when ctx ends, or errClosed once the node is shut down,
// whichever comes first. A goroutine of the node's must never wait on a
// future's Error alone: hashicorp/raft answers an Apply, a Barrier or a
// configuration change that it committed from its FSM goroutine, which
// returns at Raft's Shutdown without draining what is queued for it, so
// a future committed just before Shutdown is never answered
// (hashicorp/raft#498). The leader's reconcile, left waiting on one, held
// Node.Shutdown until its bound. The wait for Error runs in a goroutine
// counted in n.futures, which Shutdown lets end (Raft still runs then, and
// answers every future) before it stops Raft.
func (n *Node) awaitCtx(ctx context.Context, f raft.Future) error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return errClosed // Shutdown stops Raft: no one waits for f
	}
	n.futures.Add(1)
	n.mu.Unlock()
	done := make(chan error, 1)
	go func() {
		defer n.futures.Done()
		done <- f.Error()
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("%w: waiting for commit: %w", errTimeout, ctx.Err())
	case <-n.closeCh:
		return errClosed
	}
}

// newRaftLogger passes hashicorp/raft's own records (its warnings and
// errors) to l at debug level, with component=raft: while a process dies
// Raft reports every failed heartbeat and vote, and the membership events
// that matter (a failure committed, a leader elected, a voter replaced)
// are logged by this package itself, in sentences.
func newRaftLogger(l *slog.Logger) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name:        "raft",
		Level:       hclog.Warn,
		Output:      &slogWriter{log: l.With("component", "raft")},
		DisableTime: true,
	})
}

type slogWriter struct{ log *slog.Logger }

func (w *slogWriter) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	for _, pre := range []string{"[ERROR]", "[WARN]", "[INFO]", "[DEBUG]", "[TRACE]"} {
		line = strings.TrimSpace(strings.TrimPrefix(line, pre))
	}
	w.log.Debug(line)
	return len(p), nil
}
