package spares

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gaspigo/gaspigo/internal/auth"
	"github.com/hashicorp/raft"
)

var verboseLog = flag.Bool("spares.log", false, "print node and raft logs of the Node tests to stderr")

// Node tests run real hashicorp/raft nodes over loopback TCP in one test
// process. Deadlines are generous (the machine may be a busy 2-core box);
// waits are event-driven (waitEpoch, awaitState) except for leader discovery,
// which polls Raft's own state with a deadline.
const phase = 30 * time.Second

type cluster struct {
	t     testing.TB
	token []byte
	tls   bool // PGAS_TLS=1 in the test's environment runs the cluster under TLS
	cfgs  []Config
	nodes []*Node // nil once shut down
}

func testLogger() *slog.Logger {
	if *verboseLog {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// newCluster starts ranks+spares nodes on loopback, proc i on host h(i%hosts).
func newCluster(t testing.TB, ranks, spares, hosts int, mut func(*Config)) *cluster {
	t.Helper()
	c := &cluster{t: t, token: auth.NewToken(), tls: os.Getenv("PGAS_TLS") == "1"}
	n := ranks + spares
	raftLns := make([]net.Listener, n)
	ctlLns := make([]net.Listener, n)
	var members []Member
	for i := 0; i < n; i++ {
		var err error
		if raftLns[i], err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		if ctlLns[i], err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		members = append(members, Member{
			Proc: uint32(i), Host: fmt.Sprintf("h%d", i%hosts), Addr: fmt.Sprintf("data-%d", i),
			RaftAddr: raftLns[i].Addr().String(), CtlAddr: ctlLns[i].Addr().String(), Spare: i >= ranks,
		})
	}
	for i := 0; i < n; i++ {
		cfg := LocalConfig()
		cfg.Proc, cfg.Members, cfg.NumRanks, cfg.Token, cfg.TLS = uint32(i), members, ranks, c.token, c.tls
		cfg.RaftListener, cfg.CtlListener = raftLns[i], ctlLns[i]
		cfg.Logger = testLogger()
		if mut != nil {
			mut(&cfg)
		}
		c.cfgs = append(c.cfgs, cfg)
	}
	for i := range c.cfgs {
		node, err := NewNode(c.cfgs[i])
		if err != nil {
			t.Fatalf("NewNode(%d): %v", i, err)
		}
		c.nodes = append(c.nodes, node)
	}
	t.Cleanup(c.shutdownAll)
	return c
}

func (c *cluster) shutdownAll() {
	for i := range c.nodes {
		c.kill(uint32(i))
	}
}

func (c *cluster) kill(p uint32) {
	if n := c.nodes[p]; n != nil {
		if err := n.Shutdown(); err != nil {
			c.t.Errorf("shutdown %d: %v", p, err)
		}
		c.nodes[p] = nil
	}
}

// crash stops p as a SIGKILL would, as far as its peers can tell: its
// Raft transport and control listener close first, at once, and the
// orderly Shutdown (which may take seconds on a loaded machine) runs
// in the background; the returned func waits for it.
func (c *cluster) crash(p uint32) (wait func()) {
	n := c.nodes[p]
	c.nodes[p] = nil
	n.mu.Lock()
	trans := n.trans
	n.mu.Unlock()
	if trans != nil {
		trans.Close()
	}
	n.ctl.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := n.Shutdown(); err != nil {
			c.t.Errorf("shutdown %d: %v", p, err)
		}
	}()
	return func() { <-done }
}

func (c *cluster) live() []*Node {
	var out []*Node
	for _, n := range c.nodes {
		if n != nil {
			out = append(out, n)
		}
	}
	return out
}

// leader waits until exactly one live node leads and every live voter
// agrees on it.
func (c *cluster) leader(ctx context.Context) *Node {
	c.t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		var leaders []*Node
		for _, n := range c.live() {
			if n.IsLeader() {
				leaders = append(leaders, n)
			}
		}
		if len(leaders) == 1 {
			agree := true
			for _, n := range c.live() {
				if p, ok := n.leader(); !ok || p != leaders[0].proc() {
					agree = false
				}
			}
			if agree {
				return leaders[0]
			}
		}
		select {
		case <-ctx.Done():
			c.t.Fatalf("no single agreed leader among %d live nodes: %v", len(c.live()), ctx.Err())
		case <-tick.C:
		}
	}
}

