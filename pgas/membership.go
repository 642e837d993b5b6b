package pgas

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gaspigo/gaspigo/transport"
)

// View is a committed membership view, as the membership layer (package
// spares) agrees it. Every process that applies the same Epoch sees the
// same View. A View's slices are read-only once a membership handed it
// out: neither the runtime nor the membership writes them after (equal
// Views may share them, and the runtime recognises a View it applied by
// its rank table's identity).
type View struct {
	// Epoch increases with every change to the rank table.
	Epoch uint64
	// Ranks maps rank -> process. transport.NoProc marks a vacant rank (a
	// job that shrinks).
	Ranks []transport.Proc
	// Failed lists the processes declared failed so far.
	Failed []transport.Proc
	// Finished is set once the job has finished.
	Finished bool
	// Err is set when the job cannot go on (for example no spare was left
	// to replace a failed rank). Recover and a waiting spare's Init return it.
	Err error
	// Joined lists every process that joined the job after it formed (a
	// replacement spare; ids from Config.NumProcs on, never reused), in
	// id order, failed ones included, with what the runtime needs to
	// reach it. The job's processes in this view are 0..NumProcs-1 and
	// these; an id between them that is not listed never joined.
	Joined []Joiner
}

// Joiner is a process that joined the job after it formed (View.Joined).
type Joiner struct {
	Proc transport.Proc
	// Addr is its data-plane address (host:port), given to the transport
	// (transport.PeerAdder) before the first view that lists it is applied.
	Addr string
	// Host is its host label, for diagnostics: collectives place a joiner
	// on a host of its own (it shares no memory with anyone).
	Host string
}

// Membership is what the runtime needs from the membership layer. Package
// spares implements it over Raft; tests use a fake.
type Membership interface {
	// Current returns the latest committed view.
	Current() View
	// Watch returns a channel that receives committed views in epoch order
	// (intermediate ones may be skipped). It is closed when the membership
	// stops. The runtime is its only reader.
	Watch() <-chan View
	// ReportFailure reports that proc was confirmed failed while this
	// process was in epoch. It is idempotent.
	ReportFailure(ctx context.Context, proc transport.Proc, epoch uint64) error
}

// MembershipLoss is implemented by a Membership that can give up on this
// process while it runs: package spares does when the process has been
// cut off from the membership's quorum for longer than its bound, or when
// a voter it asked says that the process was declared failed (replaced)
// while it was cut off. Lost is closed when it happens; LostErr then says
// why. The runtime stops as it does when fenced: every call, Recover and a
// spare's wait for promotion return that error from then on.
type MembershipLoss interface {
	Lost() <-chan struct{}
	LostErr() error
}

// ErrStaleEpoch is returned once the membership has committed a newer
// epoch than the one the program runs in: by every call until the program
// calls Recover, by collectives that were waiting when the view changed,
// and for operations a target dropped because they were sent in an older
// epoch. Call Recover and resume from a consistent point.
var ErrStaleEpoch = errors.New("pgas: membership changed (stale epoch)")

// NeedsRecovery reports whether err means the membership changed under an
// operation (a rank failed, or a newer epoch was committed), so the program
// should call Recover and resume from a consistent point.
func NeedsRecovery(err error) bool {
	return errors.Is(err, ErrRankFailed) || errors.Is(err, ErrStaleEpoch)
}

// StartedAsSpare reports whether this process started as a spare (and was
// promoted, since Init returned).
func (rt *Runtime) StartedAsSpare() bool { return int(rt.self) >= rt.cfg.NumRanks }

// Fenced reports whether this process learnt that it was replaced.
func (rt *Runtime) Fenced() bool { return errors.Is(rt.halted(), ErrFenced) }

// halted returns the error this process stopped with (ErrFenced, or the
// membership's verdict, see MembershipLoss), nil while it may go on.
func (rt *Runtime) halted() error {
	if e := rt.halt.Load(); e != nil {
		return *e
	}
	return nil
}

// watchMembership applies committed views as they arrive, and stops the
// runtime if the membership gives up on this process.
func (rt *Runtime) watchMembership(m Membership) {
	ch := m.Watch()
	ml, _ := m.(MembershipLoss)
	var lost <-chan struct{}
	if ml != nil {
		lost = ml.Lost()
	}
	for {
		select {
		case v, ok := <-ch:
			if !ok {
				return
			}
			rt.applyView(v)
		case <-lost:
			rt.stop(ml.LostErr())
			lost = nil
		case <-rt.closed:
			return
		}
	}
}

