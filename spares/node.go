package spares

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/gaspigo/gaspigo/internal/admit"
	"github.com/gaspigo/gaspigo/internal/auth"
	"github.com/gaspigo/gaspigo/obs"
	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
)

// Node is one process's member of the membership Raft group. Every process
// of the job runs one: up to MaxVoters of them vote, the rest replicate the
// log as non-voters, so every process holds the committed State locally.
type Node struct {
	cfg  Config
	self Member
	log  *slog.Logger

	fsm    *fsm
	raft   *raft.Raft
	trans  *raft.NetworkTransport // closed early by a Shutdown that Raft does not finish in time
	stream *raftStream
	ctlLn  *authListener
	stores []io.Closer

	ctx      context.Context // canceled by Shutdown
	cancel   context.CancelFunc
	closeCh  chan struct{}
	notifyCh chan bool     // raft leadership changes
	kick     chan struct{} // state changed: the leader re-checks voters

	mu     sync.Mutex // guards closed and wg.Add
	closed bool
	wg     sync.WaitGroup

	shutdownOnce sync.Once
	shutdownErr  error
	reconciles   atomic.Uint64

	lost     chan struct{} // closed by lose: see Lost
	lostErr  error         // set before lost is closed
	lostOnce sync.Once
	fo       failover
}

