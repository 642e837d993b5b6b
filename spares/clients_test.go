package spares

import (
	"context"
	"slices"
	"testing"
	"time"
)

// TestNodeClientsOverTCP: the voters-only mode over loopback TCP with the
// job-token handshake: 3 voters and 9 clients in a tree of fan-out 2
// (procs 3 and 4 are children of voter 0, procs 9 and 10 of proc 3). A
// client with children dies and one of its orphans reports it; then the
// Raft leader dies: a client is promoted to voter, starts Raft over TCP
// and is added to the configuration; only the voters run Raft throughout.
func TestNodeClientsOverTCP(t *testing.T) {
	c := newCluster(t, 10, 2, 3, func(cfg *Config) {
		cfg.VotersOnly, cfg.MaxVoters, cfg.TreeFanout = true, 3, 2
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*phase)
	defer cancel()
	runningRaft := func() (procs []uint32) {
		for _, n := range c.live() {
			if n.raftNode() != nil {
				procs = append(procs, n.proc())
			}
		}
		return procs
	}
	leader := c.leader(ctx) // every client agrees on the leader through the tree
	st := leader.view()
	if got := runningRaft(); !slices.Equal(got, []uint32{0, 1, 2}) || !slices.Equal(st.Voters, got) {
		t.Fatalf("raft runs on %v, voters %v; want the voters 0 1 2 alone", got, st.Voters)
	}
	tr := newTree(&st, 2)
	if p := tr.Parent(9); p != 3 || tr.Parent(3) != 0 {
		t.Fatalf("tree: parent(9) = %d, parent(3) = %d", tr.Parent(9), tr.Parent(3))
	}

	// A client with children dies; an orphan reports it through a voter.
	rank, _ := st.RankOf(3)
	c.kill(3)
	res, err := c.nodes[9].reportFailure(ctx, 3, 9, st.Epoch)
	if err != nil || res.Promoted != 10 || res.Rank != rank {
		t.Fatalf("ReportFailure(3) from its child: %+v, %v", res, err)
	}
	got := c.converge(ctx, st.Epoch+1)
	if p, _ := got.ProcOf(rank); p != 10 {
		t.Fatalf("rank %d held by %d, want 10", rank, p)
	}

	// The leader dies.
	leader = c.leader(ctx)
	st = leader.view()
	victim := leader.proc()
	rank, _ = st.RankOf(victim)
	c.kill(victim)
	res, err = c.nodes[11].reportFailure(ctx, victim, 11, st.Epoch)
	if err != nil || res.Promoted != 11 || res.Rank != rank {
		t.Fatalf("ReportFailure(leader %d): %+v, %v", victim, res, err)
	}
	c.converge(ctx, st.Epoch+1)
	voters := c.votersRepaired(ctx, 3)
	if slices.Contains(voters, victim) {
		t.Fatalf("dead leader still a voter: %v", voters)
	}
	// The promoted client starts Raft when the tree tells it that it
	// votes, which may come after the leader's AddVoter committed.
	for got := runningRaft(); !slices.Equal(got, voters); got = runningRaft() {
		if ctx.Err() != nil || len(got) > len(voters) {
			t.Fatalf("raft runs on %v, want the voters %v alone", got, voters)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The new voter caught up through Raft: the membership still commits.
	if _, err := c.nodes[9].propose(ctx, finish{}); err != nil {
		t.Fatal(err)
	}
	for _, n := range c.live() {
		if _, err := n.awaitState(ctx, func(s *state) bool { return s.Status == statusFinished }); err != nil {
			t.Fatalf("node %d: %v", n.proc(), err)
		}
	}
}
