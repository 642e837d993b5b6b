package spares

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gaspigo/gaspigo/internal/admit"
	"github.com/gaspigo/gaspigo/spares/internal/follow"
	"github.com/gaspigo/gaspigo/spares/internal/tree"
	"github.com/hashicorp/raft"
)

// Node is one process's member of the membership. Every process of the
// job runs one and holds the committed state locally: up to Config.MaxVoters of
// them vote in Raft; the others replicate the log as non-voters, or, with
// Config.VotersOnly, run no Raft and learn the state through the tree.
type Node struct {
	cfg  Config
	self Member
	log  *slog.Logger

	fsm     *fsm
	rft     atomic.Pointer[raft.Raft] // nil while a client (VotersOnly)
	startMu sync.Mutex                // serialises starting Raft
	stream  *raftStream               // TCP only
	ctl     io.Closer                 // takes the control connections (listenCtl)
	ctlAuth *authListener             // TCP only: ctl itself, for its admission counters
	stores  []io.Closer               // guarded by mu
	trans   raft.WithClose            // Raft's transport, once it runs; guarded by mu

	ctx     context.Context // canceled by Shutdown
	cancel  context.CancelFunc
	closeCh chan struct{}
	started chan struct{} // closed at the end of New
	kick    chan struct{} // state changed: the leader re-checks voters

	mu      sync.Mutex // guards closed, stores, wg.Add and futures.Add
	closed  bool
	wg      sync.WaitGroup
	futures sync.WaitGroup // waits for Raft futures (awaitCtx)

	heard  tree.Heard   // the leader and quorum contact the tree told of (VotersOnly)
	follow *follow.Proc // the tree's network side (VotersOnly): following, answering children

	shutdownOnce sync.Once
	shutdownErr  error
	reconciles   atomic.Uint64

	lostCh   chan struct{} // closed by lose: see lost
	lossErr  error         // set before lost is closed
	lostOnce sync.Once
	fo       failover
	down     downMarks   // processes this one's detector confirmed failed
	start    *startTable // the member table it started from, shared (startOf)
}

// NewNode starts this process's Raft node (in the voters-only mode only on
// a voter) and control RPC. Every process bootstraps the same
// configuration from cfg.Members (voters per chooseVoters, the rest
// non-voters, or in the voters-only mode the voters alone), so no join
// step is needed; with a StateDir that already holds state, the node
// resumes from it instead.
// NewNode returns once the node listens; a leader is elected in the
// background (within a few HeartbeatTimeouts).
func NewNode(cfg Config) (_ *Node, err error) {
	if err := cfg.validate(); err != nil {
		closeListeners(cfg)
		return nil, err
	}
	start := startOf(cfg.Members, cfg.NumRanks)
	initial, err := start.state(cfg.Shrink, cfg.RefillWait, cfg.MaxVoters)
	if err != nil {
		closeListeners(cfg)
		return nil, err
	}
	// The node keeps the start table's copy of the members: shared with
	// the other nodes of this process that start from the same table,
	// and never changed by what the caller does with its slice.
	cfg.Members = start.members
	n := newNode(cfg, initial)
	n.start = start
	defer func() {
		if err != nil {
			n.cancel()
			n.closeListening()
			closeListeners(cfg)
		}
	}()
	if err := n.listen(); err != nil {
		return nil, err
	}
	if err := n.startRaftAtStart(&initial); err != nil {
		return nil, err
	}
	n.run(&initial)
	return n, nil
}