// NewNode starts this process's Raft node and control RPC. Every process
// bootstraps the same configuration from cfg.Members (voters per
// ChooseVoters, the rest non-voters), so no join step is needed; with a
// StateDir that already holds state, the node resumes from it instead.
// NewNode returns once the node listens; a leader is elected in the
// background (within a few HeartbeatTimeouts).
func NewNode(cfg Config) (_ *Node, err error) {
	if err := cfg.Validate(); err != nil {
		closeListeners(cfg)
		return nil, err
	}
	initial, err := InitialState(cfg.Members, cfg.NumRanks, cfg.Shrink, cfg.MaxVoters)
	if err != nil {
		closeListeners(cfg)
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	logger = logger.With("proc", cfg.Proc)
	n := &Node{
		cfg:      cfg,
		log:      logger,
		closeCh:  make(chan struct{}),
		notifyCh: make(chan bool, 16),
		kick:     make(chan struct{}, 1),
		lost:     make(chan struct{}),
	}
	n.fo.changed = make(chan struct{})
	n.ctx, n.cancel = context.WithCancel(context.Background())
	for _, m := range cfg.Members {
		if m.Proc == cfg.Proc {
			n.self = m
		}
	}
	if cfg.Join {
		n.self = cfg.Self
	}
	var cleanup []func()
	defer func() {
		if err != nil {
			n.cancel()
			for i := len(cleanup) - 1; i >= 0; i-- {
				cleanup[i]()
			}
			closeListeners(cfg)
		}
	}()

	hlog := newRaftLogger(logger)
	var (
		logs   raft.LogStore
		stable raft.StableStore
		snaps  raft.SnapshotStore
	)
	if cfg.StateDir == "" {
		mem := raft.NewInmemStore()
		logs, stable, snaps = mem, mem, raft.NewInmemSnapshotStore()
	} else {
		dir := filepath.Join(cfg.StateDir, fmt.Sprintf("proc-%d", cfg.Proc))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("spares: state directory: %w", err)
		}
		bolt, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(dir, "raft.db")})
		if err != nil {
			return nil, fmt.Errorf("spares: open raft log in %s: %w", dir, err)
		}
		cleanup = append(cleanup, func() { bolt.Close() })
		n.stores = append(n.stores, bolt)
		fss, err := raft.NewFileSnapshotStoreWithLogger(dir, 2, hlog)
		if err != nil {
			return nil, fmt.Errorf("spares: snapshot store in %s: %w", dir, err)
		}
		ps, err := newPrivateSnapshots(fss, filepath.Join(dir, "snapshots"))
		if err != nil {
			return nil, fmt.Errorf("spares: snapshot store in %s: %w", dir, err)
		}
		logs, stable, snaps = bolt, bolt, ps
	}

	raftLn := cfg.RaftListener
	if raftLn == nil {
		if raftLn, err = net.Listen("tcp", n.self.RaftAddr); err != nil {
			return nil, fmt.Errorf("spares: raft listener: %w", err)
		}
	}
	n.stream = &raftStream{
		authListener: newAuthListener(raftLn, cfg.Token, cfg.TLS, purposeRaft, cfg.Proc, cfg.HandshakeTimeout, logger),
		timeout:      cfg.TransportTimeout,
		advertise:    n.self.RaftAddr,
		wrap:         cfg.WrapConn,
	}
	trans := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  n.stream,
		MaxPool: 3,
		Timeout: cfg.TransportTimeout,
		Logger:  hlog,
		// No pipelined replication: its sender and decoder can wedge each
		// other for good once a follower rejects an append or answers
		// with a newer term (hashicorp/raft#612), and the wedged
		// replication goroutine then holds Raft's Shutdown for ever. The
		// membership's log is a handful of small entries: one append at a
		// time costs nothing here.
		MaxRPCsInFlight: 1,
	})
	cleanup = append(cleanup, func() { trans.Close() })
	n.trans = trans

	rc := raft.DefaultConfig()
	rc.LocalID = serverID(cfg.Proc)
	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.LeaderLeaseTimeout
	rc.CommitTimeout = cfg.CommitTimeout
	rc.SnapshotThreshold = cfg.SnapshotThreshold
	rc.TrailingLogs = cfg.SnapshotThreshold
	rc.NotifyCh = n.notifyCh
	rc.ShutdownOnRemove = false // a removed (declared failed) node keeps its last view readable
	rc.Logger = hlog
	if err := raft.ValidateConfig(rc); err != nil {
		return nil, fmt.Errorf("%w: raft: %v", ErrConfig, err)
	}

	var servers []raft.Server
	for _, m := range cfg.Members {
		s := raft.Server{ID: serverID(m.Proc), Address: raft.ServerAddress(m.RaftAddr), Suffrage: raft.Nonvoter}
		if slices.Contains(initial.Voters, m.Proc) {
			s.Suffrage = raft.Voter
		}
		servers = append(servers, s)
	}
	// The package-level bootstrap writes the same first log entry on every
	// process, voter or not (Raft.BootstrapCluster refuses non-voters).
	// A joining process does not bootstrap: the leader adds it.
	if !cfg.Join {
		err = raft.BootstrapCluster(rc, logs, stable, snaps, trans, raft.Configuration{Servers: servers})
		if err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			return nil, fmt.Errorf("spares: bootstrap raft: %w", err)
		}
	}

	n.fsm = newFSM(initial, logger)
	n.fsm.onChange = n.kickLeader
	r, err := raft.NewRaft(rc, n.fsm, logs, stable, snaps, trans)
	if err != nil {
		return nil, fmt.Errorf("spares: start raft: %w", err)
	}
	n.raft = r
	cleanup = append(cleanup, func() { r.Shutdown().Error() })
	obs := make(chan raft.Observation, 16)
	r.RegisterObserver(raft.NewObserver(obs, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	}))
	n.goFunc(func() { n.watchLeader(obs) })
	lost := n.leaderConnLost
	n.stream.onLost.Store(&lost)

	ctlLn := cfg.CtlListener
	if ctlLn == nil {
		if ctlLn, err = net.Listen("tcp", n.self.CtlAddr); err != nil {
			return nil, fmt.Errorf("spares: control listener: %w", err)
		}
	}
	n.ctlLn = newAuthListener(ctlLn, cfg.Token, cfg.TLS, auth.PurposeControl, cfg.Proc, cfg.HandshakeTimeout, logger)
	n.goFunc(n.serveCtl)
	n.goFunc(n.leaderLoop)
	n.goFunc(n.watchContact)
	logger.Debug("spares: node started", "raft_addr", raftLn.Addr().String(), "ctl_addr", ctlLn.Addr().String(),
		"voter", slices.Contains(initial.Voters, cfg.Proc))
	return n, nil
}

func closeListeners(cfg Config) {
	if cfg.RaftListener != nil {
		cfg.RaftListener.Close()
	}
	if cfg.CtlListener != nil {
		cfg.CtlListener.Close()
	}
}

func serverID(proc uint32) raft.ServerID { return raft.ServerID(strconv.FormatUint(uint64(proc), 10)) }

func procOfID(id raft.ServerID) (uint32, bool) {
	p, err := strconv.ParseUint(string(id), 10, 32)
	if err != nil || uint32(p) == NoProc {
		return NoProc, false
	}
	return uint32(p), true
}

