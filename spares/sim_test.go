package spares

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"runtime/debug"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gaspigo/gaspigo/internal/testkit/memnet"
	"github.com/hashicorp/raft"
)

// The simulation tier: hundreds or thousands of Nodes of the voters-only
// mode in one test process, over a memnet.Network, in a synctest bubble (fake
// time: every wait below is in fake time and the run is deterministic up
// to goroutine scheduling).

// The test kit's memory network is a Network.
var _ Network = (*memnet.Network)(nil)

var simN = flag.Int("spares.simn", 0, "also run the simulation tests at this many processes (e.g. 4096)")

type sim struct {
	t     *testing.T
	net   *memnet.Network
	nodes []*Node // nil once shut down
}

// newSim starts n nodes (the last spares of them spares) on hosts hosts.
func newSim(t *testing.T, n, spares, hosts int, mut func(*Config)) *sim {
	t.Helper()
	s := &sim{t: t, net: memnet.New(500 * time.Millisecond)}
	members := make([]Member, n)
	for i := range members {
		members[i] = Member{
			Proc: uint32(i), Host: fmt.Sprintf("h%d", i%hosts), Addr: fmt.Sprintf("data-%d", i),
			RaftAddr: fmt.Sprintf("raft-%d", i), CtlAddr: fmt.Sprintf("ctl-%d", i), Spare: i >= n-spares,
		}
	}
	for i := range members {
		cfg := LocalConfig()
		cfg.Proc, cfg.Members, cfg.NumRanks = uint32(i), members, n-spares
		cfg.VotersOnly, cfg.Network = true, s.net
		cfg.Logger = testLogger()
		if mut != nil {
			mut(&cfg)
		}
		node, err := NewNode(cfg)
		if err != nil {
			t.Fatalf("NewNode(%d): %v", i, err)
		}
		s.nodes = append(s.nodes, node)
	}
	return s
}

func (s *sim) kill(p uint32) {
	if n := s.nodes[p]; n != nil {
		if err := n.Shutdown(); err != nil {
			s.t.Errorf("shutdown %d: %v", p, err)
		}
		s.nodes[p] = nil
	}
}

func (s *sim) shutdownAll() {
	for i := range s.nodes {
		s.kill(uint32(i))
	}
}

func (s *sim) live() []*Node {
	var out []*Node
	for _, n := range s.nodes {
		if n != nil {
			out = append(out, n)
		}
	}
	return out
}

