package spares

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gaspigo/gaspigo/obs"
	"github.com/gaspigo/gaspigo/transport"
	"github.com/hashicorp/raft"
)

// Joiners and waits for them over a memnet.Network, in fake time (synctest).

// join starts a process that joins the sim's running job (Config.Join)
// with the next process id, given the job's original table, and returns
// it once joinSelf has seen it in the state.
func (s *sim) join(ctx context.Context, host string) (*Node, state) {
	s.t.Helper()
	node := s.startJoiner(host)
	st, err := node.joinSelf(ctx)
	if err != nil {
		s.t.Fatalf("joiner %d: joinSelf: %v", node.proc(), err)
	}
	return node, st
}

// startJoiner starts the node of a joiner with the next process id.
func (s *sim) startJoiner(host string) *Node {
	s.t.Helper()
	p := uint32(len(s.nodes))
	cfg := s.firstConfig()
	cfg.Proc, cfg.Join = p, true
	// As the rendezvous does: the records of the joiners before it.
	cfg.Contacts = nil
	for q := uint32(len(cfg.Members)); q < p; q++ {
		cfg.Contacts = append(cfg.Contacts, joinerMember(q, "hj"))
	}
	cfg.Self = joinerMember(p, host)
	node, err := NewNode(cfg)
	if err != nil {
		s.t.Fatalf("NewNode(joiner %d): %v", p, err)
	}
	s.nodes = append(s.nodes, node)
	return node
}

// joinerMember is the record of joiner p on host.
func joinerMember(p uint32, host string) Member {
	return Member{Proc: p, Host: host, Addr: fmt.Sprintf("data-%d", p), RaftAddr: fmt.Sprintf("raft-%d", p), CtlAddr: fmt.Sprintf("ctl-%d", p), Spare: true}
}

// firstConfig is the configuration the sim's first process was started
// with: the job's original table and policies.
func (s *sim) firstConfig() Config {
	for _, n := range s.nodes {
		if n != nil {
			return n.cfg
		}
	}
	s.t.Fatal("no live process left to copy the configuration of")
	return Config{}
}

// lose kills victim and has a survivor report it; it returns the state
// that committed the failure, once every survivor applied it.
func (s *sim) lose(ctx context.Context, victim uint32) state {
	s.t.Helper()
	s.kill(victim)
	reporter := s.live()[len(s.live())-1]
	res, err := reporter.reportFailure(ctx, victim, reporter.proc(), reporter.view().Epoch)
	if err != nil || !res.Changed {
		s.t.Fatalf("ReportFailure(%d): %+v, %v", victim, res, err)
	}
	return s.converge(ctx, res.Epoch)
}

// clientRankHolder is a live rank holder that is no voter (and so does
// not lead): its loss costs no election.
func clientRankHolder(st *state, skip int) uint32 {
	for _, p := range st.Ranks.slice() {
		if _, failed := st.Failed[p]; p != noProc && !failed && !st.IsVoter(p) {
			if skip == 0 {
				return p
			}
			skip--
		}
	}
	return noProc
}

// Rule (refill): a rank lost with an empty pool awaits a joiner; its
// failed process holds it meanwhile. A joiner that comes 2s later takes it
// at once, and the leader's clock then never ends the wait.
func TestSimRefillJoinerTakesAwaitingRank(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const wait = 10 * time.Second
		s := newSim(t, 24, 0, 4, func(c *Config) { c.RefillWait = wait })
		defer s.shutdownAll()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // fake time: fail, never hang
		defer cancel()
		s.leader()
		victim := clientRankHolder(ptr(s.live()[0].view()), 0)
		st := s.lose(ctx, victim)
		rank, _ := st.RankOf(victim)
		if since, ok := st.AwaitingSince(rank); !ok || since != st.Epoch || st.Ranks.at(rank) != victim || st.Status != statusRunning {
			t.Fatalf("rank %d does not await a joiner after its loss: %s", rank, summarize(&st))
		}
		m := NewMembership(s.nodes[0])
		if v := m.Current(); uint32(v.Ranks[rank]) != victim || !slices.Contains(v.Failed, transport.Proc(victim)) {
			t.Fatalf("the view does not show rank %d held by its failed process: %+v", rank, v)
		}
		joinedBefore := obs.SparesJoined.Value()

		time.Sleep(2 * time.Second)
		joiner, jst := s.join(ctx, "hj")
		if p, _ := jst.ProcOf(rank); p != joiner.proc() {
			t.Fatalf("joiner %d did not take awaiting rank %d: %s", joiner.proc(), rank, summarize(&jst))
		}
		if r, _, err := joiner.waitPromotion(ctx); err != nil || r != rank {
			t.Fatalf("joiner WaitPromotion: %d, %v", r, err)
		}
		got := s.converge(ctx, st.Epoch+1)
		if len(got.Awaiting) != 0 || got.Ranks.at(rank) != joiner.proc() || got.Epoch != st.Epoch+1 {
			t.Fatalf("after the join: %s", summarize(&got))
		}
		v := m.Current()
		if len(v.Joined) != 1 || uint32(v.Joined[0].Proc) != joiner.proc() || v.Joined[0].Addr != joiner.self.Addr || v.Joined[0].Host != "hj" {
			t.Fatalf("view's joiners: %+v", v.Joined)
		}
		if d := obs.SparesJoined.Value() - joinedBefore; d < uint64(len(s.live())-1) {
			t.Errorf("gaspigo_spares_joined_total went up by %d, want one per process that applied the join (%d)", d, len(s.live()))
		}
		// The wait ended with the join: the leader's clock does not end it
		// again when RefillWait runs out.
		time.Sleep(wait)
		if after := s.converge(ctx, got.Epoch); after.Epoch != got.Epoch || after.Status != statusRunning {
			t.Fatalf("the state moved on after the wait ran out: %s", summarize(&after))
		}
	})
}

