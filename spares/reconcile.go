package spares

import (
	"context"
	"slices"
	"time"

	"github.com/hashicorp/raft"
)

// The leader's upkeep: while this node leads Raft, it keeps Raft's
// configuration in line with the state (the voter plan of voters.go)
// and ends the waits for a joiner that ran out (refill.go).

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
				n.log.Info("spares: became raft leader", "epoch", n.view().Epoch)
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
		data, err := encodeCommand(setVoters{Voters: plan.Voters})
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
		if err := n.await(r.AddNonvoter(serverID(p), raft.ServerAddress(st.Procs.info(p).RaftAddr), 0, n.cfg.RPCTimeout)); err != nil {
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
		if err := n.await(r.AddVoter(serverID(p), raft.ServerAddress(st.Procs.info(p).RaftAddr), 0, n.cfg.RPCTimeout)); err != nil {
			n.log.Warn("spares: promoting to voter", "voter", p, "err", err)
			return
		}
		n.log.Info("spares: process promoted to raft voter", "voter", p, "host", st.Procs.info(p).Host)
	}
	if !record() {
		return
	}
	if removeSelf {
		n.log.Warn("spares: this leader was declared failed; leaving the raft configuration")
		_ = n.await(r.RemoveServer(serverID(n.cfg.Proc), 0, n.cfg.RPCTimeout))
	}
}