// leader waits (in fake time) for a live node that leads.
func (s *sim) leader() *Node {
	s.t.Helper()
	for range 3000 {
		for _, n := range s.live() {
			if n.IsLeader() {
				return n
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.t.Fatal("no leader after 30s of fake time")
	return nil
}

// settle waits (in fake time) until every live process is in contact with
// the membership's quorum by its own contact rule: the leader, a Raft node
// that heard from a leader within HeartbeatTimeout, a client whose news
// from the tree is fresh (treeFresh). Load measured from then on is the
// steady state's. Before, the start is still under way: every client's
// first follows, and the standing questions of the clients that the tree
// had not reached within a second (QueryAfter); with the leader elected
// at once, the first load window began at the start and took all of that
// in, as many as 413 standing questions, and pushed a client with
// children past its bound in some schedules.
func (s *sim) settle() {
	s.t.Helper()
	for range 3000 {
		now := time.Now()
		all := true
		for _, n := range s.live() {
			if n.IsLeader() {
				continue
			}
			if last := n.contactTime(now); last.IsZero() || now.Sub(last) > n.contactWindow() {
				all = false
				break
			}
		}
		if all {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.t.Fatal("not every process in contact with the quorum after 30s of fake time")
}

// converge waits until every live node has applied epoch and checks that
// they agree.
func (s *sim) converge(ctx context.Context, epoch uint64) state {
	s.t.Helper()
	awaitPool(s.t, ctx, s.live(), epoch)
	var first state
	for i, n := range s.live() {
		st, err := n.waitEpoch(ctx, epoch)
		if err != nil {
			s.t.Fatalf("node %d WaitEpoch(%d): %v (at %d)", n.proc(), epoch, err, st.Epoch)
		}
		if i == 0 {
			first = st
			continue
		}
		if st.Epoch != first.Epoch || !slices.Equal(st.Ranks.slice(), first.Ranks.slice()) || !slices.Equal(st.Spares, first.Spares) || len(st.Failed) != len(first.Failed) {
			s.t.Fatalf("nodes disagree:\n%d: %s\n%d: %s", s.live()[0].proc(), summarize(&first), n.proc(), summarize(&st))
		}
	}
	return first
}

// raftNodes counts the live nodes that run Raft.
func (s *sim) raftNodes() int {
	k := 0
	for _, n := range s.live() {
		if n.raftNode() != nil {
			k++
		}
	}
	return k
}

// quietLoad returns every live node's messages over d of fake time in
// which nothing changes.
func (s *sim) quietLoad(d time.Duration) map[uint32]memnet.MsgCounts {
	before := map[uint32]memnet.MsgCounts{}
	for _, n := range s.live() {
		before[n.proc()] = s.net.Counts(n.proc())
	}
	time.Sleep(d)
	out := map[uint32]memnet.MsgCounts{}
	for _, n := range s.live() {
		a, b := s.net.Counts(n.proc()), before[n.proc()]
		out[n.proc()] = memnet.MsgCounts{RaftSent: a.RaftSent - b.RaftSent, RaftReceived: a.RaftReceived - b.RaftReceived, CtlSent: a.CtlSent - b.CtlSent, CtlReceived: a.CtlReceived - b.CtlReceived}
	}
	return out
}

// checkFlatLoad fails when the leader, or any process, exchanged more
// messages over d than its fan-out explains: Raft with the other voters
// (heartbeats every HeartbeatTimeout/10 and commit notices) and one
// request and one answer per TreeHold with each of at most k children,
// the other voters, and its own parent.
func (s *sim) checkFlatLoad(d time.Duration, leader uint32) {
	s.t.Helper()
	load := s.quietLoad(d)
	cfg := s.live()[0].cfg
	rounds := uint64(d/cfg.treeHold()) + 1
	ctlBound := 2 * rounds * uint64(cfg.TreeFanout+cfg.MaxVoters+1) * 2 // ×2: reconnections after a change
	var most memnet.MsgCounts
	var mostProc uint32
	for p, c := range load {
		if c.CtlSent+c.CtlReceived > ctlBound {
			s.t.Errorf("proc %d exchanged %d control messages in %v, bound %d", p, c.CtlSent+c.CtlReceived, d, ctlBound)
		}
		if c.Total() > most.Total() {
			most, mostProc = c, p
		}
	}
	l := load[leader]
	s.t.Logf("%d processes, %v quiet: leader %d sent/received %d/%d raft, %d/%d control messages; busiest proc %d: %+v; control bound per process %d",
		len(load), d, leader, l.RaftSent, l.RaftReceived, l.CtlSent, l.CtlReceived, mostProc, most, ctlBound)
	// Raft runs among the voters only: the leader's Raft messages do not
	// depend on the number of processes.
	raftBound := uint64(cfg.MaxVoters) * uint64(d/(cfg.HeartbeatTimeout/10)+1) * 4
	if l.RaftSent > raftBound {
		s.t.Errorf("leader sent %d raft messages in %v, bound %d for %d voters", l.RaftSent, d, raftBound, cfg.MaxVoters)
	}
}

// simMemLimit keeps the garbage of a run at thousands of nodes (each holds
// its own O(N) state) from taking the machine's memory.
func simMemLimit(t *testing.T, n int) {
	if n > 1024 {
		old := debug.SetMemoryLimit(int64(n) << 20)
		t.Cleanup(func() { debug.SetMemoryLimit(old) })
	}
}

func simSizes() []int {
	sizes := []int{512}
	if *simN > 0 && *simN != 512 {
		sizes = append(sizes, *simN)
	}
	return sizes
}

// TestSimKillRankHolder: N processes, only the voters run Raft. A rank
// holder with children in the tree dies; a survivor reports it; every
// survivor (its orphaned children included) reaches the new epoch with
// the first spare holding the rank. The leader's load stays that of its
// fan-out.
func TestSimKillRankHolder(t *testing.T) {
	for _, n := range simSizes() {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			simMemLimit(t, n)
			start := time.Now()
			synctest.Test(t, func(t *testing.T) { simKillRankHolder(t, n) })
			t.Logf("n=%d: %v of wall time", n, time.Since(start).Round(time.Millisecond))
		})
	}
}

func simKillRankHolder(t *testing.T, n int) {
	s := newSim(t, n, 8, 16, nil)
	defer s.shutdownAll()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // fake time: fail, never hang
	defer cancel()
	leader := s.leader()
	st := leader.view()
	if got := s.raftNodes(); got != len(st.Voters) {
		t.Fatalf("%d nodes run raft, want the %d voters", got, len(st.Voters))
	}
	tr := newTree(&st, leader.cfg.TreeFanout)
	// The first client: a rank holder with children of its own.
	victim := tr.Clients()[0]
	rank, ok := st.RankOf(victim)
	kids := tr.Children(victim)
	if !ok || len(kids) == 0 {
		t.Fatalf("victim %d holds no rank or has no children (%v)", victim, kids)
	}
	t.Logf("tree of %d processes: %d voters, fan-out %d, depth %d", len(tr.Roots())+len(tr.Clients()), len(tr.Roots()), tr.Fanout(), tr.Depth())
	s.settle()
	s.checkFlatLoad(10*time.Second, leader.proc())

	spare := st.Spares[0]
	s.kill(victim)
	reporter := s.nodes[kids[0]] // an orphan reports (through a voter)
	t0 := time.Now()
	res, err := reporter.reportFailure(ctx, victim, reporter.proc(), st.Epoch)
	if err != nil || res.Promoted != spare || res.Rank != rank {
		t.Fatalf("ReportFailure(%d): %+v, %v", victim, res, err)
	}
	got := s.converge(ctx, st.Epoch+1)
	t.Logf("every one of %d survivors at epoch %d after %v (fake time)", len(s.live()), got.Epoch, time.Since(t0))
	if p, _ := got.ProcOf(rank); p != spare {
		t.Fatalf("rank %d held by %d, want spare %d", rank, p, spare)
	}
	if r, _, err := s.nodes[spare].waitPromotion(ctx); err != nil || r != rank {
		t.Fatalf("spare %d WaitPromotion: %d, %v", spare, r, err)
	}
	for _, k := range kids {
		if s.nodes[k].lostErr() != nil {
			t.Fatalf("orphan %d gave up: %v", k, s.nodes[k].lostErr())
		}
	}
	s.checkFlatLoad(10*time.Second, s.leader().proc())
}

// TestSimKillLeader: the Raft leader (a rank holder) dies among N
// processes. The voters elect another, a survivor's report commits the
// promotion, every survivor reaches the new epoch, and the new leader
// promotes a client to voter: it starts Raft and catches up, so the
// recorded voters and Raft's configuration are Config.MaxVoters live processes
// again.
func TestSimKillLeader(t *testing.T) {
	for _, n := range simSizes() {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			simMemLimit(t, n)
			start := time.Now()
			synctest.Test(t, func(t *testing.T) { simKillLeader(t, n) })
			t.Logf("n=%d: %v of wall time", n, time.Since(start).Round(time.Millisecond))
		})
	}
}

func simKillLeader(t *testing.T, n int) {
	s := newSim(t, n, 8, 16, nil)
	defer s.shutdownAll()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // fake time: fail, never hang
	defer cancel()
	old := s.leader()
	st := old.view()
	victim := old.proc()
	rank, ok := st.RankOf(victim)
	if !ok {
		t.Fatalf("leader %d holds no rank", victim)
	}
	spare := st.Spares[0]
	s.kill(victim)
	reporter := s.nodes[st.Ranks.at(st.Ranks.len()-1)] // a deep client
	t0 := time.Now()
	res, err := reporter.reportFailure(ctx, victim, reporter.proc(), st.Epoch)
	if err != nil || res.Promoted != spare || res.Rank != rank {
		t.Fatalf("ReportFailure(%d): %+v, %v", victim, res, err)
	}
	got := s.converge(ctx, st.Epoch+1)
	t.Logf("leader %d replaced: every one of %d survivors at epoch %d after %v (fake time)", victim, len(s.live()), got.Epoch, time.Since(t0))
	if p, _ := got.ProcOf(rank); p != spare {
		t.Fatalf("rank %d held by %d, want spare %d", rank, p, spare)
	}
	// Voter repair: Config.MaxVoters live voters recorded everywhere, the same in
	// the leader's Raft configuration, and each runs Raft.
	want := old.cfg.MaxVoters
	var voters []uint32
	for _, nd := range s.live() {
		st, err := nd.awaitState(ctx, func(s *state) bool { return len(s.Voters) == want && !slices.Contains(s.Voters, victim) })
		if err != nil {
			t.Fatalf("node %d: voters %v: %v", nd.proc(), st.Voters, err)
		}
		voters = st.Voters
	}
	for range 3000 {
		l := s.leader()
		cf := l.raftNode().GetConfiguration()
		if cf.Error() == nil {
			var inRaft []uint32
			for _, srv := range cf.Configuration().Servers {
				if srv.Suffrage == raft.Voter {
					p, _ := procOfID(srv.ID)
					inRaft = append(inRaft, p)
				}
			}
			slices.Sort(inRaft)
			if slices.Equal(inRaft, voters) {
				break
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	for _, v := range voters {
		if s.nodes[v].raftNode() == nil {
			t.Fatalf("voter %d runs no raft", v)
		}
	}
	if got := s.raftNodes(); got != want {
		t.Fatalf("%d nodes run raft, want %d", got, want)
	}
	// The new voter caught up through Raft and the membership commits.
	if _, err := reporter.propose(ctx, finish{}); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	for _, nd := range s.live() {
		if _, err := nd.awaitState(ctx, func(s *state) bool { return s.Status == statusFinished }); err != nil {
			t.Fatalf("node %d never saw Finish: %v", nd.proc(), err)
		}
	}
	s.checkFlatLoad(10*time.Second, s.leader().proc())
}

// Rule (liveness), for a client: cut off from every process for good, it
// gives up with ErrCutOff after Config.CutOff, while its children fall
// back to their grandparent and keep both their contact and the news.
func TestSimClientCutOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const cutOff = 3 * time.Second
		s := newSim(t, 64, 4, 8, func(c *Config) { c.CutOff = cutOff })
		defer s.shutdownAll()
		st := s.leader().view()
		tr := newTree(&st, s.nodes[0].cfg.TreeFanout)
		victim := tr.Clients()[0]
		kids := tr.Children(victim)
		if len(kids) == 0 {
			t.Fatalf("victim %d has no children", victim)
		}
		for !s.nodes[victim].inContact(time.Now()) {
			time.Sleep(10 * time.Millisecond) // fake time: until the tree's first fresh news
		}
		time.Sleep(2 * testContactTick) // and a tick of the contact rule has seen it
		s.net.Partition(victim)
		at := time.Now()
		select {
		case <-s.nodes[victim].lost():
		case <-time.After(10 * cutOff):
			t.Fatalf("client %d cut off for good did not give up", victim)
		}
		err, d := s.nodes[victim].lostErr(), time.Since(at)
		var ce *cutOffError
		if !errors.As(err, &ce) || !errors.Is(err, ErrCutOff) {
			t.Fatalf("client %d gave up with %v, want a *CutOffError", victim, err)
		}
		if fresh := treeFresh(&s.nodes[0].cfg); d < cutOff || d > cutOff+fresh+time.Second {
			t.Fatalf("client gave up %v after the partition, want %v plus at most the contact window %v", d, cutOff, fresh)
		}
		t.Logf("client %d gave up %v after the partition: %v", victim, d, err)
		for _, k := range kids {
			if err := s.nodes[k].lostErr(); err != nil {
				t.Fatalf("child %d of the cut-off client gave up: %v", k, err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // fake time: fail, never hang
		defer cancel()
		if _, err := s.nodes[kids[0]].propose(ctx, finish{}); err != nil {
			t.Fatal(err)
		}
		for _, k := range kids {
			if _, err := s.nodes[k].awaitState(ctx, func(s *state) bool { return s.Status == statusFinished }); err != nil {
				t.Fatalf("child %d: %v", k, err)
			}
		}
	})
}

// Rule (liveness), for a client: declared failed while cut off, it learns
// it from the first process it reaches once the network heals, long
// before the cut-off bound.
func TestSimClientReplacedWhileCutOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const cutOff = 30 * time.Second
		s := newSim(t, 64, 4, 8, func(c *Config) { c.CutOff = cutOff })
		defer s.shutdownAll()
		leader := s.leader()
		st := leader.view()
		tr := newTree(&st, s.nodes[0].cfg.TreeFanout)
		victim := tr.Clients()[3]
		s.net.Partition(victim)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // fake time: fail, never hang
		defer cancel()
		if _, err := leader.reportFailure(ctx, victim, leader.proc(), st.Epoch); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Second)
		if _, failed := s.nodes[victim].view().Failed[victim]; failed || s.nodes[victim].lostErr() != nil {
			t.Fatalf("cut-off client %d learnt its fate through the partition (%v)", victim, s.nodes[victim].lostErr())
		}
		s.net.Heal(victim)
		healed := time.Now()
		// The news (the view declares it failed: pgas fences on it) or the
		// standing answer (lost), whichever comes first.
		_, err := s.nodes[victim].awaitState(ctx, func(s *state) bool { _, f := s.Failed[victim]; return f })
		lost := s.nodes[victim].lostErr()
		if err != nil && !errors.Is(err, ErrDeclaredFailed) {
			t.Fatalf("healed client %d: %v; want its view to declare it failed, or ErrDeclaredFailed", victim, err)
		}
		if d := time.Since(healed); d > cutOff/4 {
			t.Fatalf("healed client learnt its fate %v after the heal", d)
		}
		t.Logf("healed client %d learnt its fate %v after the heal: %v / %v", victim, time.Since(healed), err, lost)
	})
}