// goFunc runs f in a goroutine owned by the node, unless it is closed.
func (n *Node) goFunc(f func()) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return false
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		f()
	}()
	return true
}

func (n *Node) isClosed() bool {
	select {
	case <-n.closeCh:
		return true
	default:
		return false
	}
}

// Proc returns this node's process id.
func (n *Node) Proc() uint32 { return n.cfg.Proc }

// Shutdown stops the control RPC, Raft and the node's goroutines, closes
// the stores and every Watch channel. Blocking calls return ErrClosed. It
// returns in bounded time whatever Raft is doing (see shutdown.go and
// Config.ShutdownTimeout): a Raft that does not stop is abandoned, and
// Shutdown then returns an error wrapping ErrTimeout. It is idempotent and
// returns the first shutdown's error.
func (n *Node) Shutdown() error {
	n.shutdownOnce.Do(func() { n.shutdownErr = n.shutdown() })
	return n.shutdownErr
}

// Leader returns the process the local Raft node believes leads, if any.
// It may be stale for up to a HeartbeatTimeout after the leader dies.
func (n *Node) Leader() (proc uint32, ok bool) {
	_, id := n.raft.LeaderWithID()
	if id == "" {
		return NoProc, false
	}
	return procOfID(id)
}

// IsLeader reports whether this node is the Raft leader right now.
func (n *Node) IsLeader() bool { return n.raft.State() == raft.Leader }

// Refused counts connections (Raft and control) refused by the job-token
// handshake, timeouts included. Connections shed unauthenticated by the
// admission gate are not refusals; Admission counts them.
func (n *Node) Refused() uint64 { return n.Admission().Refused }

// Admission returns the admission counters of the Raft and control
// listeners, added up (see internal/admit).
func (n *Node) Admission() admit.Stats {
	return n.stream.door.Stats().Plus(n.ctlLn.door.Stats())
}

// View returns a copy of the locally applied state. It may lag the leader
// by a commit; use WaitEpoch to wait for a given epoch.
func (n *Node) View() State {
	st, _ := n.fsm.view()
	return st
}

// Watch returns a channel that holds the latest applied state: it is
// filled with the current state at once and replaced (never queued) after
// every change, so a slow reader sees the newest state and never blocks the
// node. It is closed by Shutdown.
func (n *Node) Watch() <-chan State { return n.fsm.watch() }

// Await blocks until cond holds for the locally applied state and returns
// that state. cond runs on a private copy, under no lock. It returns
// ErrTimeout (with the context's error) when ctx ends and ErrClosed after
// Shutdown, each with the last state seen.
func (n *Node) Await(ctx context.Context, cond func(*State) bool) (State, error) {
	return n.wait(ctx, func(st *State) (bool, error) { return cond(st), nil })
}

func (n *Node) wait(ctx context.Context, check func(*State) (bool, error)) (State, error) {
	for {
		st, changed := n.fsm.view()
		if done, err := check(&st); done || err != nil {
			return st, err
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return st, fmt.Errorf("%w: waiting at epoch %d: %w", ErrTimeout, st.Epoch, ctx.Err())
		case <-n.closeCh:
			return st, ErrClosed
		case <-n.lost:
			return st, n.lostErr
		}
	}
}

func statusErr(st *State) error {
	switch {
	case st.Status == Failed && st.StatusReason == ReasonSparesExhausted:
		return fmt.Errorf("%w in epoch %d", ErrSparesExhausted, st.Epoch)
	case st.Status == Failed:
		return fmt.Errorf("%w in epoch %d: %s", ErrJobFailed, st.Epoch, st.StatusReason)
	}
	return nil
}

// WaitEpoch blocks until the locally applied epoch is at least min and
// returns that state. When the job has failed it returns the state with
// ErrSparesExhausted (or ErrJobFailed), whatever the epoch; when it finished
// before reaching min, ErrJobFinished.
func (n *Node) WaitEpoch(ctx context.Context, min uint64) (State, error) {
	return n.wait(ctx, func(st *State) (bool, error) { return epochReached(st, min) })
}

func epochReached(st *State, min uint64) (bool, error) {
	if err := statusErr(st); err != nil {
		return true, err
	}
	if st.Epoch >= min {
		return true, nil
	}
	if st.Status == Finished {
		return true, fmt.Errorf("%w at epoch %d, before epoch %d", ErrJobFinished, st.Epoch, min)
	}
	return false, nil
}

