package spares

import (
	"context"
	"errors"
	"net"
	"sync"
	"syscall"
	"time"

	"github.com/hashicorp/raft"
)

// Fast failover of the Raft leader.
//
// A follower notices a dead leader only when its heartbeat timer finds no
// contact for a whole HeartbeatTimeout, and the timer is drawn at random
// from [HeartbeatTimeout, 2×HeartbeatTimeout): a leader kill used to cost
// 0.3-0.5 s before the new epoch, most of it waiting. But when a process
// is SIGKILLed its kernel closes its sockets, and every voter holds a Raft
// connection from the leader: the voters see it end at once. That alone is
// weak evidence (a leader closes surplus pooled connections too), so the
// voter dials the leader's Raft address; a refused connection means no
// process listens there any more. Then, and when this process's failure
// detector confirms the leader's process dead (reportFailure), the node
// lowers its heartbeat and election timeouts to the leader lease
// (ReloadConfig wakes the follower's timer), so it stands for election as
// soon as the lease has run out, and restores them once a new leader is
// known. A false alarm costs at most an election, never safety: Raft's own
// rules still decide.
//
// failover also lets propose retry at once when a leader appears, instead
// of after its backoff.

// failover is owned by a Node.
type failover struct {
	mu         sync.Mutex
	changed    chan struct{} // closed and replaced at every leader change
	expedited  bool          // the heartbeat timeout is lowered
	oldLeader  raft.ServerID // the leader suspected when it was lowered
	probing    bool          // a probe of the leader's address is under way
	again      bool          // another connection ended during the probe
	expedites  int           // times lowered (for tests and logs)
	restoreDue time.Time     // when a lowered timeout goes back regardless
}

// leaderChanged returns a channel closed at the next leader change this
// node observes.
func (n *Node) leaderChanged() <-chan struct{} {
	n.fo.mu.Lock()
	defer n.fo.mu.Unlock()
	return n.fo.changed
}

// watchLeader is owned by the node: it turns Raft's leader observations
// into leaderChanged wake-ups and restores the heartbeat timeout after a
// fast failover.
func (n *Node) watchLeader(r *raft.Raft, obs <-chan raft.Observation) {
	t := time.NewTicker(n.cfg.HeartbeatTimeout)
	defer t.Stop()
	for {
		select {
		case <-n.closeCh:
			return
		case o := <-obs:
			lo, ok := o.Data.(raft.LeaderObservation)
			if !ok {
				continue
			}
			n.fo.mu.Lock()
			close(n.fo.changed)
			n.fo.changed = make(chan struct{})
			restore := n.fo.expedited && lo.LeaderID != "" && lo.LeaderID != n.fo.oldLeader
			n.fo.mu.Unlock()
			if restore {
				n.restoreHeartbeat(r, "a new leader is known", lo.LeaderID)
			}
		case now := <-t.C:
			n.fo.mu.Lock()
			late := n.fo.expedited && now.After(n.fo.restoreDue)
			n.fo.mu.Unlock()
			if late {
				n.restoreHeartbeat(r, "no new leader in time", "")
			}
		}
	}
}

// leaderConnLost is called when an authenticated Raft connection from
// peer ended from the far side. If peer leads, probe its address.
func (n *Node) leaderConnLost(peer uint32) {
	leader, ok := n.leader()
	n.log.Debug("spares: raft connection ended by the peer", "peer", peer, "leader", leader)
	if !ok || leader != peer || peer == n.cfg.Proc {
		return
	}
	n.fo.mu.Lock()
	if n.fo.expedited {
		n.fo.mu.Unlock()
		return
	}
	if n.fo.probing {
		n.fo.again = true // probe once more when this probe ends
		n.fo.mu.Unlock()
		return
	}
	n.fo.probing = true
	n.fo.mu.Unlock()
	addr := n.raftAddrOf(peer)
	ok = addr != "" && n.goFunc(func() {
		for {
			gone := listenerGone(n.ctx, addr, n.cfg.LeaderLeaseTimeout)
			n.log.Debug("spares: probed the leader's raft address", "addr", addr, "gone", gone)
			if gone {
				n.expediteElection(peer, "the leader's raft connection ended and its address refuses connections")
			}
			n.fo.mu.Lock()
			again := n.fo.again && !n.fo.expedited && n.ctx.Err() == nil
			n.fo.again, n.fo.probing = false, again
			n.fo.mu.Unlock()
			if !again {
				return
			}
		}
	})
	if !ok {
		n.fo.mu.Lock()
		n.fo.probing = false
		n.fo.mu.Unlock()
	}
}