// other returns a live node that is none of the excluded procs.
func (c *cluster) other(exclude ...uint32) *Node {
	for _, n := range c.live() {
		if !slices.Contains(exclude, n.proc()) {
			return n
		}
	}
	c.t.Fatalf("no live node outside %v", exclude)
	return nil
}

// converge waits until every live node has applied epoch and returns the
// common membership; it fails if two nodes disagree.
func (c *cluster) converge(ctx context.Context, epoch uint64) state {
	c.t.Helper()
	awaitPool(c.t, ctx, c.live(), epoch)
	var first state
	for i, n := range c.live() {
		st, err := n.waitEpoch(ctx, epoch)
		if err != nil && !errors.Is(err, ErrSparesExhausted) {
			c.t.Fatalf("node %d WaitEpoch(%d): %v", n.proc(), epoch, err)
		}
		if st.Epoch != epoch {
			c.t.Fatalf("node %d is at epoch %d, want %d", n.proc(), st.Epoch, epoch)
		}
		if i == 0 {
			first = st
			continue
		}
		if !slices.Equal(st.Ranks.slice(), first.Ranks.slice()) || !slices.Equal(st.Spares, first.Spares) || fmt.Sprint(st.Failed) != fmt.Sprint(first.Failed) || st.Status != first.Status {
			c.t.Fatalf("nodes disagree at epoch %d:\n%d: %s\n%d: %s", epoch, c.live()[0].proc(), summarize(&first), n.proc(), summarize(&st))
		}
	}
	return first
}

// awaitPool waits until every node of live is at epoch or later and holds
// as many processes as the one that holds most: a join into the pool
// changes the state without a new epoch, so waitEpoch alone may return a
// state that has not learnt it yet.
func awaitPool(t testing.TB, ctx context.Context, live []*Node, epoch uint64) {
	t.Helper()
	most := 0
	for _, n := range live {
		if st, err := n.waitEpoch(ctx, epoch); err == nil || errors.Is(err, ErrSparesExhausted) {
			most = max(most, st.Procs.len())
		}
	}
	for _, n := range live {
		if _, err := n.awaitState(ctx, func(st *state) bool { return st.Procs.len() >= most }); err != nil {
			t.Fatalf("node %d never learnt the %d processes another holds: %v", n.proc(), most, err)
		}
	}
}

// votersRepaired waits until every live node records want voters, none of
// them failed, and the leader's Raft configuration has exactly those voters.
func (c *cluster) votersRepaired(ctx context.Context, want int) []uint32 {
	c.t.Helper()
	var voters []uint32
	for _, n := range c.live() {
		st, err := n.awaitState(ctx, func(s *state) bool {
			for _, v := range s.Voters {
				if _, failed := s.Failed[v]; failed {
					return false
				}
			}
			return len(s.Voters) == want
		})
		if err != nil {
			c.t.Fatalf("node %d: voters never repaired to %d: %v (have %v)", n.proc(), want, err, st.Voters)
		}
		voters = st.Voters
	}
	// The recorded set drops a failed voter at once; Raft's configuration
	// follows when the leader has run its plan. Poll Raft until it matches.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		cf := c.leader(ctx).raftNode().GetConfiguration()
		if err := cf.Error(); err == nil {
			var inRaft []uint32
			for _, s := range cf.Configuration().Servers {
				if s.Suffrage == raft.Voter {
					p, _ := procOfID(s.ID)
					inRaft = append(inRaft, p)
				}
			}
			slices.Sort(inRaft)
			if slices.Equal(inRaft, voters) {
				return voters
			}
			select {
			case <-ctx.Done():
				c.t.Fatalf("raft voters %v, recorded voters %v", inRaft, voters)
			case <-tick.C:
			}
		}
	}
}