// WaitPromotion is for spares: it blocks until this process holds a rank
// and returns the rank and the state that gave it. It returns
// ErrSparesExhausted or ErrJobFailed when the job failed, ErrJobFinished
// when it finished, and ErrDeclaredFailed when this process was itself
// declared failed, all without a rank. A rank holder returns at once.
func (n *Node) WaitPromotion(ctx context.Context) (rank int, st State, err error) {
	rank = -1
	st, err = n.wait(ctx, func(st *State) (bool, error) {
		var done bool
		rank, done, err = promotion(st, n.cfg.Proc)
		return done, err
	})
	return rank, st, err
}

func promotion(st *State, self uint32) (rank int, done bool, err error) {
	if r, ok := st.RankOf(self); ok {
		return r, true, nil
	}
	if err := statusErr(st); err != nil {
		return -1, true, err
	}
	if st.Status == Finished {
		return -1, true, fmt.Errorf("%w at epoch %d without promoting proc %d", ErrJobFinished, st.Epoch, self)
	}
	if e, failed := st.Failed[self]; failed {
		return -1, true, fmt.Errorf("%w in epoch %d", ErrDeclaredFailed, e)
	}
	return -1, false, nil
}

// ReportFailure proposes DeclareFailed{proc, reporter, epoch}: proc was
// confirmed failed by reporter in the view of the given epoch. See Propose.
func (n *Node) ReportFailure(ctx context.Context, proc, reporter uint32, epoch uint64) (Result, error) {
	n.expediteElection(proc, "the failure detector confirmed its process dead")
	return n.Propose(ctx, DeclareFailed{Proc: proc, Reporter: reporter, Epoch: epoch})
}

// Propose commits cmd through the Raft leader and returns what it did.
// From a non-leader it goes through the leader's control RPC. Attempts
// that fail because there is no leader, the leader changed or could not be
// reached are retried with exponential backoff until ctx ends; this is safe
// because Apply is idempotent (a retried command that had committed is a
// no-op the second time, and its Result says so). A command the state
// rejects returns at once with an error wrapping ErrBadCommand or
// ErrUnknownProc. When ctx ends it returns a *ProposeError wrapping
// ErrTimeout; after Shutdown one wrapping ErrClosed.
func (n *Node) Propose(ctx context.Context, cmd Command) (Result, error) {
	if cmd == nil {
		return Result{}, badCmd("nil command")
	}
	data, err := EncodeCommand(cmd)
	if err != nil {
		return Result{}, err
	}
	b := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(n.cfg.ProposeRetryMin),
		backoff.WithMaxInterval(n.cfg.ProposeRetryMax),
		backoff.WithMaxElapsedTime(0),
	)
	var last error
	hint := NoProc
	for attempt := 1; ; attempt++ {
		if n.isClosed() {
			return Result{}, &ProposeError{Op: cmd.Kind().String(), Attempts: attempt, Last: last, Err: ErrClosed}
		}
		changed := n.leaderChanged()
		res, err := n.proposeOnce(ctx, data, &hint, attempt)
		if err == nil {
			return res, nil
		}
		if !retryable(err) {
			return Result{}, err
		}
		last = err
		if ctx.Err() != nil {
			return Result{}, &ProposeError{Op: cmd.Kind().String(), Attempts: attempt, Last: last, Cause: ctx.Err(), Err: ErrTimeout}
		}
		n.log.Debug("spares: proposal retry", "kind", cmd.Kind().String(), "attempt", attempt, "err", err)
		t := time.NewTimer(b.NextBackOff())
		select {
		case <-t.C:
		case <-changed:
			t.Stop() // a leader is known now: try it at once
		case <-ctx.Done():
			t.Stop()
			return Result{}, &ProposeError{Op: cmd.Kind().String(), Attempts: attempt, Last: last, Cause: ctx.Err(), Err: ErrTimeout}
		case <-n.closeCh:
			t.Stop()
			return Result{}, &ProposeError{Op: cmd.Kind().String(), Attempts: attempt, Last: last, Err: ErrClosed}
		}
	}
}

// retryable: anything but a rejection by the state (a command that would be
// rejected again) and a local shutdown.
func retryable(err error) bool {
	if errors.Is(err, ErrBadCommand) || errors.Is(err, ErrUnknownProc) {
		return false
	}
	var re *remoteError
	if errors.As(err, &re) {
		return true // the remote end closing or timing out is a leader change to us
	}
	return !errors.Is(err, ErrClosed)
}

