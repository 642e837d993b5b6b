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

// ReportFailure proposes DeclareFailed{proc, reporter, epoch}: proc was
// confirmed failed by reporter in the view of the given epoch. See Propose.
func (n *Node) ReportFailure(ctx context.Context, proc, reporter uint32, epoch uint64) (Result, error) {
	if reporter == n.cfg.Proc {
		n.down.mark(proc, time.Now(), downFor(&n.cfg))
	}
	n.expediteElection(proc, "the failure detector confirmed its process dead")
	return n.Propose(ctx, DeclareFailed{Proc: proc, Reporter: reporter, Epoch: epoch})
}

// Propose commits cmd through the Raft leader and returns what it did.
// From a non-leader it goes through the leader's control RPC. Attempts
// that fail because there is no leader, the leader changed or could not be
// reached are retried with exponential backoff until ctx ends; this is safe
// because Apply is idempotent (a retried command that had committed is a
// no-op the second time, and its Result says so). A command the state
// rejects returns at once with an error wrapping ErrBadCommand or
// ErrUnknownProc. When ctx ends it returns a *ProposeError wrapping
// ErrTimeout; after Shutdown one wrapping ErrClosed.
func (n *Node) Propose(ctx context.Context, cmd Command) (Result, error) {
	if cmd == nil {
		return Result{}, badCmd("nil command")
	}
	data, err := encodeCommand(cmd)
	if err != nil {
		return Result{}, err
	}
	b := backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(n.cfg.ProposeRetryMin),
		backoff.WithMaxInterval(n.cfg.ProposeRetryMax),
		backoff.WithMaxElapsedTime(0),
	)
	var last error
	hint, unreachable := NoProc, NoProc
	for attempt := 1; ; attempt++ {
		if n.isClosed() {
			return Result{}, &ProposeError{Op: cmd.Kind().String(), Attempts: attempt, Last: last, Err: ErrClosed}
		}
		changed := n.leaderChanged()
		res, err := n.proposeOnce(ctx, data, &hint, &unreachable, attempt)
		if err == nil {
			return res, nil
		}
		if !retryable(err) {
			return Result{}, err
		}
		last = err
		if ctx.Err() != nil {
			return Result{}, &ProposeError{Op: cmd.Kind().String(), Attempts: attempt, Last: last, Cause: ctx.Err(), Err: ErrTimeout}
		}
		n.log.Debug("spares: proposal retry", "kind", cmd.Kind().String(), "attempt", attempt, "err", err)
		t := time.NewTimer(b.NextBackOff())
		select {
		case <-t.C:
		case <-changed:
			t.Stop() // a leader is known now: try it at once
		case <-ctx.Done():
			t.Stop()
			return Result{}, &ProposeError{Op: cmd.Kind().String(), Attempts: attempt, Last: last, Cause: ctx.Err(), Err: ErrTimeout}
		case <-n.closeCh:
			t.Stop()
			return Result{}, &ProposeError{Op: cmd.Kind().String(), Attempts: attempt, Last: last, Err: ErrClosed}
		}
	}
}

// retryable: anything but a rejection by the state (a command that would be
// rejected again) and a local shutdown.
func retryable(err error) bool {
	if errors.Is(err, ErrBadCommand) || errors.Is(err, ErrUnknownProc) {
		return false
	}
	var re *remoteError
	if errors.As(err, &re) {
		return true // the remote end closing or timing out is a leader change to us
	}
	return !errors.Is(err, ErrClosed)
}