// rankHolder returns a live rank holder that is not excluded.
func (c *cluster) rankHolder(st state, exclude ...uint32) uint32 {
	for _, p := range st.Ranks.slice() {
		if p != noProc && c.nodes[p] != nil && !slices.Contains(exclude, p) {
			return p
		}
	}
	c.t.Fatalf("no live rank holder outside %v in %s", exclude, summarize(&st))
	return noProc
}

// TestNodeFailuresUseSparesThenExhaust: 4 ranks + 2 spares on 3 hosts. Each
// failure is killed and then reported by a non-leader (through the control
// RPC); every node sees the same new epoch, the spare holds the rank, the
// voter set is repaired; the third failure fails the job with
// ErrSparesExhausted.
// It runs in both modes: the voters-only mode (one client here) and the
// all-Raft mode.
func TestNodeFailuresUseSparesThenExhaust(t *testing.T) {
	t.Run("voters-only", func(t *testing.T) { nodeFailures(t, func(c *Config) { c.VotersOnly = true }) })
	t.Run("all-raft", func(t *testing.T) { nodeFailures(t, func(c *Config) { c.VotersOnly = false }) })
}

func nodeFailures(t *testing.T, mut func(*Config)) {
	c := newCluster(t, 4, 2, 3, mut)
	ctx, cancel := context.WithTimeout(context.Background(), 3*phase)
	defer cancel()
	watch := c.nodes[3].watch()
	promoted := make(chan string, 2)
	for _, spare := range []uint32{4, 5} {
		go func() {
			rank, st, err := c.nodes[spare].waitPromotion(ctx)
			promoted <- fmt.Sprintf("spare %d: rank %d epoch %d err %v", spare, rank, st.Epoch, err)
		}()
	}

	wantVoters := []int{5, 4}
	for i := range 2 {
		leader := c.leader(ctx)
		st := leader.view()
		victim := c.rankHolder(st, leader.proc())
		rank, _ := st.RankOf(victim)
		spare := st.Spares[st.spareFor(victim)] // pinned by testdata/spare_host.txt
		proposer := c.other(leader.proc(), victim)
		c.kill(victim)
		res, err := proposer.reportFailure(ctx, victim, proposer.proc(), st.Epoch)
		if err != nil {
			t.Fatalf("failure %d: ReportFailure(%d) from non-leader %d: %v", i+1, victim, proposer.proc(), err)
		}
		if !res.Changed || res.Rank != rank || res.Promoted != spare || res.Epoch != st.Epoch+1 {
			t.Fatalf("failure %d: result %+v, want rank %d promoted %d epoch %d", i+1, res, rank, spare, st.Epoch+1)
		}
		got := c.converge(ctx, st.Epoch+1)
		if p, _ := got.ProcOf(rank); p != spare {
			t.Fatalf("failure %d: rank %d held by %d, want spare %d", i+1, rank, p, spare)
		}
		if msg := <-promoted; msg != fmt.Sprintf("spare %d: rank %d epoch %d err <nil>", spare, rank, st.Epoch+1) {
			t.Fatalf("failure %d: WaitPromotion: %s", i+1, msg)
		}
		voters := c.votersRepaired(ctx, wantVoters[i])
		if slices.Contains(voters, victim) {
			t.Fatalf("failed proc %d is still a voter: %v", victim, voters)
		}
		// A repeated report of the same failure is a no-op.
		if res, err := c.other().reportFailure(ctx, victim, noProc, st.Epoch); err != nil || res.Changed {
			t.Fatalf("repeated report: %+v, %v", res, err)
		}
	}

	// Third failure: no spare left.
	leader := c.leader(ctx)
	st := leader.view()
	victim := c.rankHolder(st, leader.proc())
	proposer := c.other(leader.proc(), victim)
	c.kill(victim)
	res, err := proposer.reportFailure(ctx, victim, proposer.proc(), st.Epoch)
	if err != nil || res.Status != statusFailed || res.Promoted != noProc {
		t.Fatalf("third failure: %+v, %v", res, err)
	}
	for _, n := range c.live() {
		final, err := n.waitEpoch(ctx, st.Epoch+1)
		if !errors.Is(err, ErrSparesExhausted) {
			t.Fatalf("node %d: WaitEpoch after exhaustion: %v", n.proc(), err)
		}
		if final.Status != statusFailed || final.StatusReason != reasonSparesExhausted {
			t.Fatalf("node %d: %s", n.proc(), summarize(&final))
		}
		if _, _, err := n.waitPromotion(ctx); err != nil && !errors.Is(err, ErrSparesExhausted) {
			t.Fatalf("node %d: WaitPromotion: %v", n.proc(), err)
		}
	}
	// The watcher was never read: it holds only the latest state.
	if got := <-watch; got.Epoch != st.Epoch+1 || got.Status != statusFailed {
		t.Fatalf("watch holds epoch %d status %s, want the latest (epoch %d, failed)", got.Epoch, got.Status, st.Epoch+1)
	}
}