// A parent that still answers but has lost its own upstream (cut off from
// every voter) cannot pass news on: its children notice that its contact
// is stale and ask the next one up, so they still learn the news.
func TestSimStaleParentIsSkipped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, 64, 4, 8, nil)
		defer s.shutdownAll()
		leader := s.leader()
		st := leader.view()
		tr := newTree(&st, s.nodes[0].cfg.TreeFanout)
		parent := tr.Clients()[0]
		kids := tr.Children(parent)
		if len(kids) == 0 {
			t.Fatalf("proc %d has no children", parent)
		}
		for !s.nodes[kids[0]].inContact(time.Now()) {
			time.Sleep(10 * time.Millisecond) // fake time: until the tree's first fresh news
		}
		for _, v := range st.Voters {
			s.net.CutLink(parent, v)
		}
		time.Sleep(time.Second)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // fake time
		defer cancel()
		if _, err := leader.propose(ctx, finish{}); err != nil {
			t.Fatal(err)
		}
		at := time.Now()
		for _, k := range kids {
			if _, err := s.nodes[k].awaitState(ctx, func(s *state) bool { return s.Status == statusFinished }); err != nil {
				t.Fatalf("child %d: %v", k, err)
			}
		}
		if _, f := s.nodes[parent].view().Failed[parent]; s.nodes[parent].view().Status == statusFinished && !f {
			t.Fatalf("the cut-off parent %d got the news", parent)
		}
		bound := 3*s.nodes[0].cfg.treeHold() + treeFresh(&s.nodes[0].cfg)
		if d := time.Since(at); d > bound {
			t.Fatalf("children of a stale parent got the news %v later, want within %v", d, bound)
		}
		t.Logf("children of the stale parent %d got the news %v later", parent, time.Since(at))
	})
}