// drainLanding waits until no frame sent in an epoch older than epoch is
// still being applied: one admitted just before the view changed may be
// reading its payload into a segment, and it must land before the program
// restores its state, never after. Frames from processes the view
// declared failed are cut off (disconnect), so the wait is short.
func (rt *Runtime) drainLanding(ctx context.Context, epoch uint32) error {
	for {
		busy := -1
		rt.peers.each(func(pr *peer) {
			if l := pr.landing.Load(); busy < 0 && l != 0 && l-1 < uint64(epoch) {
				busy = int(pr.proc)
			}
		})
		if busy < 0 {
			return nil
		}
		if err := rt.halted(); err != nil {
			return err
		}
		t := time.NewTimer(time.Millisecond) // rare and short: poll
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("pgas: recover: a frame of an older epoch from proc %d is still landing: %w", busy, ctxError(ctx, "recover"))
		case <-rt.closed:
			t.Stop()
			return ErrClosed
		}
	}
}

// Recover waits until the membership has committed a view that replaces
// every process this runtime saw fail (or, in a job that shrinks, leaves
// its rank vacant: see Vacant), and is no older than any epoch a peer's
// frame carried (a peer ahead: recovering in the older epoch would go on
// out of step with it), applies it, and returns. Survivors
// call it after an operation failed with a *RankError; afterwards they
// re-run their setup (SegmentCreate is idempotent for survivors) and
// restore state. It returns ErrFenced if this process was itself replaced,
// the membership's error (for example no spares left) when the job
// cannot go on, and ErrFinished when the job finished.
func (rt *Runtime) Recover(ctx context.Context) error {
	if rt.member == nil {
		return fmt.Errorf("pgas: recover: no membership configured: %w", ErrInvalid)
	}
	start := time.Now()
	for {
		// The view and its channel first, then the halt: stopWith sets
		// the halt before it closes the channel, so either this look sees
		// the halt or the channel taken is closed (the other order lost
		// the wake-up of a halt between the two reads: a fenced spare
		// waited for ever).
		v, ch := rt.viewAndChan()
		viewWaitHook(rt)
		if rt.isClosed() {
			return ErrClosed
		}
		if err := rt.halted(); err != nil {
			return err
		}
		if v.err != nil {
			return v.err
		}
		if v.finished {
			return fmt.Errorf("pgas: recover: %w (epoch %d): nothing to recover", ErrFinished, v.epoch)
		}
		if uint64(v.epoch) > rt.failEpoch.Load() && uint64(v.epoch) >= rt.aheadEpoch.Load() && rt.ranksLive(v) {
			if err := rt.drainLanding(ctx, v.epoch); err != nil {
				return err
			}
			if err := rt.drainWriters(ctx); err != nil {
				return err
			}
			if err := rt.renewShared(v); err != nil {
				return err
			}
			// What the program posted in the epoch it leaves and never
			// waited for is not waited for in the new one (Wait).
			for _, qu := range rt.queues {
				qu.drop()
			}
			rt.appEpoch.Store(v.epoch)
			rt.log.Info("recovered", "epoch", v.epoch, "waited", time.Since(start))
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctxError(ctx, "recover")
		case <-rt.closed:
			return ErrClosed
		}
	}
}

// ranksLive reports whether every rank of v is held by a process that is
// neither declared failed nor cut off.
func (rt *Runtime) ranksLive(v *view) bool {
	for _, p := range v.ranks {
		if p == transport.NoProc {
			continue
		}
		if v.failed[p] || (p != rt.self && rt.peers.isDown(p)) {
			return false
		}
	}
	return true
}

// viewWaitHook runs in Recover and waitPromotion between taking the view
// with its channel and looking at the halt: the tests stop the process
// there. A no-op otherwise.
var viewWaitHook = func(*Runtime) {}

// waitPromotion blocks a spare until a view gives it a rank.
func (rt *Runtime) waitPromotion(ctx context.Context) error {
	for {
		v, ch := rt.viewAndChan() // before the halt: see Recover
		viewWaitHook(rt)
		if rt.isClosed() {
			return ErrClosed
		}
		if err := rt.halted(); err != nil {
			return err
		}
		if v.rankOf[rt.self] >= 0 {
			return nil
		}
		if v.err != nil {
			return fmt.Errorf("%w: %w", ErrNotPromoted, v.err)
		}
		if v.finished {
			return fmt.Errorf("%w: the job finished", ErrNotPromoted)
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctxError(ctx, "init (spare waiting for promotion)")
		case <-rt.closed:
			return ErrClosed
		}
	}
}