// TestNodeLeaderFailure: the Raft leader's process dies. A new leader is
// elected, the report (proposed by a follower, retried across the
// election) commits the promotion, and the new leader repairs the voter set.
func TestNodeLeaderFailure(t *testing.T) {
	c := newCluster(t, 4, 2, 3, nil)
	ctx, cancel := context.WithTimeout(context.Background(), phase)
	defer cancel()
	old := c.leader(ctx)
	if st := old.view(); !slices.Contains(st.Ranks.slice(), old.proc()) {
		// Move leadership to a voter holding a rank, so its death needs a promotion.
		target := slices.IndexFunc(st.Voters, func(v uint32) bool { _, ok := st.RankOf(v); return ok })
		v := st.Voters[target]
		if err := old.raftNode().LeadershipTransferToServer(serverID(v), raft.ServerAddress(st.Procs.info(v).RaftAddr)).Error(); err != nil {
			t.Fatalf("leadership transfer: %v", err)
		}
		old = c.leader(ctx)
	}
	victim := old.proc()
	st := old.view()
	rank, _ := st.RankOf(victim)
	wasVoters := len(st.Voters)
	c.kill(victim)

	proposer := c.other(victim)
	start := time.Now()
	res, err := proposer.reportFailure(ctx, victim, proposer.proc(), st.Epoch)
	if err != nil {
		t.Fatalf("ReportFailure of the leader: %v", err)
	}
	t.Logf("leader %d declared failed %v after its death (election included)", victim, time.Since(start).Round(time.Millisecond))
	if res.Rank != rank || res.Promoted != 4 {
		t.Fatalf("result %+v, want rank %d to spare 4", res, rank)
	}
	got := c.converge(ctx, st.Epoch+1)
	if p, _ := got.ProcOf(rank); p != 4 {
		t.Fatalf("rank %d held by %d, want 4", rank, p)
	}
	if r, _, err := c.nodes[4].waitPromotion(ctx); err != nil || r != rank {
		t.Fatalf("WaitPromotion = %d, %v", r, err)
	}
	if l := c.leader(ctx); l.proc() == victim {
		t.Fatal("dead leader still leads")
	}
	voters := c.votersRepaired(ctx, wasVoters)
	if slices.Contains(voters, victim) {
		t.Fatalf("dead leader %d still a voter: %v", victim, voters)
	}
}