// Rule (refill): no joiner comes; RefillWait after the loss committed, the
// leader ends the wait. With Shrink the rank becomes vacant and the job
// goes on; without it the job fails with ErrSparesExhausted on every
// process.
func TestSimRefillWaitEnds(t *testing.T) {
	for _, shrink := range []bool{true, false} {
		t.Run(fmt.Sprintf("shrink=%v", shrink), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				const wait = 5 * time.Second
				s := newSim(t, 16, 0, 4, func(c *Config) { c.RefillWait, c.Shrink = wait, shrink })
				defer s.shutdownAll()
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // fake time: fail, never hang
				defer cancel()
				s.leader()
				victim := clientRankHolder(ptr(s.live()[0].view()), 0)
				// The leader's clock starts when it applies the loss,
				// between the report and its answer.
				reported := time.Now()
				st := s.lose(ctx, victim)
				rank, _ := st.RankOf(victim)
				if _, ok := st.AwaitingSince(rank); !ok {
					t.Fatalf("rank %d does not await: %s", rank, summarize(&st))
				}
				for _, n := range s.live() {
					got, err := n.waitEpoch(ctx, st.Epoch+1)
					if shrink && (err != nil || got.Ranks.at(rank) != noProc || got.Status != statusRunning || len(got.Awaiting) != 0) {
						t.Fatalf("node %d after the wait: %s, %v; want rank %d vacant", n.proc(), summarize(&got), err, rank)
					}
					if !shrink && !errors.Is(err, ErrSparesExhausted) {
						t.Fatalf("node %d after the wait: %s, %v; want ErrSparesExhausted", n.proc(), summarize(&got), err)
					}
				}
				took := time.Since(reported)
				if took < wait || took > wait+2*time.Second {
					t.Fatalf("the wait ended %v after the loss was reported, want %v (plus the commits)", took, wait)
				}
				t.Logf("the wait of rank %d ended %v after the loss was reported", rank, took)
			})
		})
	}
}

// A process that joins a running job waits as a spare (it follows the
// tree, runs no Raft) and is promoted when a rank is lost.
func TestSimJoinerPromotedLater(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, 24, 1, 4, nil)
		defer s.shutdownAll()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // fake time: fail, never hang
		defer cancel()
		s.leader()
		first := s.live()[0].view().Spares[0]
		joiner, jst := s.join(ctx, "hj")
		if !slices.Equal(jst.Spares, []uint32{first, joiner.proc()}) {
			t.Fatalf("joiner's view: %s", summarize(&jst))
		}
		if joiner.raftNode() != nil {
			t.Fatal("a joiner that is not a voter runs raft")
		}
		for i := range 2 {
			s.lose(ctx, clientRankHolder(ptr(s.live()[0].view()), 0))
			if i == 0 {
				if _, _, err := s.nodes[first].waitPromotion(ctx); err != nil {
					t.Fatalf("first spare: %v", err)
				}
			}
		}
		rank, st, err := joiner.waitPromotion(ctx)
		if err != nil || st.Ranks.at(rank) != joiner.proc() {
			t.Fatalf("joiner WaitPromotion: %d, %v (%s)", rank, err, summarize(&st))
		}
		if _, err := joiner.propose(ctx, finish{}); err != nil {
			t.Fatalf("Finish from the joiner: %v", err)
		}
		for _, n := range s.live() {
			if _, err := n.awaitState(ctx, func(s *state) bool { return s.Status == statusFinished }); err != nil {
				t.Fatalf("node %d: %v", n.proc(), err)
			}
		}
		// A joiner that comes after the end is told so and does not wait.
		late := s.startJoiner("hj")
		if st, err := late.joinSelf(ctx); !errors.Is(err, errJobFinished) {
			t.Fatalf("late joiner: %v (%s), want ErrJobFinished", err, summarize(&st))
		}
	})
}