func (n *Node) proposeOnce(ctx context.Context, data []byte, hint *uint32, attempt int) (Result, error) {
	if n.raft.State() == raft.Leader {
		return n.applyLocal(ctx, data)
	}
	st, _ := n.fsm.view()
	target, ok := n.Leader()
	if !ok || target == n.cfg.Proc { // none known, or stale: we led a moment ago
		target = *hint
	}
	*hint = NoProc
	if target == NoProc {
		// No leader known (an election, or a joining process that has no
		// log yet): ask a member, who answers with its leader as a hint.
		target = n.someMember(&st, attempt)
		if target == NoProc {
			return Result{}, ErrNoLeader
		}
	}
	addr := n.ctlAddrOf(&st, target)
	if addr == "" {
		return Result{}, fmt.Errorf("%w: proc %d has no control address", ErrNoLeader, target)
	}
	res, err := n.callCtl(ctx, addr, n.cfg.Token, data)
	var re *remoteError
	if errors.As(err, &re) && re.Leader != NoProc && re.Leader != target {
		*hint = re.Leader
	}
	return res, err
}

// someMember picks a live process other than this one, rotating with attempt.
func (n *Node) someMember(st *State, attempt int) uint32 {
	var procs []uint32
	for p, info := range st.Procs {
		if _, failed := st.Failed[p]; !failed && p != n.cfg.Proc && info.CtlAddr != "" {
			procs = append(procs, p)
		}
	}
	if len(procs) == 0 {
		return NoProc
	}
	slices.Sort(procs)
	return procs[attempt%len(procs)]
}

func (n *Node) ctlAddrOf(st *State, p uint32) string {
	if info, ok := st.Procs[p]; ok {
		return info.CtlAddr
	}
	for _, m := range n.cfg.Members {
		if m.Proc == p {
			return m.CtlAddr
		}
	}
	return ""
}

// JoinSelf proposes AddSpare for this process (a node started with Join)
// and waits until the local view holds it, that is until the leader has
// added this node to Raft and it has caught up with the log. Errors are
// those of Propose and Await.
func (n *Node) JoinSelf(ctx context.Context) (State, error) {
	self := n.self
	if _, err := n.Propose(ctx, AddSpare{Proc: n.cfg.Proc, Info: self.info()}); err != nil {
		return State{}, err
	}
	return n.Await(ctx, func(s *State) bool { _, ok := s.Procs[n.cfg.Proc]; return ok })
}

// applyLocal commits data through the local Raft node, which must lead.
func (n *Node) applyLocal(ctx context.Context, data []byte) (Result, error) {
	if n.raft.State() != raft.Leader {
		return Result{}, ErrNotLeader
	}
	sp := obs.Begin("membership", "raft commit")
	defer sp.End()
	f := n.raft.Apply(data, n.cfg.RPCTimeout)
	done := make(chan struct{})
	if !n.goFunc(func() { _ = f.Error(); close(done) }) {
		return Result{}, ErrClosed
	}
	select {
	case <-done:
	case <-ctx.Done():
		return Result{}, fmt.Errorf("%w: waiting for commit: %w", ErrTimeout, ctx.Err())
	case <-n.closeCh:
		return Result{}, ErrClosed
	}
	if err := f.Error(); err != nil {
		return Result{}, mapRaftErr(err)
	}
	resp, ok := f.Response().(applyResponse)
	if !ok {
		return Result{}, fmt.Errorf("spares: unexpected apply response %T", f.Response())
	}
	return resp.Result, resp.Err
}

func mapRaftErr(err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost),
		errors.Is(err, raft.ErrLeadershipTransferInProgress), errors.Is(err, raft.ErrAbortedByRestore):
		return fmt.Errorf("%w: %v", ErrNotLeader, err)
	case errors.Is(err, raft.ErrRaftShutdown):
		return ErrClosed
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return fmt.Errorf("%w: %v", ErrTimeout, err)
	}
	return err
}

func (n *Node) kickLeader() {
	select {
	case n.kick <- struct{}{}:
	default:
	}
}