// TestNodeControlPlane: the control RPC refuses a wrong token and stray
// clients, rejections by the state come back typed and unretried, a
// proposal without quorum times out with errTimeout, and Shutdown is
// idempotent.
func TestNodeControlPlane(t *testing.T) {
	c := newCluster(t, 2, 1, 1, nil)
	ctx, cancel := context.WithTimeout(context.Background(), phase)
	defer cancel()
	leader := c.leader(ctx)
	follower := c.other(leader.proc())
	ctlAddr := leader.view().Procs.info(leader.proc()).CtlAddr
	raftAddr := leader.view().Procs.info(leader.proc()).RaftAddr

	cmd, _ := encodeCommand(finish{})
	_, err := follower.callCtl(ctx, ctlAddr, auth.NewToken(), cmd)
	if !errors.Is(err, auth.ErrAuth) {
		t.Fatalf("wrong token: %v, want auth.ErrAuth", err)
	}
	if _, err := dialAuth(ctx, raftAddr, auth.NewToken(), c.tls, purposeRaft, 7, time.Second, nil); !errors.Is(err, auth.ErrAuth) {
		t.Fatalf("wrong token on the raft transport: %v", err)
	}
	if _, err := dialAuth(ctx, raftAddr, c.token, c.tls, auth.PurposeControl, 7, time.Second, nil); !errors.Is(err, auth.ErrAuth) {
		t.Fatalf("control purpose on the raft transport: %v", err)
	}
	stray, err := net.Dial("tcp", ctlAddr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(stray, "GET / HTTP/1.1\r\nHost: x\r\n\r\n%s", make([]byte, 64))
	_ = stray.SetReadDeadline(time.Now().Add(phase))
	buf := make([]byte, 256)
	for {
		if _, err := stray.Read(buf); err != nil {
			break // the server hung up on the stray client
		}
	}
	stray.Close()
	deadline := time.Now().Add(phase)
	for leader.refused() < 4 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond) // the refusal is counted after the client already saw it
	}
	if n := leader.refused(); n < 4 {
		t.Fatalf("leader counted %d refused connections, want 4", n)
	}
	if st := follower.view(); st.Status != statusRunning || st.Epoch != 1 {
		t.Fatalf("state changed by refused clients: %s", summarize(&st))
	}

	// A command the state rejects comes back typed through the control RPC, at once.
	if _, err := follower.reportFailure(ctx, 99, follower.proc(), 1); !errors.Is(err, errUnknownProc) {
		t.Fatalf("unknown proc via ctl: %v", err)
	}
	if _, err := follower.propose(ctx, declareFailed{Proc: 0, Reporter: noProc, Epoch: 50}); !errors.Is(err, errBadCommand) {
		t.Fatalf("future epoch via ctl: %v", err)
	}
	// A command the state accepts is committed through the control RPC
	// (the voters as recorded: a no-op, but one that went through the log).
	if res, err := follower.propose(ctx, setVoters{Voters: follower.view().Voters}); err != nil || res.Changed || res.Note != "voters unchanged" {
		t.Fatalf("voters via ctl: %+v, %v", res, err)
	}

	// Without a quorum nothing commits: the proposal times out, typed.
	for _, n := range c.live() {
		if n != follower {
			c.kill(n.proc())
		}
	}
	short, cancelShort := context.WithTimeout(ctx, 700*time.Millisecond)
	_, err = follower.reportFailure(short, 0, follower.proc(), 1)
	cancelShort()
	var pe *proposeError
	if !errors.Is(err, errTimeout) || !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &pe) || pe.Attempts < 1 {
		t.Fatalf("proposal without quorum: %v", err)
	}
	if _, err := follower.waitEpoch(short, 2); !errors.Is(err, errTimeout) {
		t.Fatalf("WaitEpoch with an ended context: %v", err)
	}

	w := follower.watch()
	<-w
	if err := follower.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if err := follower.Shutdown(); err != nil {
		t.Fatalf("second Shutdown: %v", err)
	}
	if _, ok := <-w; ok {
		t.Fatal("Watch channel still open after Shutdown")
	}
	if _, err := follower.waitEpoch(ctx, 9); !errors.Is(err, errClosed) {
		t.Fatalf("WaitEpoch after Shutdown: %v", err)
	}
	if _, err := follower.propose(ctx, finish{}); !errors.Is(err, errClosed) {
		t.Fatalf("Propose after Shutdown: %v", err)
	}
}

