package spares

import (
	"bytes"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/raft"
)

// Bounded shutdown.
//
// hashicorp/raft's Shutdown waits for every goroutine Raft started: its
// run loop, the FSM and snapshot loops, on a leader one replication and
// one heartbeat goroutine per follower, and one per vote request. It
// closes the transport only after that wait. A goroutine blocked in an
// RPC to a peer that stopped answering holds the wait until the RPC's
// deadline, and one blocked where no deadline reaches holds it for ever:
// a process that had finished its work then never exited.
//
// Raft's Shutdown may also drop the answer to an operation it has just
// committed (its FSM goroutine returns without draining its queue), and a
// goroutine waiting on that answer would wait for ever. So Shutdown first
// lets the answers to the operations this node waits on arrive (awaitCtx
// counts them), while Raft still runs and answers every one: at once when
// committed, when the leader steps down otherwise. That takes at most half
// of Config.ShutdownTimeout, and Raft gets the rest.
//
// So Shutdown gives Raft Config.ShutdownTimeout, then closes the transport
// itself (Raft closes it again afterwards, which is harmless). That fails
// every RPC in flight and every dial still in its handshake (raftStream
// cancels them). Raft then gets a quarter of ShutdownTimeout more, and is
// abandoned after that: the goroutines still blocked, and the stores they
// may still use, are left to the process's exit, and Shutdown says so once
// in the log and in its error.
//
// Leaving needs no consensus. A node that shuts down stays in the Raft
// configuration: the job has finished, or this process is ending anyway,
// and nobody waits for it. A leader that leaves is replaced by the others'
// election, as when its process dies.

// shutdown is Shutdown's one run.
func (n *Node) shutdown() error {
	n.mu.Lock()
	n.closed = true
	close(n.closeCh)
	trans := n.trans
	n.mu.Unlock()
	n.cancel()
	n.ctl.Close()
	r := n.raftNode() // nil on a client of the voters-only mode
	leader := r != nil && r.State() == raft.Leader

	// The Raft futures this node waits on get their answers first, while
	// Raft runs: one committed at once, one that cannot commit when the
	// leader steps down (within its lease). Raft's Shutdown may drop the
	// answer to one it committed (see awaitCtx). Half of ShutdownTimeout
	// at most; Raft gets what is left of it.
	start := time.Now()
	giveUp := start.Add(n.cfg.ShutdownTimeout)
	futuresDone := make(chan struct{})
	go func() {
		n.futures.Wait()
		close(futuresDone)
	}()
	if !waitUntil(futuresDone, start.Add(n.cfg.ShutdownTimeout/2)) {
		n.log.Info("spares: a raft operation is still unanswered; stopping raft anyway", "waited", n.cfg.ShutdownTimeout/2)
	}

	raftDone := make(chan struct{})
	go func() { // not goFunc: Shutdown waits for it only so long
		if r != nil {
			r.Shutdown().Error()
		}
		close(raftDone)
	}()
	raftStopped := waitUntil(raftDone, giveUp)
	if !raftStopped {
		n.log.Info("spares: raft did not stop in time; closing its transport", "waited", n.cfg.ShutdownTimeout, "leader", leader)
		if trans != nil {
			trans.Close()
		}
		giveUp = time.Now().Add(n.cfg.ShutdownTimeout / 4)
		raftStopped = waitUntil(raftDone, giveUp)
	}
	if n.stream != nil {
		n.stream.Close()
	}
	nodeDone := make(chan struct{})
	go func() {
		n.wg.Wait()
		close(nodeDone)
	}()
	nodeStopped := waitUntil(nodeDone, giveUp)
	n.fsm.close()

	if !raftStopped || !nodeStopped {
		// The stores stay open: a goroutine left behind may still be in them.
		what := "raft"
		if raftStopped {
			what = "the node's goroutines"
		}
		blocked := blockedIn("github.com/hashicorp/raft.", "github.com/gaspigo/gaspigo/spares.")
		n.log.Warn("spares: shutdown abandoned "+what+"; the process's exit ends it", "bound", n.cfg.ShutdownTimeout+n.cfg.ShutdownTimeout/4,
			"leader", leader, "blocked_in", strings.Join(blocked, ", "))
		return fmt.Errorf("%w: %s did not stop within %v of Shutdown (blocked in %s); abandoned",
			errTimeout, what, n.cfg.ShutdownTimeout+n.cfg.ShutdownTimeout/4, strings.Join(blocked, ", "))
	}
	n.mu.Lock()
	stores := n.stores
	n.mu.Unlock()
	var err error
	for _, s := range stores {
		if cerr := s.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}
	return err
}

// waitUntil reports whether ch closes before the deadline.
func waitUntil(ch <-chan struct{}, deadline time.Time) bool {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
}

// blockedIn names, for the goroutines of this process that are inside a
// function of one of the packages (by prefix), the innermost such
// function and how many goroutines are there, most first, as in
// "raft.(*Raft).replicate×3". It is for the log of an abandoned shutdown,
// which happens at most once.
func blockedIn(prefixes ...string) []string {
	buf := make([]byte, 1<<20)
	for {
		k := runtime.Stack(buf, true)
		if k < len(buf) || len(buf) >= 64<<20 {
			buf = buf[:k]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	counts := map[string]int{}
	for _, g := range bytes.Split(buf, []byte("\n\n"))[1:] { // the first is this goroutine
		for _, line := range strings.Split(string(g), "\n") {
			if i := slices.IndexFunc(prefixes, func(p string) bool { return strings.HasPrefix(line, p) }); i >= 0 {
				fn := line[strings.LastIndex(prefixes[i][:len(prefixes[i])-1], "/")+1:]
				if j := strings.LastIndexByte(fn, '('); j > 0 && strings.HasSuffix(fn, ")") {
					fn = fn[:j]
				}
				counts[fn]++
				break
			}
		}
	}
	out := make([]string, 0, len(counts))
	for fn := range counts {
		out = append(out, fn)
	}
	slices.SortFunc(out, func(a, b string) int {
		if c := counts[b] - counts[a]; c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	for i, fn := range out {
		out[i] = fmt.Sprintf("%s×%d", fn, counts[fn])
	}
	return out
}