// listenerGone dials addr a few times, a few milliseconds apart: true only
// when a connection is refused (nothing listens there: the process is
// gone), never on a timeout, which a slow or partitioned host could also
// cause. The repeats cover a dying process whose connections closed a
// moment before its listener.
func listenerGone(ctx context.Context, addr string, timeout time.Duration) bool {
	const tries = 5
	d := net.Dialer{Timeout: timeout}
	for i := 0; i < tries; i++ {
		c, err := d.DialContext(ctx, "tcp", addr)
		if errors.Is(err, syscall.ECONNREFUSED) {
			return true
		}
		if err == nil {
			c.Close()
		}
		t := time.NewTimer(timeout / tries)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
	}
	return false
}

func (n *Node) raftAddrOf(p uint32) string {
	st, _ := n.fsm.view()
	if info, ok := st.Procs.get(p); ok && info.RaftAddr != "" {
		return info.RaftAddr
	}
	for _, m := range n.cfg.Members {
		if m.Proc == p {
			return m.RaftAddr
		}
	}
	return ""
}

// expediteElection lowers the heartbeat timeout to the leader lease while
// proc still counts as the leader. Only a process that can vote gains by
// it, but a non-voter also clears its stale leader sooner.
func (n *Node) expediteElection(proc uint32, why string) {
	r := n.raftNode()
	if r == nil {
		return // a client of the voters-only mode has no election to hasten
	}
	leader, ok := n.leader()
	if !ok || leader != proc || proc == n.cfg.Proc {
		return
	}
	if fast, ok := n.lowerTimeouts(r, serverID(proc)); ok {
		n.fo.mu.Lock()
		n.fo.expedites++
		n.fo.mu.Unlock()
		n.log.Info("spares: leader presumed dead; standing for election early", "leader_proc", proc, "why", why, "heartbeat_timeout", fast)
	}
}

// standFirst lowers the first initial voter's timeouts at a fresh start,
// so that the membership has a leader after about a lease instead of a
// heartbeat timeout or two: with no leader, a failure cannot be
// committed, and on an oversubscribed host the stretched timeout is
// seconds (4.8 s at 256 processes on 2 cores, and Raft draws the first
// election between one and two of it). The other voters keep theirs, so
// they do not split the vote; any leader restores the timeouts.
func (n *Node) standFirst(r *raft.Raft) {
	if fast, ok := n.lowerTimeouts(r, ""); ok {
		n.log.Debug("spares: first voter; standing for election early", "heartbeat_timeout", fast)
	}
}

// lowerTimeouts lowers the heartbeat and election timeouts to the leader
// lease until a leader other than old is known (or 4 heartbeat timeouts
// pass). It returns the lowered timeout, and false when they were
// lowered already, cannot go lower, or Raft refused.
func (n *Node) lowerTimeouts(r *raft.Raft, old raft.ServerID) (time.Duration, bool) {
	fast := max(n.cfg.LeaderLeaseTimeout, 5*time.Millisecond)
	if fast >= n.cfg.HeartbeatTimeout {
		return 0, false
	}
	n.fo.mu.Lock()
	if n.fo.expedited {
		n.fo.mu.Unlock()
		return 0, false
	}
	n.fo.expedited, n.fo.oldLeader = true, old
	n.fo.restoreDue = time.Now().Add(4 * n.cfg.HeartbeatTimeout)
	n.fo.mu.Unlock()
	rc := r.ReloadableConfig()
	rc.HeartbeatTimeout = fast
	// A split vote among voters that all stood at once is retried after
	// the election timeout: shorten it as well.
	rc.ElectionTimeout = fast
	if err := r.ReloadConfig(rc); err != nil {
		n.log.Warn("spares: could not lower the raft heartbeat timeout", "err", err)
		n.fo.mu.Lock()
		n.fo.expedited = false
		n.fo.mu.Unlock()
		return 0, false
	}
	return fast, true
}

// restoreHeartbeat puts the configured heartbeat timeout back.
func (n *Node) restoreHeartbeat(r *raft.Raft, why string, leader raft.ServerID) {
	n.fo.mu.Lock()
	if !n.fo.expedited {
		n.fo.mu.Unlock()
		return
	}
	n.fo.expedited = false
	n.fo.mu.Unlock()
	rc := r.ReloadableConfig()
	rc.HeartbeatTimeout = n.cfg.HeartbeatTimeout
	rc.ElectionTimeout = n.cfg.ElectionTimeout
	if err := r.ReloadConfig(rc); err != nil {
		n.log.Warn("spares: could not restore the raft heartbeat timeout", "err", err)
		return
	}
	n.log.Debug("spares: raft heartbeat timeout restored", "why", why, "leader", string(leader))
}

// expedites reports how many times this node lowered its heartbeat timeout
// for a fast failover.
func (n *Node) expedites() int {
	n.fo.mu.Lock()
	defer n.fo.mu.Unlock()
	return n.fo.expedites
}