// TestNodeBoltPersistence: with a StateDir the log lives in raft-boltdb; a
// restarted group (same addresses, same directory) recovers the committed
// membership without bootstrapping again.
func TestNodeBoltPersistence(t *testing.T) {
	dir := t.TempDir()
	c := newCluster(t, 2, 1, 1, func(cfg *Config) { cfg.StateDir = dir })
	ctx, cancel := context.WithTimeout(context.Background(), 2*phase)
	defer cancel()
	leader := c.leader(ctx)
	victim := c.rankHolder(leader.view(), leader.proc())
	c.kill(victim)
	if _, err := c.other(victim).reportFailure(ctx, victim, noProc, 1); err != nil {
		t.Fatal(err)
	}
	before := c.converge(ctx, 2)
	c.votersRepaired(ctx, 2)
	// A command after the configuration change, so a snapshot may be taken
	// (Raft refuses while the last configuration entry is newer than the
	// FSM's last applied command).
	if _, err := c.other(victim).propose(ctx, finish{}); err != nil {
		t.Fatal(err)
	}
	hasCkpt := func(s *state) bool { return s.Status == statusFinished }
	for _, n := range c.live() {
		if _, err := n.awaitState(ctx, hasCkpt); err != nil {
			t.Fatal(err)
		}
	}
	// Snapshot one node, so its restart goes through FSM.Restore.
	if err := c.other(victim).raftNode().Snapshot().Error(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	c.shutdownAll()
	if _, err := os.Stat(filepath.Join(dir, "proc-0", "raft.db")); err != nil {
		t.Fatalf("no bolt file: %v", err)
	}

	for p, cfg := range c.cfgs {
		if uint32(p) == victim {
			continue
		}
		cfg.RaftListener, cfg.CtlListener = nil, nil // rebind the same addresses
		n, err := NewNode(cfg)
		if err != nil {
			t.Fatalf("restart %d: %v", p, err)
		}
		c.nodes[p] = n
		if st := n.view(); st.Epoch != 1 && st.Epoch != 2 {
			t.Fatalf("restart %d: unexpected epoch %d", p, st.Epoch)
		}
	}
	for _, n := range c.live() {
		if _, err := n.awaitState(ctx, hasCkpt); err != nil {
			t.Fatalf("node %d after restart: %v", n.proc(), err)
		}
	}
	after := c.converge(ctx, 2)
	if !slices.Equal(after.Ranks.slice(), before.Ranks.slice()) || after.Status != statusFinished {
		t.Fatalf("after restart: %s, before: %s", summarize(&after), summarize(&before))
	}
	// The restarted group still commits.
	if _, err := c.other().propose(ctx, finish{}); err != nil { // a no-op, but committed
		t.Fatal(err)
	}
}

// TestNodeJoinRefillsPool: a process started after the job joins with
// Join, proposes its own addSpare through a member, is added to Raft by the
// leader, catches up, and is promoted when its turn comes.
func TestNodeJoinRefillsPool(t *testing.T) {
	c := newCluster(t, 2, 1, 2, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*phase)
	defer cancel()
	raftLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctlLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := c.cfgs[0]
	cfg.Proc, cfg.Join = 3, true
	cfg.Self = Member{Proc: 3, Host: "h1", Addr: "data-3", RaftAddr: raftLn.Addr().String(), CtlAddr: ctlLn.Addr().String(), Spare: true}
	cfg.RaftListener, cfg.CtlListener = raftLn, ctlLn
	joiner, err := NewNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c.cfgs, c.nodes = append(c.cfgs, cfg), append(c.nodes, joiner)
	st, err := joiner.joinSelf(ctx)
	if err != nil {
		t.Fatalf("joinSelf: %v", err)
	}
	if !slices.Equal(st.Spares, []uint32{2, 3}) {
		t.Fatalf("joiner's view after joining: %s", summarize(&st))
	}
	c.converge(ctx, 1) // into the pool: the epoch stays
	c.votersRepaired(ctx, 4)

	// Which spare takes a rank depends on the victim's host (the first
	// spare on another host), and a report retried after its commit
	// answers with a no-op: each loss is checked in the state it left.
	for i := range 2 {
		leader := c.leader(ctx)
		st := leader.view()
		victim := c.rankHolder(st, leader.proc())
		rank, _ := st.RankOf(victim)
		c.kill(victim)
		if _, err := c.other(victim).reportFailure(ctx, victim, noProc, st.Epoch); err != nil {
			t.Fatalf("failure %d: %v", i+1, err)
		}
		got := c.converge(ctx, st.Epoch+1)
		if p := got.Ranks.at(rank); !slices.Contains(st.Spares, p) {
			t.Fatalf("failure %d: rank %d went to %d, not to a spare of %v (%s)", i+1, rank, p, st.Spares, summarize(&got))
		}
	}
	if rank, st, err := joiner.waitPromotion(ctx); err != nil || st.Ranks.at(rank) != 3 {
		t.Fatalf("joiner WaitPromotion: %d, %v (%s)", rank, err, summarize(&st))
	}
	c.votersRepaired(ctx, 2)
}

// TestNodeConfigErrors: NewNode refuses a bad config up front and closes
// the listeners it was given.
func TestNodeConfigErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg := LocalConfig()
	cfg.Members = testMembers(2, 0, 1)
	cfg.NumRanks = 2
	cfg.RaftListener = ln
	if _, err := NewNode(cfg); !errors.Is(err, errConfig) {
		t.Fatalf("NewNode without a token: %v", err)
	}
	if _, err := ln.Accept(); err == nil {
		t.Fatal("listener still open after a refused config")
	}
}

