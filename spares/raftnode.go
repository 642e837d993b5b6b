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
	"time"

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
func (n *Node) startRaft(bootstrap bool, servers []raft.Server) (err error) {
	cfg := n.cfg
	hlog := newRaftLogger(n.log)
	var (
		logs    raft.LogStore
		stable  raft.StableStore
		snaps   raft.SnapshotStore
		closers []func()
		bolt    *raftboltdb.BoltStore
	)
	defer func() {
		if err != nil {
			for i := len(closers) - 1; i >= 0; i-- {
				closers[i]()
			}
		}
	}()
	if cfg.StateDir == "" {
		mem := raft.NewInmemStore()
		logs, stable, snaps = mem, mem, raft.NewInmemSnapshotStore()
	} else {
		dir := filepath.Join(cfg.StateDir, fmt.Sprintf("proc-%d", cfg.Proc))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("spares: state directory: %w", err)
		}
		bolt, err = raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db")})
		if err != nil {
			return fmt.Errorf("spares: open raft log in %s: %w", dir, err)
		}
		closers = append(closers, func() { bolt.Close() })
		fss, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, hlog)
		if err != nil {
			return fmt.Errorf("spares: snapshot store in %s: %w", dir, err)
		}
		ps, err := newPrivateSnapshots(fss, filepath.Join(dir, "snapshots"))
		if err != nil {
			return fmt.Errorf("spares: snapshot store in %s: %w", dir, err)
		}
		logs, stable, snaps = bolt, bolt, ps
	}

	var trans raft.Transport
	if cfg.Network != nil {
		if trans, err = cfg.Network.RaftTransport(cfg.Proc, n.self.RaftAddr); err != nil {
			return fmt.Errorf("spares: raft transport: %w", err)
		}
	} else {
		trans = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
			Stream:  n.stream,
			MaxPool: 3,
			Timeout: cfg.TransportTimeout,
			Logger:  hlog,
			// No pipelined replication: its sender and decoder can wedge
			// each other for good once a follower rejects an append or
			// answers with a newer term (hashicorp/raft#612), and the
			// wedged replication goroutine then holds Raft's Shutdown for
			// ever. The membership's log is a handful of small entries:
			// one append at a time costs nothing here.
			MaxRPCsInFlight: 1,
		})
	}
	if c, ok := trans.(raft.WithClose); ok {
		closers = append(closers, func() { c.Close() })
	}

	notifyCh := make(chan bool, 16)
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
	if err := raft.ValidateConfig(rc); err != nil {
		return fmt.Errorf("%w: raft: %v", ErrConfig, err)
	}
	// The package-level bootstrap writes the same first log entry on every
	// process it is given to, voter or not (Raft.BootstrapCluster refuses
	// non-voters).
	if bootstrap {
		err = raft.BootstrapCluster(rc, logs, stable, snaps, trans, raft.Configuration{Servers: servers})
		if err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			return fmt.Errorf("spares: bootstrap raft: %w", err)
		}
		err = nil
	}
	r, err := raft.NewRaft(rc, n.fsm, logs, stable, snaps, trans)
	if err != nil {
		return fmt.Errorf("spares: start raft: %w", err)
	}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		_ = r.Shutdown().Error()
		return ErrClosed
	}
	n.rft.Store(r)
	if c, ok := trans.(raft.WithClose); ok {
		n.trans = c // closed early by a Shutdown that Raft does not finish in time
	}
	if bolt != nil {
		n.stores = append(n.stores, bolt)
	}
	n.mu.Unlock()
	closers = nil
	obsCh := make(chan raft.Observation, 16)
	r.RegisterObserver(raft.NewObserver(obsCh, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	}))
	n.goFunc(func() { n.watchLeader(r, obsCh) })
	if i := slices.IndexFunc(servers, func(s raft.Server) bool { return s.Suffrage == raft.Voter }); bootstrap && i >= 0 && servers[i].ID == rc.LocalID {
		n.standFirst(r)
	}
	if n.stream != nil {
		lost := n.leaderConnLost
		n.stream.onLost.Store(&lost)
	}
	n.goFunc(func() { n.leaderLoop(notifyCh) })
	return nil
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
func (n *Node) shouldStartRaft(st *State) bool {
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
	n.fsm.read(func(st *State, _ uint64) { start, epoch = n.shouldStartRaft(st), st.Epoch })
	if !start {
		return
	}
	if err := n.startRaft(false, nil); err != nil {
		if !errors.Is(err, ErrClosed) {
			n.log.Warn("spares: could not start raft as a new voter", "err", err)
		}
		return
	}
	n.log.Info("spares: this process is a voter now; raft started", "epoch", epoch)
}

func serverID(proc uint32) raft.ServerID { return raft.ServerID(strconv.FormatUint(uint64(proc), 10)) }

func procOfID(id raft.ServerID) (uint32, bool) {
	p, err := strconv.ParseUint(string(id), 10, 32)
	if err != nil || uint32(p) == NoProc {
		return NoProc, false
	}
	return uint32(p), true
}

// await returns the answer to a Raft future, or ErrClosed once the node
// is shut down, whichever comes first; see awaitCtx.
func (n *Node) await(f raft.Future) error { return n.awaitCtx(context.Background(), f) }

