package spares

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"time"

	"github.com/gaspigo/gaspigo/internal/auth"
)

// Member is one process of the initial table. Every process of the job is
// given the same table, in the same order.
type Member struct {
	Proc     uint32 // process id, unique, not noProc
	Host     string // host label: voters are spread over hosts
	Addr     string // data-plane address, recorded in the view
	RaftAddr string // host:port of the Raft transport
	CtlAddr  string // host:port of the control RPC (proposals from non-leaders)
	Spare    bool   // a spare: holds no rank until promoted
}

// Config configures a Node. Start from DefaultConfig or LocalConfig and
// fill in Proc, Members, NumRanks and Token.
type Config struct {
	// Proc is this process's id; it must be in Members (or, with Join, be
	// Self.Proc and not in Members).
	Proc uint32
	// Members is the initial table. Non-spare members hold ranks 0..NumRanks-1
	// in table order; spares form the pool in table order. Every process
	// must be given the same table: it determines the initial state and the
	// bootstrap Raft configuration, so no join step is needed.
	Members []Member
	// Join: this process was started after the job, to refill the pool
	// (or take a rank that awaits a joiner, RefillWait). Members is still
	// the job's original table (so the initial state is the same
	// everywhere), Self describes this process and Proc is an id outside
	// the table that the job never used. The node does not bootstrap: it
	// proposes addSpare for itself through the control RPC (Node.JoinSelf) and
	// learns the state from the tree (VotersOnly; it is a client), or,
	// in the all-Raft mode, the leader adds it to Raft as a non-voter.
	Join bool
	// Self describes this process when Join is set; ignored otherwise.
	Self Member
	// Contacts, with Join, are processes that joined the job before this
	// one (the rendezvous's records of them): whom to ask for the leader
	// and for news, besides the original table's members, until this
	// node's state lists it. Every original process may be gone by the
	// time a joiner arrives. Ignored without Join.
	Contacts []Member
	// NumRanks is the job size; it must equal the number of non-spare members.
	NumRanks int
	// Shrink: when the pool is empty, a lost rank becomes vacant instead of
	// failing the job (for apps that can redistribute work).
	Shrink bool
	// RefillWait: when the pool is empty, a lost rank waits this long for
	// a process that joins the job (Join) instead of becoming vacant
	// (Shrink) or failing the job at once; 0 (the default) does not wait.
	// Meanwhile the failed process keeps the rank in the view, so the
	// survivors' recovery waits for its replacement; a joiner that comes
	// in time takes the lowest waiting rank. The leader's clock times the
	// wait from when it saw the rank start waiting (a new leader starts
	// it again, which only makes the wait longer). Every process,
	// joiners included, must be given the same value: it is part of the
	// initial state.
	RefillWait time.Duration
	// MaxVoters is how many Raft voters to keep (1..voterCap, default 5).
	// The rest of the processes are non-voters: they hold the state but do
	// not count toward a quorum, so Raft cost stays flat as the job grows.
	MaxVoters int
	// VotersOnly: only the voters run Raft. Every other process is a
	// client: it learns the committed state through the dissemination
	// tree (TreeFanout, TreeHold; doc.go, "Raft among the voters only")
	// and sends its proposals to a voter. On in DefaultConfig. Off: every
	// process runs a Raft node and the leader replicates to all of them
	// (O(N) per heartbeat). Every member must agree.
	VotersOnly bool
	// TreeFanout is the most children a process serves in the tree (k);
	// news reaches every process in about log_k(N / voters) hops.
	TreeFanout int
	// TreeHold: a parent with no news answers a child's request after
	// this long, or CutOff/10 if that is shorter (a keepalive that carries
	// its contact with the quorum), so a client is in contact while it
	// hears from its parent at least every 2 × hold + HeartbeatTimeout.
	// Each link costs two small messages per hold when nothing happens.
	TreeHold time.Duration
	// Network, when set, carries the Raft and control traffic instead of
	// TCP (internal/testkit/memnet: thousands of nodes in one test
	// process). Token,
	// TLS, RaftListener, CtlListener and WrapConn are then unused.
	Network Network

	// StateDir: "" keeps the Raft log in memory (a lost process is replaced,
	// never restarted, so this is the default); otherwise the log, stable
	// store (raft-boltdb) and snapshots go to StateDir/proc-<Proc>.
	StateDir string
	// Token is the job token (internal/auth); it authenticates both the Raft
	// transport and the control RPC. At least 16 bytes.
	Token []byte
	// TLS runs mutual TLS over every Raft and control connection once its
	// token handshake succeeds (PGAS_TLS; see internal/auth). Every
	// member must agree.
	TLS bool

	// RaftListener and CtlListener, when set, are used instead of binding
	// the member's RaftAddr and CtlAddr (a launcher that picks ports first,
	// or tests on port 0). The Node owns and closes them.
	RaftListener net.Listener
	CtlListener  net.Listener
	// WrapConn, when set, wraps every Raft and control connection this
	// node dials (internal/netfault injects network faults through it;
	// wrap the listeners for the accepted ones).
	WrapConn func(net.Conn) net.Conn

	// HeartbeatTimeout (Raft): a follower without contact from the leader
	// for this long starts an election. Sets failover speed.
	HeartbeatTimeout time.Duration
	// ElectionTimeout (Raft): a candidate without a result for this long
	// starts a new election. At least HeartbeatTimeout.
	ElectionTimeout time.Duration
	// LeaderLeaseTimeout (Raft): a leader without quorum contact for this
	// long steps down. At most HeartbeatTimeout.
	LeaderLeaseTimeout time.Duration
	// CommitTimeout (Raft): the leader's idle append interval; bounds the
	// delay before followers learn a commit. Small on a LAN.
	CommitTimeout time.Duration
	// TransportTimeout: I/O deadline of one Raft RPC on the TCP transport.
	TransportTimeout time.Duration
	// HandshakeTimeout: deadline for the job-token handshake of an incoming
	// or outgoing connection (Raft and control), so a stray client cannot
	// hold a goroutine.
	HandshakeTimeout time.Duration
	// RPCTimeout bounds one control-RPC attempt (dial, handshake, commit on
	// the leader, reply); propose retries after it.
	RPCTimeout time.Duration
	// ProposeRetryMin and ProposeRetryMax bound the exponential backoff of
	// propose between attempts (during an election, say).
	ProposeRetryMin time.Duration
	ProposeRetryMax time.Duration
	// ReconcileInterval: how often the leader re-checks the voter set even
	// without an event (events trigger it at once).
	ReconcileInterval time.Duration
	// SnapshotThreshold: Raft log entries between snapshots.
	SnapshotThreshold uint64
	// CutOff (PGAS_CUTOFF): a process without contact with a membership
	// quorum (a leader's message, or leading itself) for this long gives
	// up with ErrCutOff (exit code job.ExitCutOff), so that no process of
	// the job runs forever on a host cut off from the others. Only time the
	// process could run counts (see contact.go). It must exceed what a
	// working membership ever goes without a leader: a leader's loss (HeartbeatTimeout) and
	// an election (a few ElectionTimeouts) take about a second even on a
	// busy host, and the majority's failure detector replaces a cut-off
	// process within a few seconds; 10s leaves a wide margin for both
	// and still ends a cut-off host's processes well within 30s. At least
	// 4 × (HeartbeatTimeout + ElectionTimeout).
	CutOff time.Duration
	// StandingInterval: while out of contact (for 2 × (HeartbeatTimeout +
	// ElectionTimeout), at least 1s), the process asks the voters it knows
	// of, and two other processes in turn, through their control RPC
	// whether it was declared failed, at most once per this period; a
	// round of questions is bounded by the largest of twice the period,
	// HandshakeTimeout and CutOff/4. Answers from a majority of the voters
	// count as contact with a quorum. A process replaced while it was cut off thus
	// learns it (and exits fenced, job.ExitDeclaredFailed) within about two
	// periods of reaching any of them, even though it left the Raft
	// configuration and gets no log entries any more.
	StandingInterval time.Duration
	// ContactTick: the period of the driver of the cut-off rule (contact.go).
	// An idle process wakes once per tick for it, so a job stretches it
	// with its other timeouts on an oversubscribed host; one tick adds at
	// most two periods to the silence counted toward CutOff.
	ContactTick time.Duration
	// ShutdownTimeout bounds the wait for Raft in Node.Shutdown. A Raft
	// that has not stopped by then (a replication or vote RPC stuck on a
	// peer that stopped answering, say) has its transport closed, so that
	// every blocked RPC fails, and gets a quarter of this again; after
	// that it is abandoned (logged once) and Shutdown returns, so a
	// process never hangs at exit. Raft stops in milliseconds when all
	// is well and no RPC outlives TransportTimeout, so the default, 3s,
	// is only reached by a shutdown that would have hung.
	ShutdownTimeout time.Duration

	// Logger receives membership events (epoch changes, promotions, voter
	// changes, refused connections) and Raft's own warnings and errors.
	// nil: slog.Default().
	Logger *slog.Logger
}