// measureEpochCommit returns, per sample, the time from reportFailure on a
// non-leader to every node having applied the new epoch. Each sample adds
// a process that runs no Raft node as a spare, then declares it failed:
// one declareFailed log entry through the control RPC, as in production.
// leader waits for the leader; live lists the live nodes.
func measureEpochCommit(tb testing.TB, leader func(context.Context) *Node, live func() []*Node, samples int) []time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), 2*phase)
	defer cancel()
	all := func(epoch uint64) {
		for _, n := range live() {
			if _, err := n.waitEpoch(ctx, epoch); err != nil {
				tb.Fatal(err)
			}
		}
	}
	var out []time.Duration
	for i := 0; i < samples; i++ {
		l := leader(ctx)
		var proposer *Node
		for _, n := range live() {
			if n != l {
				proposer = n
				break
			}
		}
		p := uint32(1000 + i)
		if _, err := l.propose(ctx, addSpare{Proc: p, Info: procInfo{Host: "bench"}}); err != nil {
			tb.Fatal(err)
		}
		epoch := l.view().Epoch
		all(epoch)
		start := time.Now()
		if _, err := proposer.reportFailure(ctx, p, proposer.proc(), epoch); err != nil {
			tb.Fatal(err)
		}
		all(epoch + 1)
		out = append(out, time.Since(start))
	}
	slices.Sort(out)
	return out
}

// TestEpochCommitLatency bounds the time from a failure report on a
// non-leader to every process having applied the new epoch, in fake time
// (a synctest bubble over a memnet.Network: 4 ranks and 2 spares on 3 hosts,
// 5 voters and a client of the tree, as in production). Work takes no
// fake time there, so what is measured is what the membership waits for:
// the commit of one entry on the voters, of which the followers learn on
// the leader's next append (within 2 CommitTimeouts, hashicorp/raft's
// random commit timer), and the tree's answer to the client, which a
// change releases at once. Every sample must be within 3 CommitTimeouts;
// a wait on a heartbeat (HeartbeatTimeout/10), a proposal retry
// (ProposeRetryMin) or a reconcile round (ReconcileInterval) on the way
// would exceed it.
func TestEpochCommitLatency(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, 6, 2, 3, nil)
		defer s.shutdownAll()
		d := measureEpochCommit(t, func(context.Context) *Node { return s.leader() }, s.live, 15)
		cfg := s.nodes[0].cfg
		bound := 3 * cfg.CommitTimeout
		t.Logf("epoch commit, 6 nodes (5 voters), fake time, report from a non-leader: median %v, min %v, max %v; bound %v",
			d[len(d)/2], d[0], d[len(d)-1], bound)
		if d[len(d)-1] > bound {
			t.Errorf("an epoch commit took %v of fake time (samples %v), more than 3 CommitTimeouts (%v)", d[len(d)-1], d, bound)
		}
	})
}