// newNode is the node of cfg, at the initial state, before it listens.
func newNode(cfg Config, initial state) *Node {
	logger := cfg.Logger
	if logger == nil {
		logger = slog.Default()
	}
	logger = logger.With("proc", cfg.Proc)
	n := &Node{
		cfg:     cfg,
		log:     logger,
		closeCh: make(chan struct{}),
		started: make(chan struct{}),
		kick:    make(chan struct{}, 1),
		lostCh:  make(chan struct{}),
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
	n.fsm = newFSM(initial, logger)
	n.fsm.onChange = n.kickLeader
	n.follow = follow.New(follow.Config{
		Hold:       cfg.treeHold(),
		RPCTimeout: cfg.RPCTimeout,
		Fresh:      treeFresh(&cfg),
		Limits:     followLimits,
		Log:        logger,
		Heard:      &n.heard,
		Ctx:        n.ctx,
		Closed:     n.closeCh,
	}, treeSide{n})
	return n
}

// listen opens the node's listeners: Raft's (over TCP; a Network brings
// its own) and the control RPC's.
func (n *Node) listen() error {
	if n.cfg.Network == nil {
		if err := n.listenRaft(); err != nil {
			return err
		}
	}
	ctl, err := n.listenCtl()
	if err != nil {
		return fmt.Errorf("spares: control listener: %w", err)
	}
	n.ctl = ctl
	return nil
}

// listenRaft opens the TCP listener of Raft's transport, with the
// job-token handshake.
func (n *Node) listenRaft() error {
	cfg := &n.cfg
	raftLn := cfg.RaftListener
	if raftLn == nil {
		var err error
		if raftLn, err = net.Listen("tcp", n.self.RaftAddr); err != nil {
			return fmt.Errorf("spares: raft listener: %w", err)
		}
	}
	al, err := newAuthListener(raftLn, cfg.Token, cfg.TLS, purposeRaft, cfg.Proc, cfg.HandshakeTimeout, len(cfg.Members), n.log, nil)
	if err != nil {
		return fmt.Errorf("spares: raft listener: %w", err)
	}
	n.stream = &raftStream{
		authListener: al,
		timeout:      cfg.TransportTimeout,
		advertise:    n.self.RaftAddr,
		wrap:         cfg.WrapConn,
	}
	return nil
}

// closeListening closes what listen opened, for a NewNode that fails.
func (n *Node) closeListening() {
	if n.ctl != nil {
		n.ctl.Close()
	}
	if n.stream != nil {
		n.stream.Close()
	}
}

// startRaftAtStart starts Raft where it runs from the start: on every
// process in the all-Raft mode or when StateDir holds a Raft log to
// resume, else on the initial voters. Every process bootstraps the same
// configuration: all of them (voters and non-voters), or in the
// voters-only mode the voters alone. A joining process does not
// bootstrap: the leader adds it.
func (n *Node) startRaftAtStart(initial *state) error {
	cfg := &n.cfg
	switch {
	case !cfg.VotersOnly || hasRaftState(cfg):
		return n.startRaft(!cfg.Join, raftServers(cfg, initial.Voters))
	case slices.Contains(initial.Voters, cfg.Proc) && !cfg.Join:
		return n.startRaft(true, raftServers(cfg, initial.Voters))
	}
	return nil
}

// raftServers is Raft's first configuration: the voters, and unless
// VotersOnly every other member as a nonvoter. Built only by a node that
// starts Raft (O(N)), so that the non-voters of a large job pay nothing
// for it.
func raftServers(cfg *Config, voters []uint32) []raft.Server {
	var servers []raft.Server
	for _, m := range cfg.Members {
		s := raft.Server{ID: serverID(m.Proc), Address: raft.ServerAddress(m.RaftAddr), Suffrage: raft.Nonvoter}
		if slices.Contains(voters, m.Proc) {
			s.Suffrage = raft.Voter
		} else if cfg.VotersOnly {
			continue
		}
		servers = append(servers, s)
	}
	return servers
}

// run starts the node's own goroutines: the contact watch and, in the
// voters-only mode, the follow loop. The control connections are
// answered from here on.
func (n *Node) run(initial *state) {
	// Read before the follow loop starts: it applies the tree's news to
	// the state, whose voter list shares its array with initial's.
	voter := slices.Contains(initial.Voters, n.cfg.Proc)
	close(n.started)
	n.goFunc(n.watchContact)
	if n.cfg.VotersOnly {
		n.goFunc(n.follow.Follow)
	}
	n.log.Debug("spares: node started", "raft_addr", n.self.RaftAddr, "ctl_addr", n.self.CtlAddr,
		"voter", voter, "raft", n.raftNode() != nil)
}

func closeListeners(cfg Config) {
	if cfg.RaftListener != nil {
		cfg.RaftListener.Close()
	}
	if cfg.CtlListener != nil {
		cfg.CtlListener.Close()
	}
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

// proc returns this node's process id.
func (n *Node) proc() uint32 { return n.cfg.Proc }

// Shutdown stops the control RPC, Raft and the node's goroutines, closes
// the stores and every watch channel. Blocking calls return errClosed. It is
// idempotent and returns the first shutdown's error.
func (n *Node) Shutdown() error {
	n.shutdownOnce.Do(func() { n.shutdownErr = n.shutdown() })
	return n.shutdownErr
}

// leader returns the process the local Raft node believes leads, if any;
// on a client (VotersOnly) the leader the tree last told of. It may be
// stale for up to a HeartbeatTimeout after the leader dies (on a client,
// until the tree's next answer).
func (n *Node) leader() (proc uint32, ok bool) {
	r := n.raftNode()
	if r == nil {
		return n.heard.Leader()
	}
	_, id := r.LeaderWithID()
	if id == "" {
		return noProc, false
	}
	return procOfID(id)
}

// IsLeader reports whether this node is the Raft leader right now.
func (n *Node) IsLeader() bool {
	r := n.raftNode()
	return r != nil && r.State() == raft.Leader
}

// contactTime is when this process last knew the membership's quorum
// alive: now for a leader, Raft's last contact with a leader, or what the
// tree told of; zero: never.
func (n *Node) contactTime(now time.Time) time.Time {
	t := n.heard.Contact()
	if r := n.raftNode(); r != nil {
		if r.State() == raft.Leader {
			return now
		}
		if lc := r.LastContact(); lc.After(t) {
			t = lc
		}
	}
	return t
}

// contactWindow is how old contactTime may be for contact: a Raft
// follower's HeartbeatTimeout, or, on a client of the tree, treeFresh.
func (n *Node) contactWindow() time.Duration {
	if n.raftNode() == nil {
		return treeFresh(&n.cfg)
	}
	return n.cfg.HeartbeatTimeout
}

// inContact: this process's last contact with the quorum is fresh.
func (n *Node) inContact(now time.Time) bool {
	t := n.contactTime(now)
	return !t.IsZero() && now.Sub(t) <= n.contactWindow()
}

// followAnswers counts the tree's answers this node sent to its children.
func (n *Node) followAnswers() uint64 { return n.follow.Served() }

// refused counts connections (Raft and control) refused by the job-token
// handshake, timeouts included. Connections shed unauthenticated by the
// admission gate are not refusals; admission counts them.
func (n *Node) refused() uint64 { return n.admission().Refused }

// admission returns the admission counters of the Raft and control
// listeners, added up (see internal/admit).
func (n *Node) admission() admit.Stats {
	var s admit.Stats
	if n.stream != nil {
		s = s.Plus(n.stream.lis.Stats())
	}
	if n.ctlAuth != nil {
		s = s.Plus(n.ctlAuth.lis.Stats())
	}
	return s
}

// view returns a copy of the locally applied state. It may lag the leader
// by a commit; use waitEpoch to wait for a given epoch.
func (n *Node) view() state {
	st, _ := n.fsm.view()
	return st
}

// watch returns a channel that holds the latest applied state: it is
// filled with the current state at once and replaced (never queued) after
// every change, so a slow reader sees the newest state and never blocks the
// node. It is closed by Shutdown.
func (n *Node) watch() <-chan state { return n.fsm.watch() }