// Finalize ends the job for this rank. Every live rank calls it: a
// barrier, then the lowest live rank (rank 0 unless the job shrank) has
// the membership record that the job finished (so idle spares stop
// waiting and exit), then a second barrier so that no rank takes its share
// of the membership's quorum away before that is committed, then a wait
// until this process's own membership node applied the record, a third
// barrier so that no rank leaves (the Raft leader among them) while
// another has yet to learn that the job finished, then Close.
// The record is waited for at most finishTimeout (idle spares also learn
// the end from the ranks' goodbyes).
//
// A membership change under Finalize (a rank lost, or only an idle spare)
// returns its error (NeedsRecovery holds) and leaves the runtime open: the
// program recovers as after any failure, with every rank (some may not
// have reached Finalize yet), brings a new process to its end state (from
// a final checkpoint, say), and calls Finalize again; or it calls Close.
// Any other outcome closes the runtime.
//
// Once the membership has recorded that the job finished, there is
// nothing left to recover: every rank had reached Finalize, and the
// processes that leave from then on are the job ending (a rank that has
// passed the second barrier may leave while another still waits in it).
// So a failure under Finalize is first held against the committed view
// (waitVerdict): when the job turns out finished, Finalize closes the
// runtime and returns nil.
func (rt *Runtime) Finalize(ctx context.Context) error {
	err := rt.finalizeOnce(ctx)
	if err != nil && NeedsRecovery(err) && rt.member != nil && !rt.isClosed() && rt.halted() == nil {
		if !rt.waitVerdict(ctx) {
			return err
		}
		rt.log.Info("finalize: the job finished; a process leaving meanwhile is no failure", "err", err)
		err = nil
	}
	rt.Close()
	return err
}

// waitVerdict waits, after a failure under Finalize, until the committed
// view tells whether the job finished (true) or must recover first
// (false: a newer epoch than the program's, or the job failed). It also
// returns false when ctx ends or the runtime stops. A failure before the
// Finish record commits is reported by the failure detector and ends in a
// newer epoch, so the wait lasts about a detection.
func (rt *Runtime) waitVerdict(ctx context.Context) bool {
	for {
		v, ch := rt.viewAndChan()
		switch {
		case v.finished:
			return true
		case v.epoch != rt.appEpoch.Load(), v.err != nil, rt.halted() != nil:
			return false
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		case <-rt.closed:
			return false
		}
	}
}

// finishTimeout bounds the wait for the membership to record that the job
// finished. The record is for idle spares, which also learn the end from
// the ranks' goodbyes (spareSeesEnd): a membership that cannot commit
// within it must not hold every rank at exit.
const finishTimeout = 30 * time.Second

func (rt *Runtime) finalizeOnce(ctx context.Context) error {
	err := rt.Barrier(ctx, nil)
	if live := rt.view.Load().live; err == nil && len(live) > 0 && rt.Rank() == live[0] {
		if f, ok := rt.member.(Finisher); ok {
			fctx, cancel := context.WithTimeout(ctx, finishTimeout)
			err = f.Finish(fctx)
			cancel()
			if err != nil && ctx.Err() == nil && fctx.Err() != nil {
				rt.log.Warn("finalize: the membership did not record the end of the job in time; idle spares learn it from the goodbyes",
					"waited", finishTimeout, "err", err)
				err = nil
			}
		}
	}
	if err == nil {
		err = rt.Barrier(ctx, nil)
	}
	if _, ok := rt.member.(Finisher); ok && err == nil {
		rt.awaitFinished(ctx)
		// Without this barrier the Raft leader, which applies the
		// record first, left at once; the other ranks learned of the
		// commit only from its next heartbeat, which never came, saw
		// the leader's exit as a failure and waited finishApplied.
		err = rt.Barrier(ctx, nil)
	}
	return err
}

// finishApplied bounds a rank's wait, after the second barrier, for its
// own membership node to apply the Finish record.
const finishApplied = 2 * time.Second

// awaitFinished waits, at most finishApplied, until this process's view
// says the job finished: its membership node applied the record. The
// second barrier only says the quorum committed it; a voter that leaves
// before applying it cannot pass it down the membership's tree, and an
// idle spare below it was then cut off (exit 74) instead of exiting 0.
func (rt *Runtime) awaitFinished(ctx context.Context) {
	t := time.NewTimer(finishApplied)
	defer t.Stop()
	for {
		v, ch := rt.viewAndChan()
		if v.finished || v.err != nil {
			return
		}
		select {
		case <-ch:
		case <-t.C:
			return
		case <-ctx.Done():
			return
		case <-rt.closed:
			return
		}
	}
}

// Leader returns the process that the membership believes leads it (the
// Raft leader under package spares), for programs that show it or target
// it (a chaos test killing the leader); false when the membership knows
// none or cannot tell (Leading).
func (rt *Runtime) Leader() (proc transport.Proc, ok bool) {
	if l, can := rt.member.(Leading); can {
		return l.Leader()
	}
	return transport.NoProc, false
}

// Membership returns the membership the runtime was configured with (nil
// without one), for programs that need more of it than the runtime uses,
// such as recording checkpoint IDs or asking who leads.
func (rt *Runtime) Membership() Membership { return rt.member }