// Rule (voters): the leader repairs the voter set from live clients, and
// joiners are clients like any other. All five processes of the job vote;
// two are lost (the second one's rank awaits a joiner); two joiners come,
// and the leader makes both voters again.
func TestSimJoinersRepairVoters(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, 5, 1, 5, func(c *Config) { c.RefillWait = time.Minute })
		defer s.shutdownAll()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // fake time: fail, never hang
		defer cancel()
		leader := s.leader()
		st := leader.view()
		if len(st.Voters) != 5 {
			t.Fatalf("voters %v, want all five processes", st.Voters)
		}
		for range 2 {
			st := s.live()[0].view()
			victim := st.Ranks.at(slices.IndexFunc(st.Ranks.slice(), func(p uint32) bool { return p != leader.proc() && p != noProc && st.Failed[p] == 0 }))
			s.lose(ctx, victim)
		}
		st = s.converge(ctx, 3)
		if len(st.Awaiting) != 1 || len(st.Voters) != 3 {
			t.Fatalf("after two losses: %s; want one rank awaiting and three voters", summarize(&st))
		}
		var joiners []uint32
		for range 2 {
			j, _ := s.join(ctx, "hj")
			joiners = append(joiners, j.proc())
		}
		want := append(slices.Clone(st.Voters), joiners...)
		slices.Sort(want)
		for _, n := range s.live() {
			got, err := n.awaitState(ctx, func(s *state) bool { return slices.Equal(sorted(s.Voters), want) })
			if err != nil {
				t.Fatalf("node %d: voters %v, want %v: %v", n.proc(), got.Voters, want, err)
			}
		}
		// Raft's configuration says the same, and the joiners run Raft.
		for range 3000 {
			if slices.Equal(raftVoters(s.leader()), want) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if got := raftVoters(s.leader()); !slices.Equal(got, want) {
			t.Fatalf("raft voters %v, want %v", got, want)
		}
		// A joiner starts Raft in its own follow loop once it applied a
		// state that makes it a voter: it may be a step behind the leader.
		for _, j := range joiners {
			for range 3000 {
				if s.nodes[j].raftNode() != nil {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			if s.nodes[j].raftNode() == nil {
				t.Fatalf("joiner %d votes but runs no raft after 30 s (fake time)", j)
			}
		}
		// The repaired quorum commits a joiner's proposal.
		if _, err := s.nodes[joiners[0]].propose(ctx, finish{}); err != nil {
			t.Fatalf("Finish: %v", err)
		}
		for _, n := range s.live() {
			if _, err := n.awaitState(ctx, func(s *state) bool { return s.Status == statusFinished }); err != nil {
				t.Fatalf("node %d: %v", n.proc(), err)
			}
		}
	})
}

// A joiner knows only the job's original table, whose voters may all have
// been replaced since: it reaches the job through the other processes.
func TestSimJoinerAfterOriginalVotersGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, 16, 0, 4, func(c *Config) { c.RefillWait = 10 * time.Minute })
		defer s.shutdownAll()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute) // fake time: fail, never hang
		defer cancel()
		s.leader()
		original := slices.Clone(s.live()[0].view().Voters)
		for _, v := range original {
			st := s.lose(ctx, v)
			// Wait for the voter set's repair before the next loss, so
			// that the quorum is never lost.
			for _, n := range s.live() {
				if _, err := n.awaitState(ctx, func(s *state) bool { return len(s.Voters) == len(original) }); err != nil {
					t.Fatalf("node %d: voters not repaired after losing %d: %v", n.proc(), v, err)
				}
			}
			s.leader()
			t.Logf("voter %d lost: %s", v, summarize(&st))
		}
		st := s.live()[0].view()
		awaiting := len(st.Awaiting)
		if awaiting == 0 || slices.ContainsFunc(st.Voters, func(v uint32) bool { return slices.Contains(original, v) }) {
			t.Fatalf("after losing every original voter: %s", summarize(&st))
		}
		for range awaiting {
			j, jst := s.join(ctx, "hj")
			if _, ok := jst.RankOf(j.proc()); !ok {
				t.Fatalf("joiner %d holds no rank: %s", j.proc(), summarize(&jst))
			}
		}
		if got := s.converge(ctx, st.Epoch+uint64(awaiting)); len(got.Awaiting) != 0 || got.Status != statusRunning {
			t.Fatalf("after the joins: %s", summarize(&got))
		}
	})
}

