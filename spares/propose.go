package spares

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/gaspigo/gaspigo/obs"
	"github.com/hashicorp/raft"
)

// reportFailure proposes declareFailed{proc, reporter, epoch}: proc was
// confirmed failed by reporter in the view of the given epoch. See propose.
func (n *Node) reportFailure(ctx context.Context, proc, reporter uint32, epoch uint64) (result, error) {
	if reporter == n.cfg.Proc {
		n.down.mark(proc, time.Now(), downFor(&n.cfg))
	}
	n.expediteElection(proc, "the failure detector confirmed its process dead")
	return n.propose(ctx, declareFailed{Proc: proc, Reporter: reporter, Epoch: epoch})
}

// propose commits cmd through the Raft leader and returns what it did.
// From a non-leader it goes through the leader's control RPC. Attempts
// that fail because there is no leader, the leader changed or could not be
// reached are retried with exponential backoff until ctx ends; this is safe
// because Apply is idempotent (a retried command that had committed is a
// no-op the second time, and its result says so). A command the state
// rejects returns at once with an error wrapping errBadCommand or
// errUnknownProc. When ctx ends it returns a *proposeError wrapping
// errTimeout; after Shutdown one wrapping errClosed.
func (n *Node) propose(ctx context.Context, cmd command) (result, error) {
	if cmd == nil {
		return result{}, badCmd("nil command")
	}
	data, err := encodeCommand(cmd)
	if err != nil {
		return result{}, err
	}
	b := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(n.cfg.ProposeRetryMin),
		backoff.WithMaxInterval(n.cfg.ProposeRetryMax),
		backoff.WithMaxElapsedTime(0),
	)
	var last error
	hint, unreachable := noProc, noProc
	for attempt := 1; ; attempt++ {
		if n.isClosed() {
			return result{}, &proposeError{Op: cmd.Kind().String(), Attempts: attempt, Last: last, Err: errClosed}
		}
		changed := n.leaderChanged()
		res, err := n.proposeOnce(ctx, data, &hint, &unreachable, attempt)
		if err == nil {
			return res, nil
		}
		if !retryable(err) {
			return result{}, err
		}
		last = err
		if ctx.Err() != nil {
			return result{}, &proposeError{Op: cmd.Kind().String(), Attempts: attempt, Last: last, Cause: ctx.Err(), Err: errTimeout}
		}
		n.log.Debug("spares: proposal retry", "kind", cmd.Kind().String(), "attempt", attempt, "err", err)
		t := time.NewTimer(b.NextBackOff())
		select {
		case <-t.C:
		case <-changed:
			t.Stop() // a leader is known now: try it at once
		case <-ctx.Done():
			t.Stop()
			return result{}, &proposeError{Op: cmd.Kind().String(), Attempts: attempt, Last: last, Cause: ctx.Err(), Err: errTimeout}
		case <-n.closeCh:
			t.Stop()
			return result{}, &proposeError{Op: cmd.Kind().String(), Attempts: attempt, Last: last, Err: errClosed}
		}
	}
}

// retryable: anything but a rejection by the state (a command that would be
// rejected again) and a local shutdown.
func retryable(err error) bool {
	if errors.Is(err, errBadCommand) || errors.Is(err, errUnknownProc) {
		return false
	}
	var re *remoteError
	if errors.As(err, &re) {
		return true // the remote end closing or timing out is a leader change to us
	}
	return !errors.Is(err, errClosed)
}

// proposeOnce makes one attempt. hint is the leader named by the last
// answer; unreachable the process the last attempt could not reach.
func (n *Node) proposeOnce(ctx context.Context, data []byte, hint, unreachable *uint32, attempt int) (result, error) {
	if n.IsLeader() {
		return n.applyLocal(ctx, data)
	}
	st, _ := n.fsm.view()
	target, ok := n.leader()
	// None known, or stale: we led a moment ago, or the last attempt could
	// not reach it. A client's leader is the tree's news, older than a
	// voter's answer: the hint goes first.
	client := n.raftNode() == nil
	if !ok || target == n.cfg.Proc || target == *unreachable || (client && *hint != noProc) {
		target = *hint
	}
	*hint = noProc
	if target == *unreachable || (target != noProc && n.down.is(target, time.Now())) {
		target = noProc // this process's detector confirmed it failed
	}
	if target == noProc {
		// No leader known (an election, or a joining process that has no
		// log yet): ask a member, who answers with its leader as a hint.
		target = n.someMember(&st, attempt)
		if target == noProc {
			return result{}, errNoLeader
		}
	}
	addr := n.ctlAddrOf(&st, target)
	if addr == "" && n.joining(&st) {
		// A joiner's state is the job's first one: the leader named may
		// have joined after it. Ask a member instead; the answer names
		// the leader again, and the tree soon brings its address.
		target = n.someMember(&st, attempt)
		addr = n.ctlAddrOf(&st, target)
	}
	if addr == "" {
		return result{}, fmt.Errorf("%w: proc %d has no control address", errNoLeader, target)
	}
	// This process's detector confirming target failed ends the attempt
	// at once: a dial to a host cut off silently would wait for its
	// time-out, and a client's leader may be one it learnt before the
	// fault.
	actx, cancel := context.WithCancel(ctx)
	stop := n.down.onMark(target, cancel)
	res, err := n.callCtl(actx, addr, n.cfg.Token, data)
	stop()
	cancel()
	var re *remoteError
	*unreachable = noProc
	switch {
	case errors.As(err, &re):
		if re.Leader != noProc && re.Leader != target {
			*hint = re.Leader
		}
	case err != nil && ctx.Err() == nil:
		*unreachable = target
	}
	return res, err
}

