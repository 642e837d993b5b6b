package spares

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/raft"
)

// Moving the leadership.
//
// Any voter may win an election, an idle spare as well as a rank: on a
// loaded machine the spare, idle while the ranks load their data, often
// wins the first one. For the job that is as good as any, and a leader no
// failure of a rank touches is even better; but a program or test that
// means to see the leader of the membership die with a rank (kill:leader)
// needs it on a rank. transferLeadership puts it there, through Raft's
// leadership transfer: the leader brings the target's log up to date and
// tells it to stand at once, so the target wins the next term without an
// election timeout and nothing is proposed meanwhile.

// ctlOpLead asks the leader to hand its leadership to the proc in the
// payload (4 bytes, big-endian); see ctl.go for the framing.
const ctlOpLead = 4

// transferLeadership moves the Raft leadership to the voter to, or, with
// to = noProc, onto a rank: a leader that holds one stays, else the
// leadership goes to the lowest live voter that holds a rank. It returns
// once
// this node sees that voter lead; it returns the new leader. From a
// process other than the leader the request goes through the leader's
// control RPC. A leader change, a leader that cannot be reached or a
// transfer that did not complete is retried until ctx ends (an error
// wrapping errTimeout); a target that is not a live voter returns
// errBadCommand at once, and after Shutdown errClosed.
func (n *Node) transferLeadership(ctx context.Context, to uint32) (uint32, error) {
	tick := time.NewTicker(max(n.cfg.ProposeRetryMin, 5*time.Millisecond))
	defer tick.Stop()
	var last error
	for {
		if n.isClosed() {
			return noProc, errClosed
		}
		st, _ := n.fsm.view()
		l, known := n.leader()
		if !known {
			l = noProc
		}
		target, err := leadTarget(&st, to, l)
		if err != nil {
			return noProc, err
		}
		if l == target {
			return target, nil
		}
		changed := n.leaderChanged()
		leader, err := n.leadOnce(ctx, &st, target)
		if err == nil && leader == target {
			// The old leader saw the target take over. This node may
			// learn it later (a client at the tree's next answer).
			return target, nil
		}
		if err != nil {
			if errors.Is(err, errBadCommand) || errors.Is(err, errClosed) {
				return noProc, err
			}
			last = err
			n.log.Debug("spares: leadership transfer retry", "to", target, "err", err)
		}
		select {
		case <-changed:
		case <-tick.C:
		case <-ctx.Done():
			return noProc, fmt.Errorf("%w: moving the leadership to proc %d (last error: %v): %w", errTimeout, target, last, ctx.Err())
		case <-n.closeCh:
			return noProc, errClosed
		}
	}
}

// leadTarget resolves transferLeadership's to in st, with leader the
// leader known now (noProc: none).
func leadTarget(st *state, to, leader uint32) (uint32, error) {
	live := func(p uint32) bool {
		_, failed := st.Failed[p]
		return st.IsVoter(p) && !failed
	}
	if to != noProc {
		if !live(to) {
			return noProc, badCmd("proc %d is not a live voter (voters %v)", to, st.Voters)
		}
		return to, nil
	}
	if _, ok := st.RankOf(leader); ok && live(leader) {
		return leader, nil
	}
	voters := slices.Clone(st.Voters)
	slices.Sort(voters)
	for _, v := range voters {
		if _, ok := st.RankOf(v); ok && live(v) {
			return v, nil
		}
	}
	return noProc, badCmd("no live voter holds a rank (voters %v)", st.Voters)
}

// leadOnce makes one attempt, locally on the leader, else through the
// control RPC of the leader this node knows. It returns the leader that
// the old leader knows of afterwards.
func (n *Node) leadOnce(ctx context.Context, st *state, target uint32) (uint32, error) {
	if n.IsLeader() {
		if err := n.leadLocal(target); err != nil {
			return noProc, err
		}
		l, _ := n.leader()
		return l, nil
	}
	leader, ok := n.leader()
	if !ok {
		return noProc, errNoLeader
	}
	addr := n.ctlAddrOf(st, leader)
	if addr == "" {
		return noProc, fmt.Errorf("%w: proc %d has no control address", errNoLeader, leader)
	}
	var payload [4]byte
	binary.BigEndian.PutUint32(payload[:], target)
	_, now, err := n.callCtlOp(ctx, addr, n.cfg.Token, ctlOpLead, payload[:])
	return now, err
}

// leadLocal hands this leader's leadership to target, a voter of its Raft
// configuration. It returns once Raft has told target to stand and this
// node has heard from the new leader, or after a heartbeat timeout
// without news (or Raft gave up after an election timeout).
func (n *Node) leadLocal(target uint32) error {
	r := n.raftNode()
	if r == nil || r.State() != raft.Leader {
		return errNotLeader
	}
	if target == n.cfg.Proc {
		return nil
	}
	cf := r.GetConfiguration()
	if err := cf.Error(); err != nil {
		return err
	}
	i := slices.IndexFunc(cf.Configuration().Servers, func(s raft.Server) bool {
		return s.ID == serverID(target) && s.Suffrage == raft.Voter
	})
	if i < 0 {
		return badCmd("proc %d is not a voter of the raft configuration", target)
	}
	addr := cf.Configuration().Servers[i].Address
	n.log.Info("spares: handing the raft leadership over", "to", target)
	if err := n.await(r.LeadershipTransferToServer(serverID(target), addr)); err != nil {
		return mapRaftErr(err)
	}
	// This node learns the new leader from its first append.
	t := time.NewTimer(n.cfg.HeartbeatTimeout)
	defer t.Stop()
	for {
		changed := n.leaderChanged()
		if l, ok := n.leader(); ok && l == target {
			return nil
		}
		select {
		case <-changed:
		case <-t.C:
			return nil
		case <-n.closeCh:
			return errClosed
		}
	}
}