// Rule (contacts): a joiner reaches the membership when every process the
// job started with is gone, through the processes that joined before it
// (Config.Contacts, which the rendezvous gives it): a job of 4 ranks and a
// spare, all five voters, loses one process at a time, oldest first, and
// each loss is made good by a joiner, until none of the five is left.
func TestSimJoinerAfterEveryOriginalProcessGone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newSim(t, 5, 1, 5, func(c *Config) { c.RefillWait = 10 * time.Minute })
		defer s.shutdownAll()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // fake time: fail, never hang
		defer cancel()
		s.leader()
		for round := range 8 {
			victim := s.live()[0].proc() // the oldest live process
			st := s.lose(ctx, victim)
			for _, n := range s.live() {
				if _, err := n.awaitState(ctx, func(st *state) bool { return len(st.Voters) == min(5, len(s.live())) }); err != nil {
					t.Fatalf("round %d: node %d: voters not repaired after losing %d: %v", round, n.proc(), victim, err)
				}
			}
			j, jst := s.join(ctx, "hj")
			t.Logf("round %d: lost %d, joiner %d: %s", round, victim, j.proc(), summarize(&jst))
			if st.Status != statusRunning {
				t.Fatalf("round %d: the job stopped: %s", round, summarize(&st))
			}
			s.leader()
		}
		st := s.converge(ctx, s.live()[0].view().Epoch)
		for p := range uint32(5) {
			if _, failed := st.Failed[p]; !failed {
				t.Fatalf("original process %d not failed after eight losses: %s", p, summarize(&st))
			}
		}
		if len(st.Awaiting) != 0 || st.Status != statusRunning || len(st.Spares)+st.Ranks.len() < 5 {
			t.Fatalf("after the joins: %s", summarize(&st))
		}
	})
}

func sorted(v []uint32) []uint32 {
	out := slices.Clone(v)
	slices.Sort(out)
	return out
}

// raftVoters is the voters of l's Raft configuration, sorted.
func raftVoters(l *Node) []uint32 {
	cf := l.raftNode().GetConfiguration()
	if cf.Error() != nil {
		return nil
	}
	var out []uint32
	for _, srv := range cf.Configuration().Servers {
		if srv.Suffrage == raft.Voter {
			p, _ := procOfID(srv.ID)
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// Rule (refill clock): a new leader times every wait afresh from when it
// took over, so a leader's loss makes a wait longer, never shorter.
func TestSimRefillLeaderChangeRestartsClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const wait = 5 * time.Second
		s := newSim(t, 16, 0, 4, func(c *Config) { c.RefillWait, c.Shrink = wait, true })
		defer s.shutdownAll()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // fake time: fail, never hang
		defer cancel()
		old := s.leader()
		victim := clientRankHolder(ptr(old.view()), 0)
		reported := time.Now()
		st := s.lose(ctx, victim)
		rank, _ := st.RankOf(victim)

		time.Sleep(3 * time.Second)
		// The next leader is elected after the kill, and only then
		// starts its clock.
		killed := time.Now()
		s.lose(ctx, old.proc()) // its rank awaits too
		newLeader := s.leader()
		time.Sleep(time.Until(reported.Add(wait + time.Second)))
		if v := newLeader.view(); !slices.Contains(v.Awaiting, awaiting{Rank: rank, Since: st.Epoch}) {
			t.Fatalf("rank %d's wait ended %v after the loss, before the new leader's clock ran out: %s", rank, time.Since(reported), summarize(&v))
		}
		got, err := newLeader.awaitState(ctx, func(s *state) bool { return s.Ranks.at(rank) == noProc })
		if err != nil {
			t.Fatalf("rank %d never became vacant: %v (%s)", rank, err, summarize(&got))
		}
		if d := time.Since(killed); d < wait || d > wait+3*time.Second {
			t.Fatalf("the new leader ended the wait %v after the old one was killed, want %v plus an election", d, wait)
		}
		t.Logf("rank %d vacant %v after its loss; the leader changed 3s in", rank, time.Since(reported))
	})
}