// DefaultConfig is for a LAN or one host: failover in well under a second
// (heartbeat 150 ms, election 150 ms), generous I/O deadlines.
func DefaultConfig() Config {
	return Config{
		MaxVoters: 5,
		// A leader that dies with a rank is replaced within about two
		// heartbeat timeouts; at 300 ms the epoch commit after such a kill
		// took 640 ms. A spurious election on a starved host only delays
		// proposals; it never declares anyone failed. When the leader's
		// process is seen gone (failover.go) the voters wait only the
		// lease: 75 ms keeps a leader kill under 300 ms (p99) while a
		// leader on a busy host rarely loses its lease (50 ms did).
		HeartbeatTimeout:   150 * time.Millisecond,
		ElectionTimeout:    150 * time.Millisecond,
		LeaderLeaseTimeout: 75 * time.Millisecond,
		CommitTimeout:      5 * time.Millisecond,
		TransportTimeout:   2 * time.Second,
		HandshakeTimeout:   2 * time.Second,
		RPCTimeout:         3 * time.Second,
		ProposeRetryMin:    20 * time.Millisecond,
		ProposeRetryMax:    500 * time.Millisecond,
		ReconcileInterval:  500 * time.Millisecond,
		SnapshotThreshold:  1024,
		CutOff:             defaultCutOff,
		StandingInterval:   500 * time.Millisecond,
		ContactTick:        100 * time.Millisecond,
		ShutdownTimeout:    3 * time.Second,
		VotersOnly:         true,
		TreeFanout:         8,
		TreeHold:           time.Second,
	}
}