// proposeOnce makes one attempt. hint is the leader named by the last
// answer; unreachable the process the last attempt could not reach.
func (n *Node) proposeOnce(ctx context.Context, data []byte, hint, unreachable *uint32, attempt int) (Result, error) {
	if n.IsLeader() {
		return n.applyLocal(ctx, data)
	}
	st, _ := n.fsm.view()
	target, ok := n.Leader()
	// None known, or stale: we led a moment ago, or the last attempt could
	// not reach it. A client's leader is the tree's news, older than a
	// voter's answer: the hint goes first.
	client := n.raftNode() == nil
	if !ok || target == n.cfg.Proc || target == *unreachable || (client && *hint != NoProc) {
		target = *hint
	}
	*hint = NoProc
	if target == *unreachable || (target != NoProc && n.down.is(target, time.Now())) {
		target = NoProc // this process's detector confirmed it failed
	}
	if target == NoProc {
		// No leader known (an election, or a joining process that has no
		// log yet): ask a member, who answers with its leader as a hint.
		target = n.someMember(&st, attempt)
		if target == NoProc {
			return Result{}, ErrNoLeader
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
		return Result{}, fmt.Errorf("%w: proc %d has no control address", ErrNoLeader, target)
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
	*unreachable = NoProc
	switch {
	case errors.As(err, &re):
		if re.Leader != NoProc && re.Leader != target {
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
func (n *Node) someMember(st *State, attempt int) uint32 {
	var procs, down []uint32
	anyone := n.joining(st)
	now := time.Now()
	for p, info := range st.Procs {
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
		return NoProc
	}
	return procs[attempt%len(procs)]
}

// joining: this node joins the job (Config.Join) and its state does not
// list it yet, so the state is the job's first one or a later one that
// does not know of this process.
func (n *Node) joining(st *State) bool {
	_, known := st.Procs[n.cfg.Proc]
	return n.cfg.Join && !known
}

func (n *Node) ctlAddrOf(st *State, p uint32) string {
	if info, ok := st.Procs[p]; ok {
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
func (n *Node) unlistedContacts(st *State) []uint32 {
	var out []uint32
	for _, m := range n.contacts() {
		if _, ok := st.Procs[m.Proc]; !ok && m.Proc != n.cfg.Proc && m.CtlAddr != "" {
			out = append(out, m.Proc)
		}
	}
	return out
}

// JoinSelf proposes AddSpare for this process (a node started with Join)
// and waits until the local view holds it: until the tree's news (or, in
// the all-Raft mode, the log) has brought this node the commit. The
// returned state says whether it joined the pool or took a rank that
// awaited a joiner (WaitPromotion then returns at once). Errors are those
// of Propose and Await; a job that no longer runs makes AddSpare a no-op,
// and the wait then ends with the job's error (ErrJobFinished, or
// ErrSparesExhausted / ErrJobFailed) once this node has learnt it.
func (n *Node) JoinSelf(ctx context.Context) (State, error) {
	if _, err := n.Propose(ctx, AddSpare{Proc: n.cfg.Proc, Info: n.self.info()}); err != nil {
		return State{}, err
	}
	return n.wait(ctx, func(st *State) (bool, error) {
		if _, ok := st.Procs[n.cfg.Proc]; ok {
			return true, nil
		}
		if err := statusErr(st); err != nil {
			return true, err
		}
		if st.Status == Finished {
			return true, fmt.Errorf("%w at epoch %d, before proc %d joined", ErrJobFinished, st.Epoch, n.cfg.Proc)
		}
		return false, nil
	})
}

// applyLocal commits data through the local Raft node, which must lead.
func (n *Node) applyLocal(ctx context.Context, data []byte) (Result, error) {
	r := n.raftNode()
	if r == nil || r.State() != raft.Leader {
		return Result{}, ErrNotLeader
	}
	sp := obs.Begin("membership", "raft commit")
	defer sp.End()
	f := r.Apply(data, n.cfg.RPCTimeout)
	if err := n.awaitCtx(ctx, f); err != nil {
		if errors.Is(err, ErrTimeout) || errors.Is(err, ErrClosed) {
			return Result{}, err
		}
		return Result{}, mapRaftErr(err)
	}
	resp, ok := f.Response().(applyResponse)
	if !ok {
		return Result{}, fmt.Errorf("spares: unexpected apply response %T", f.Response())
	}
	return resp.Result, resp.Err
}

func mapRaftErr(err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipLost),
		errors.Is(err, raft.ErrLeadershipTransferInProgress), errors.Is(err, raft.ErrAbortedByRestore):
		return fmt.Errorf("%w: %v", ErrNotLeader, err)
	case errors.Is(err, raft.ErrRaftShutdown):
		return ErrClosed
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return fmt.Errorf("%w: %v", ErrTimeout, err)
	}
	return err
}