// awaitCtx returns the answer to a Raft future, or an error wrapping
// ErrTimeout when ctx ends, or ErrClosed once the node is shut down,
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
		return ErrClosed // Shutdown stops Raft: no one waits for f
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
		return fmt.Errorf("%w: waiting for commit: %w", ErrTimeout, ctx.Err())
	case <-n.closeCh:
		return ErrClosed
	}
}

func (n *Node) kickLeader() {
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// leaderLoop is owned by the node. While this node leads it keeps the Raft
// configuration in line with the state, and ends the waits for a joiner
// that ran out (refill.go): on winning an election (after a barrier, so
// the FSM has every committed entry), after every state change, every
// ReconcileInterval and when a wait falls due. A node that does not lead
// forgets its clock of the waits.
func (n *Node) leaderLoop(notifyCh <-chan bool) {
	t := time.NewTicker(n.cfg.ReconcileInterval)
	defer t.Stop()
	refill := newRefillDriver(&n.cfg)
	defer refill.stop()
	needBarrier := true
	for {
		select {
		case <-n.closeCh:
			return
		case leader := <-notifyCh:
			// Won or lost, the waits are timed afresh from here.
			refill.stop()
			if leader {
				needBarrier = true
				n.log.Info("spares: became raft leader", "epoch", n.View().Epoch)
			}
		case <-n.kick:
		case <-t.C:
		case <-refill.C():
		}
		r := n.raftNode()
		if r == nil || r.State() != raft.Leader {
			refill.stop()
			continue
		}
		if needBarrier {
			if err := n.await(r.Barrier(n.cfg.RPCTimeout)); err != nil {
				n.log.Debug("spares: leader barrier failed", "err", err)
				continue
			}
			needBarrier = false
		}
		n.reconcile(r)
		n.runRefill(refill, r)
	}
}

// reconcile runs one voter plan; any failed step is retried next round.
func (n *Node) reconcile(r *raft.Raft) {
	n.reconciles.Add(1)
	cf := r.GetConfiguration()
	if err := cf.Error(); err != nil {
		return
	}
	var servers []raftServer
	for _, s := range cf.Configuration().Servers {
		p, ok := procOfID(s.ID)
		if !ok {
			n.log.Warn("spares: removing raft server with a foreign id", "id", s.ID)
			_ = n.await(r.RemoveServer(s.ID, 0, n.cfg.RPCTimeout))
			return
		}
		servers = append(servers, raftServer{Proc: p, Voter: s.Suffrage == raft.Voter})
	}
	st, _ := n.fsm.view()
	plan := planVoters(&st, servers, n.cfg.MaxVoters, n.cfg.Proc, n.cfg.VotersOnly)
	recorded := slices.Clone(st.Voters)
	slices.Sort(recorded)
	if plan.empty() && slices.Equal(recorded, plan.Voters) {
		return
	}
	record := func() bool {
		if slices.Equal(recorded, plan.Voters) {
			return true
		}
		data, err := encodeCommand(SetVoters{Voters: plan.Voters})
		if err == nil {
			ctx, cancel := context.WithTimeout(n.ctx, n.cfg.RPCTimeout)
			_, err = n.applyLocal(ctx, data)
			cancel()
		}
		if err != nil {
			n.log.Warn("spares: recording voters", "voters", plan.Voters, "err", err)
			return false
		}
		recorded = plan.Voters
		return true
	}
	removeSelf := false
	for _, p := range plan.Remove {
		if p == n.cfg.Proc {
			removeSelf = true
			continue
		}
		if err := n.await(r.RemoveServer(serverID(p), 0, n.cfg.RPCTimeout)); err != nil {
			n.log.Warn("spares: removing failed process from raft", "failed_proc", p, "err", err)
			return
		}
		n.log.Info("spares: failed process removed from raft", "failed_proc", p)
	}
	for _, p := range plan.AddNonvoter {
		if err := n.await(r.AddNonvoter(serverID(p), raft.ServerAddress(st.Procs[p].RaftAddr), 0, n.cfg.RPCTimeout)); err != nil {
			n.log.Warn("spares: adding non-voter", "new_proc", p, "err", err)
			return
		}
		n.log.Info("spares: process added to raft as non-voter", "new_proc", p)
	}
	// In the voters-only mode a client learns that it is to vote from the
	// recorded voters (and then starts Raft): record them first.
	if n.cfg.VotersOnly && len(plan.Promote) > 0 && !record() {
		return
	}
	for _, p := range plan.Promote {
		if err := n.await(r.AddVoter(serverID(p), raft.ServerAddress(st.Procs[p].RaftAddr), 0, n.cfg.RPCTimeout)); err != nil {
			n.log.Warn("spares: promoting to voter", "voter", p, "err", err)
			return
		}
		n.log.Info("spares: process promoted to raft voter", "voter", p, "host", st.Procs[p].Host)
	}
	if !record() {
		return
	}
	if removeSelf {
		n.log.Warn("spares: this leader was declared failed; leaving the raft configuration")
		_ = n.await(r.RemoveServer(serverID(n.cfg.Proc), 0, n.cfg.RPCTimeout))
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