// defaultCutOff is Config.CutOff in DefaultConfig and LocalConfig; see
// there for why 10s.
const defaultCutOff = 10 * time.Second

// LocalConfig is for loopback and tests: faster elections, still tolerant
// of a busy 2-core machine running the race detector.
func LocalConfig() Config {
	c := DefaultConfig()
	c.HeartbeatTimeout = 200 * time.Millisecond
	c.ElectionTimeout = 200 * time.Millisecond
	c.LeaderLeaseTimeout = 150 * time.Millisecond
	c.CommitTimeout = 5 * time.Millisecond
	c.ProposeRetryMin = 10 * time.Millisecond
	c.ProposeRetryMax = 200 * time.Millisecond
	c.ReconcileInterval = 200 * time.Millisecond
	return c
}

// validate checks the fields and their relations. It never mutates c.
func (c *Config) validate() error {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: %s", errConfig, fmt.Sprintf(format, a...)))
	}
	if err := startOf(c.Members, c.NumRanks).err; err != nil {
		errs = append(errs, err)
	}
	found := false
	for _, m := range c.Members {
		if m.Proc == c.Proc {
			found = true
		}
	}
	switch {
	case !c.Join && !found:
		bad("Proc %d is not in Members", c.Proc)
	case c.Join && found:
		bad("Proc %d joins but is already in Members (a joining process needs a new id)", c.Proc)
	case c.Join && c.Self.Proc != c.Proc:
		bad("Join with Self.Proc %d but Proc %d (they must match)", c.Self.Proc, c.Proc)
	case c.Join && (c.Self.RaftAddr == "" || c.Self.CtlAddr == ""):
		bad("joining proc %d needs Self.RaftAddr and Self.CtlAddr (got %q and %q)", c.Proc, c.Self.RaftAddr, c.Self.CtlAddr)
	case c.Join && c.Proc == noProc:
		bad("Proc %d is reserved (NoProc)", c.Proc)
	}
	if c.RefillWait < 0 {
		bad("RefillWait is %v, want >= 0 (0: a lost rank does not wait for a joiner)", c.RefillWait)
	}
	if c.MaxVoters < 1 || c.MaxVoters > voterCap {
		bad("MaxVoters is %d, want 1..%d (5 is usual)", c.MaxVoters, voterCap)
	}
	if why := auth.TokenWeakness(c.Token); why != "" && c.Network == nil {
		bad("Token is weak: %s (%s)", why, auth.TokenAdvice)
	}
	pos := []struct {
		name string
		v    time.Duration
	}{
		{"HeartbeatTimeout", c.HeartbeatTimeout}, {"ElectionTimeout", c.ElectionTimeout},
		{"LeaderLeaseTimeout", c.LeaderLeaseTimeout}, {"CommitTimeout", c.CommitTimeout},
		{"TransportTimeout", c.TransportTimeout}, {"HandshakeTimeout", c.HandshakeTimeout},
		{"RPCTimeout", c.RPCTimeout}, {"ProposeRetryMin", c.ProposeRetryMin},
		{"ProposeRetryMax", c.ProposeRetryMax}, {"ReconcileInterval", c.ReconcileInterval},
		{"CutOff", c.CutOff}, {"StandingInterval", c.StandingInterval},
		{"ContactTick", c.ContactTick}, {"ShutdownTimeout", c.ShutdownTimeout},
	}
	for _, p := range pos {
		if p.v <= 0 {
			bad("%s is %v, want > 0 (start from DefaultConfig)", p.name, p.v)
		}
	}
	if c.HeartbeatTimeout > 0 && c.HeartbeatTimeout < 5*time.Millisecond {
		bad("HeartbeatTimeout %v is below Raft's minimum of 5ms", c.HeartbeatTimeout)
	}
	if c.ElectionTimeout < c.HeartbeatTimeout {
		bad("ElectionTimeout %v is below HeartbeatTimeout %v", c.ElectionTimeout, c.HeartbeatTimeout)
	}
	if c.LeaderLeaseTimeout > c.HeartbeatTimeout {
		bad("LeaderLeaseTimeout %v is above HeartbeatTimeout %v", c.LeaderLeaseTimeout, c.HeartbeatTimeout)
	}
	if c.LeaderLeaseTimeout > 0 && c.LeaderLeaseTimeout < 5*time.Millisecond {
		bad("LeaderLeaseTimeout %v is below Raft's minimum of 5ms", c.LeaderLeaseTimeout)
	}
	if c.ProposeRetryMax < c.ProposeRetryMin {
		bad("ProposeRetryMax %v is below ProposeRetryMin %v", c.ProposeRetryMax, c.ProposeRetryMin)
	}
	if min := 4 * (c.HeartbeatTimeout + c.ElectionTimeout); c.CutOff > 0 && c.CutOff < min {
		bad("CutOff %v is below 4 × (HeartbeatTimeout + ElectionTimeout) = %v: an election would cut processes off (PGAS_CUTOFF)", c.CutOff, min)
	}
	if c.VotersOnly {
		if c.TreeFanout < 2 || c.TreeFanout > 64 {
			bad("TreeFanout is %d, want 2..64 (8 is usual)", c.TreeFanout)
		}
		if c.TreeHold <= 0 {
			bad("TreeHold is %v, want > 0 (start from DefaultConfig)", c.TreeHold)
		}
	}
	if c.SnapshotThreshold == 0 {
		bad("SnapshotThreshold is 0, want > 0 (1024 is usual)")
	}
	return errors.Join(errs...)
}