// BenchmarkEpochCommit reports the median time from reportFailure on a
// non-leader to all 6 nodes having applied the epoch, for both timing
// profiles (followers learn a commit on the leader's next append, which
// comes within 1-2 CommitTimeouts).
func BenchmarkEpochCommit(b *testing.B) {
	for _, prof := range []struct {
		name string
		cfg  Config
	}{{"config=local", LocalConfig()}, {"config=default", DefaultConfig()}} {
		b.Run(prof.name, func(b *testing.B) {
			c := newCluster(b, 4, 2, 3, func(cfg *Config) {
				p := prof.cfg
				cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = p.HeartbeatTimeout, p.ElectionTimeout, p.LeaderLeaseTimeout
				cfg.CommitTimeout, cfg.ReconcileInterval = p.CommitTimeout, p.ReconcileInterval
			})
			b.ResetTimer()
			d := measureEpochCommit(b, c.leader, c.live, b.N)
			b.StopTimer()
			b.ReportMetric(float64(d[len(d)/2].Microseconds())/1000, "ms-median")
			b.ReportMetric(float64(d[len(d)-1].Microseconds())/1000, "ms-max")
		})
	}
}

// TestNodeShutdownLeavesNoGoroutines: Shutdown stops everything the nodes
// started, including Raft's connection handlers (the stream layer closes
// the connections Raft's transport leaves open).
func TestNodeShutdownLeavesNoGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()
	c := newCluster(t, 2, 1, 1, nil)
	ctx, cancel := context.WithTimeout(context.Background(), phase)
	defer cancel()
	l := c.leader(ctx)
	if _, err := c.other(l.proc()).propose(ctx, finish{}); err != nil {
		t.Fatal(err)
	}
	c.shutdownAll()
	deadline := time.Now().Add(phase)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Fatalf("%d goroutines after Shutdown, %d before:\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}
}

// TestNodeFastFailover: when the leader's process goes away (its Raft
// connections end and its address refuses connections), the voters stand
// for election once the leader lease has run out instead of waiting for a
// whole heartbeat timeout. The heartbeat timeout here is far longer than
// the bound, so only the fast path can meet it.
func TestNodeFastFailover(t *testing.T) {
	const hb = 1500 * time.Millisecond
	c := newCluster(t, 3, 1, 3, func(cfg *Config) {
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = hb, hb, 50*time.Millisecond
		cfg.CutOff = 10 * hb
	})
	ctx, cancel := context.WithTimeout(context.Background(), phase)
	defer cancel()
	old := c.leader(ctx)
	victim := old.proc()
	st := old.view()
	start := time.Now()
	stopped := c.crash(victim)
	defer stopped()
	nl := c.leader(ctx)
	took := time.Since(start)
	t.Logf("leader %d crashed; proc %d leads after %v (heartbeat timeout %v)", victim, nl.proc(), took.Round(time.Millisecond), hb)
	if took >= hb {
		t.Fatalf("a new leader took %v, not less than the heartbeat timeout %v: no fast failover", took, hb)
	}
	expedited := 0
	for _, n := range c.live() {
		expedited += n.expedites()
	}
	if expedited == 0 {
		t.Fatal("no node lowered its heartbeat timeout")
	}
	// The timeout is restored once the new leader is known, and the
	// membership still works: the dead leader is declared failed.
	proposer := c.other(victim)
	if _, err := proposer.reportFailure(ctx, victim, proposer.proc(), st.Epoch); err != nil {
		t.Fatalf("ReportFailure of the old leader: %v", err)
	}
	c.converge(ctx, st.Epoch+1)
	for _, n := range c.live() {
		deadline := time.Now().Add(2 * hb)
		for n.raftNode().ReloadableConfig().HeartbeatTimeout != hb {
			if time.Now().After(deadline) {
				t.Fatalf("proc %d: heartbeat timeout %v, not restored to %v", n.proc(), n.raftNode().ReloadableConfig().HeartbeatTimeout, hb)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}