// leaderLoop is owned by the node. While this node leads it keeps the Raft
// configuration in line with the state: on winning an election (after a
// barrier, so the FSM has every committed entry), after every state change
// and every ReconcileInterval.
func (n *Node) leaderLoop() {
	t := time.NewTicker(n.cfg.ReconcileInterval)
	defer t.Stop()
	needBarrier := true
	for {
		select {
		case <-n.closeCh:
			return
		case leader := <-n.notifyCh:
			if leader {
				needBarrier = true
				n.log.Info("spares: became raft leader", "epoch", n.View().Epoch)
			}
		case <-n.kick:
		case <-t.C:
		}
		if n.raft.State() != raft.Leader {
			continue
		}
		if needBarrier {
			if err := n.raft.Barrier(n.cfg.RPCTimeout).Error(); err != nil {
				n.log.Debug("spares: leader barrier failed", "err", err)
				continue
			}
			needBarrier = false
		}
		n.reconcile()
	}
}

// reconcile runs one voter plan; any failed step is retried next round.
func (n *Node) reconcile() {
	n.reconciles.Add(1)
	cf := n.raft.GetConfiguration()
	if err := cf.Error(); err != nil {
		return
	}
	var servers []raftServer
	for _, s := range cf.Configuration().Servers {
		p, ok := procOfID(s.ID)
		if !ok {
			n.log.Warn("spares: removing raft server with a foreign id", "id", s.ID)
			_ = n.raft.RemoveServer(s.ID, 0, n.cfg.RPCTimeout).Error()
			return
		}
		servers = append(servers, raftServer{Proc: p, Voter: s.Suffrage == raft.Voter})
	}
	st, _ := n.fsm.view()
	plan := planVoters(&st, servers, n.cfg.MaxVoters, n.cfg.Proc)
	recorded := slices.Clone(st.Voters)
	slices.Sort(recorded)
	if plan.empty() && slices.Equal(recorded, plan.Voters) {
		return
	}
	removeSelf := false
	for _, p := range plan.Remove {
		if p == n.cfg.Proc {
			removeSelf = true
			continue
		}
		if err := n.raft.RemoveServer(serverID(p), 0, n.cfg.RPCTimeout).Error(); err != nil {
			n.log.Warn("spares: removing failed process from raft", "failed_proc", p, "err", err)
			return
		}
		n.log.Info("spares: failed process removed from raft", "failed_proc", p)
	}
	for _, p := range plan.AddNonvoter {
		if err := n.raft.AddNonvoter(serverID(p), raft.ServerAddress(st.Procs[p].RaftAddr), 0, n.cfg.RPCTimeout).Error(); err != nil {
			n.log.Warn("spares: adding non-voter", "new_proc", p, "err", err)
			return
		}
		n.log.Info("spares: process added to raft as non-voter", "new_proc", p)
	}
	for _, p := range plan.Promote {
		if err := n.raft.AddVoter(serverID(p), raft.ServerAddress(st.Procs[p].RaftAddr), 0, n.cfg.RPCTimeout).Error(); err != nil {
			n.log.Warn("spares: promoting to voter", "voter", p, "err", err)
			return
		}
		n.log.Info("spares: process promoted to raft voter", "voter", p, "host", st.Procs[p].Host)
	}
	if !slices.Equal(recorded, plan.Voters) {
		data, err := EncodeCommand(SetVoters{Voters: plan.Voters})
		if err == nil {
			ctx, cancel := context.WithTimeout(n.ctx, n.cfg.RPCTimeout)
			_, err = n.applyLocal(ctx, data)
			cancel()
		}
		if err != nil {
			n.log.Warn("spares: recording voters", "voters", plan.Voters, "err", err)
			return
		}
	}
	if removeSelf {
		n.log.Warn("spares: this leader was declared failed; leaving the raft configuration")
		_ = n.raft.RemoveServer(serverID(n.cfg.Proc), 0, n.cfg.RPCTimeout).Error()
	}
}

// newRaftLogger routes hashicorp/raft's hclog output into slog. Raft's
// warnings become Info and its errors Warn records with component=raft:
// while a process dies Raft reports every failed heartbeat, and the
// membership events that matter are logged by this package itself.
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
	level := slog.LevelInfo
	if strings.HasPrefix(line, "[ERROR]") {
		level = slog.LevelWarn
	}
	for _, pre := range []string{"[ERROR]", "[WARN]", "[INFO]", "[DEBUG]", "[TRACE]"} {
		line = strings.TrimSpace(strings.TrimPrefix(line, pre))
	}
	w.log.Log(context.Background(), level, line)
	return len(p), nil
}