// treeHold is the hold in force: TreeHold, at most CutOff/10, so that a
// client's contact window (treeFresh) stays well inside the cut-off bound.
func (c *Config) treeHold() time.Duration {
	if c.CutOff > 0 {
		return max(min(c.TreeHold, c.CutOff/10), time.Millisecond)
	}
	return c.TreeHold
}

func validateMembers(members []Member, numRanks int) error {
	if len(members) == 0 {
		return fmt.Errorf("%w: Members is empty", errConfig)
	}
	if len(members) > maxProcs {
		return fmt.Errorf("%w: %d members, max %d", errConfig, len(members), maxProcs)
	}
	seen := make(map[uint32]bool, len(members))
	raftAddrs := make(map[string]uint32, len(members))
	ranks := 0
	for i, m := range members {
		if m.Proc == noProc {
			return fmt.Errorf("%w: Members[%d] has proc %d, which is reserved (NoProc)", errConfig, i, m.Proc)
		}
		if seen[m.Proc] {
			return fmt.Errorf("%w: proc %d appears twice in Members", errConfig, m.Proc)
		}
		seen[m.Proc] = true
		if m.RaftAddr == "" || m.CtlAddr == "" {
			return fmt.Errorf("%w: proc %d needs both RaftAddr and CtlAddr (got %q and %q)", errConfig, m.Proc, m.RaftAddr, m.CtlAddr)
		}
		if p, dup := raftAddrs[m.RaftAddr]; dup {
			return fmt.Errorf("%w: procs %d and %d share RaftAddr %q", errConfig, p, m.Proc, m.RaftAddr)
		}
		raftAddrs[m.RaftAddr] = m.Proc
		if err := m.info().validate(); err != nil {
			return fmt.Errorf("%w: proc %d: %v", errConfig, m.Proc, err)
		}
		if !m.Spare {
			ranks++
		}
	}
	if numRanks != ranks || numRanks == 0 {
		return fmt.Errorf("%w: NumRanks is %d but Members has %d non-spare processes (want them equal and > 0)", errConfig, numRanks, ranks)
	}
	return nil
}