// someMember picks a live process other than this one, rotating with
// attempt: a voter, in the voters-only mode (the others cannot forward);
// none this process's detector confirmed failed while there are others.
// A joiner whose join it has not heard of yet (joining) asks the voters
// first and then any other process, which answers with the leader it
// knows: its state is the job's first, and every voter in it may have
// been replaced since.
func (n *Node) someMember(st *state, attempt int) uint32 {
	var procs, down []uint32
	anyone := n.joining(st)
	now := time.Now()
	for p, info := range st.Procs.all() {
		if _, failed := st.Failed[p]; !failed && p != n.cfg.Proc && info.CtlAddr != "" && (!n.cfg.VotersOnly || anyone || st.IsVoter(p)) {
			if n.down.is(p, now) {
				down = append(down, p)
			} else {
				procs = append(procs, p)
			}
		}
	}
	if len(procs) == 0 {
		procs = down
	}
	// In proc order; a joiner's with the voters first, then the processes
	// that joined before it (Config.Contacts, the likeliest to be alive
	// when the job's first processes are gone), then the others.
	slices.SortFunc(procs, func(a, b uint32) int {
		if va, vb := st.IsVoter(a), st.IsVoter(b); anyone && va != vb {
			if va {
				return -1
			}
			return 1
		}
		return cmp.Compare(a, b)
	})
	if anyone {
		v := 0
		for v < len(procs) && st.IsVoter(procs[v]) {
			v++
		}
		procs = slices.Insert(procs, v, n.unlistedContacts(st)...)
	}
	if len(procs) == 0 {
		return noProc
	}
	return procs[attempt%len(procs)]
}

// joining: this node joins the job (Config.Join) and its state does not
// list it yet, so the state is the job's first one or a later one that
// does not know of this process.
func (n *Node) joining(st *state) bool {
	known := st.Procs.has(n.cfg.Proc)
	return n.cfg.Join && !known
}

func (n *Node) ctlAddrOf(st *state, p uint32) string {
	if info, ok := st.Procs.get(p); ok {
		return info.CtlAddr
	}
	for _, m := range n.cfg.Members {
		if m.Proc == p {
			return m.CtlAddr
		}
	}
	for _, m := range n.contacts() {
		if m.Proc == p {
			return m.CtlAddr
		}
	}
	return ""
}

// contacts are the processes a joiner may ask besides its state's
// (Config.Contacts), nil for any other node.
func (n *Node) contacts() []Member {
	if !n.cfg.Join {
		return nil
	}
	return n.cfg.Contacts
}

// unlistedContacts returns the contacts that st does not list, in the
// order given: processes that joined after the state this joiner has.
func (n *Node) unlistedContacts(st *state) []uint32 {
	var out []uint32
	for _, m := range n.contacts() {
		if !st.Procs.has(m.Proc) && m.Proc != n.cfg.Proc && m.CtlAddr != "" {
			out = append(out, m.Proc)
		}
	}
	return out
}

// JoinSelf adds this process, a node started with Config.Join, to the
// job: it proposes addSpare for itself and waits until the local view
// holds it (joinSelf). A job that no longer runs ends it with the job's
// error (ErrSparesExhausted, ErrJobFailed, or errJobFinished) once this
// node has learnt it; ctx ending, with errTimeout.
func (n *Node) JoinSelf(ctx context.Context) error {
	_, err := n.joinSelf(ctx)
	return err
}

// joinSelf proposes addSpare for this process (a node started with Join)
// and waits until the local view holds it: until the tree's news (or, in
// the all-Raft mode, the log) has brought this node the commit. The
// returned state says whether it joined the pool or took a rank that
// awaited a joiner (waitPromotion then returns at once). Errors are those
// of propose and awaitState; a job that no longer runs makes addSpare a
// no-op, and the wait then ends with the job's error (errJobFinished, or
// ErrSparesExhausted / ErrJobFailed) once this node has learnt it.
func (n *Node) joinSelf(ctx context.Context) (state, error) {
	if _, err := n.propose(ctx, addSpare{Proc: n.cfg.Proc, Info: n.self.info()}); err != nil {
		return state{}, err
	}
	return n.wait(ctx, func(st *state) (bool, error) {
		if st.Procs.has(n.cfg.Proc) {
			return true, nil
		}
		if err := statusErr(st); err != nil {
			return true, err
		}
		if st.Status == statusFinished {
			return true, fmt.Errorf("%w at epoch %d, before proc %d joined", errJobFinished, st.Epoch, n.cfg.Proc)
		}
		return false, nil
	})
}

// applyLocal commits data through the local Raft node, which must lead.
func (n *Node) applyLocal(ctx context.Context, data []byte) (result, error) {
	r := n.raftNode()
	if r == nil || r.State() != raft.Leader {
		return result{}, errNotLeader
	}
	sp := obs.Begin("membership", "raft commit")
	defer sp.End()
	f := r.Apply(data, n.cfg.RPCTimeout)
	if err := n.awaitCtx(ctx, f); err != nil {
		if errors.Is(err, errTimeout) || errors.Is(err, errClosed) {
			return result{}, err
		}
		return result{}, mapRaftErr(err)
	}
	resp, ok := f.Response().(applyResponse)
	if !ok {
		return result{}, fmt.Errorf("spares: unexpected apply response %T", f.Response())
	}
	return resp.Result, resp.Err
}

func mapRaftErr(err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost),
		errors.Is(err, raft.ErrLeadershipTransferInProgress), errors.Is(err, raft.ErrAbortedByRestore):
		return fmt.Errorf("%w: %v", errNotLeader, err)
	case errors.Is(err, raft.ErrRaftShutdown):
		return errClosed
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return fmt.Errorf("%w: %v", errTimeout, err)
	}
	return err
}