func (m Member) info() procInfo {
	return procInfo{Addr: m.Addr, Host: m.Host, RaftAddr: m.RaftAddr, CtlAddr: m.CtlAddr}
}

// initialState builds the state every process starts from: non-spare
// members hold ranks in table order, spares form the pool in table order,
// epoch 1, Voters as chosen by chooseVoters, and the policies for a lost
// rank with an empty pool (shrink, refillWait; see Config). It is a pure
// function of its arguments, which is why all processes agree on it
// without a message.
func initialState(members []Member, numRanks int, shrink bool, refillWait time.Duration, maxVoters int) (state, error) {
	return startOf(members, numRanks).state(shrink, refillWait, maxVoters)
}

// state is initialState of the table t.
func (t *startTable) state(shrink bool, refillWait time.Duration, maxVoters int) (state, error) {
	if t.err != nil {
		return state{}, t.err
	}
	if maxVoters < 1 || maxVoters > voterCap {
		return state{}, fmt.Errorf("%w: maxVoters is %d, want 1..%d", errConfig, maxVoters, voterCap)
	}
	if refillWait < 0 {
		return state{}, fmt.Errorf("%w: refillWait is %v, want >= 0", errConfig, refillWait)
	}
	return state{
		Epoch:      1,
		NumRanks:   t.numRanks,
		Ranks:      t.ranks,
		Procs:      t.procs,
		Spares:     slices.Clone(t.spares),
		Failed:     map[uint32]uint64{},
		Shrink:     shrink,
		RefillWait: refillWait,
		Voters:     t.votersFor(maxVoters),
	}, nil
}

// chooseVoters picks up to max voters from the table, round-robin over
// hosts: the first member of each host (hosts in order of first
// appearance), then the second of each, and so on. Losing one host then
// costs as few votes as the table allows.
func chooseVoters(members []Member, max int) []uint32 {
	var hosts []string
	byHost := map[string][]uint32{}
	for _, m := range members {
		if _, ok := byHost[m.Host]; !ok {
			hosts = append(hosts, m.Host)
		}
		byHost[m.Host] = append(byHost[m.Host], m.Proc)
	}
	var out []uint32
	for round := 0; len(out) < max; round++ {
		added := false
		for _, h := range hosts {
			if round < len(byHost[h]) && len(out) < max {
				out = append(out, byHost[h][round])
				added = true
			}
		}
		if !added {
			break
		}
	}
	return out
}

// purposeRaft separates Raft transport connections from control and data
// connections that use the same job token.
var purposeRaft = auth.Purpose{'r', 'a', 'f', 't'}
