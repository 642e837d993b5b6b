package pgas

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gaspigo/gaspigo/health"
	"github.com/gaspigo/gaspigo/transport"
)

// View is a committed membership view, as the membership layer (package
// spares) agrees it. Every process that applies the same Epoch sees the
// same View.
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

// check returns the error every call gives once the runtime is closed or
// fenced, or once a newer epoch was committed than the program's.
func (rt *Runtime) check() error {
	_, err := rt.current()
	return err
}

// current returns the view an operation runs in, loaded once: checking
// the epoch and then loading the view again would let a view applied in
// between start a collective in an epoch the program never acknowledged.
func (rt *Runtime) current() (*view, error) {
	if rt.isClosed() {
		return nil, ErrClosed
	}
	if err := rt.halted(); err != nil {
		return nil, err
	}
	v := rt.view.Load()
	if rt.member != nil {
		if app := rt.appEpoch.Load(); v.epoch != app {
			return nil, fmt.Errorf("pgas: epoch %d committed, the program is in epoch %d: call Recover: %w", v.epoch, app, ErrStaleEpoch)
		}
	}
	return v, nil
}

// Usable returns the error every call would return now: ErrClosed,
// ErrFenced, or ErrStaleEpoch once a newer epoch was committed than the
// program acknowledged; nil otherwise. Layers that wait on notifications
// (which no failure interrupts) poll it.
func (rt *Runtime) Usable() error { return rt.check() }

// viewChan returns a channel that closes at the next applied view.
func (rt *Runtime) viewChan() <-chan struct{} {
	rt.viewMu.Lock()
	defer rt.viewMu.Unlock()
	return rt.viewChanged
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

// applyView installs a committed view: new rank table and epoch, failed
// peers cut off, this process fenced if it was replaced, stale collective
// messages dropped, and the detector told whom to watch.
func (rt *Runtime) applyView(mv View) {
	rt.viewMu.Lock()
	old := rt.view.Load()
	if uint32(mv.Epoch) < old.epoch || (uint32(mv.Epoch) == old.epoch && rt.sameView(old, mv)) {
		rt.viewMu.Unlock()
		return
	}
	failed := make([]bool, len(rt.peers))
	for _, p := range mv.Failed {
		if int(p) < len(failed) {
			failed[p] = true
		}
	}
	nv := newView(uint32(mv.Epoch), append([]transport.Proc(nil), mv.Ranks...), len(rt.peers), failed)
	rt.view.Store(nv)
	rt.viewErr = mv.Err
	rt.finished = mv.Finished
	ch := rt.viewChanged
	rt.viewChanged = make(chan struct{})
	rt.viewMu.Unlock()
	close(ch)

	wasRank := old.rankOf[rt.self] >= 0
	if failed[rt.self] || (wasRank && nv.rankOf[rt.self] < 0 && !mv.Finished) {
		rt.fence(fmt.Sprintf("epoch %d replaced this process", mv.Epoch))
		return
	}
	for p, f := range failed {
		if f && !old.failed[p] && transport.Proc(p) != rt.self {
			cause := fmt.Errorf("declared failed in epoch %d", mv.Epoch)
			rt.cutOff(transport.Proc(p), cause)
			rt.disconnect(transport.Proc(p), cause)
		}
	}
	rt.reportVacant(old, nv)
	rt.mail.purge(nv.epoch)
	if rt.det != nil {
		rt.det.SetMembers(rt.liveProcs(nv))
	}
	holders := make([]int, len(nv.ranks)) // rank -> proc, -1 vacant
	for r, p := range nv.ranks {
		holders[r] = -1
		if p != transport.NoProc {
			holders[r] = int(p)
		}
	}
	attrs := []any{"epoch", mv.Epoch, "rank", nv.rankOf[rt.self], "failed", mv.Failed, "ranks", holders}
	if len(nv.live) < len(nv.ranks) {
		var vacant []int
		for r, p := range nv.ranks {
			if p == transport.NoProc {
				vacant = append(vacant, r)
			}
		}
		attrs = append(attrs, "vacant", vacant)
	}
	rt.log.Info("view applied", attrs...)
}

// reportVacant tells the launcher about the ranks vacant in nv and not in
// old (nil: none), so that it counts them as done rather than lost.
func (rt *Runtime) reportVacant(old, nv *view) {
	l := rt.launcher.Load()
	if l == nil {
		return
	}
	for r, p := range nv.ranks {
		if p == transport.NoProc && (old == nil || old.ranks[r] != transport.NoProc) {
			(*l).Vacant(r, uint64(nv.epoch))
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
		for i := range rt.peers {
			if l := rt.peers[i].landing.Load(); l != 0 && l-1 < uint64(epoch) {
				busy = i
				break
			}
		}
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

// fencedNoticeTimeout bounds the notice sent to a process before its
// connection is cut: it may be stopped with a full socket buffer.
const fencedNoticeTimeout = 200 * time.Millisecond

// disconnect cuts the transport's connection to proc, which the
// membership declared failed, so that nothing more of a frame it was
// sending lands (transports that can, do: tcp). First it tells proc that
// it was replaced: a process that was only paused reads the notice when
// it resumes and exits fenced, instead of waiting for a view that the
// membership it left will never send it. Recover waits for the cut
// (drainLanding) if a frame from proc is still landing.
func (rt *Runtime) disconnect(proc transport.Proc, cause error) {
	d, ok := rt.tr.(Disconnector)
	if !ok {
		return
	}
	rt.goFunc(func() {
		ctx, cancel := context.WithTimeout(context.Background(), fencedNoticeTimeout)
		defer cancel()
		if rt.peers[proc].toldFenced.CompareAndSwap(false, true) {
			h := transport.Header{Type: transport.FrameControl, A: ctlFenced}
			rt.send(ctx, proc, &h, nil)
		}
		d.Disconnect(proc, cause)
	})
}

// liveProcs lists the processes not declared failed.
// sameView reports whether mv says nothing that v (and the verdicts already
// recorded) does not: the same ranks, failures, status and error.
func (rt *Runtime) sameView(v *view, mv View) bool {
	if len(mv.Ranks) != len(v.ranks) || mv.Finished != rt.finished || (mv.Err != nil) != (rt.viewErr != nil) {
		return false
	}
	for r, p := range mv.Ranks {
		if v.ranks[r] != p {
			return false
		}
	}
	n := 0
	for _, f := range v.failed {
		if f {
			n++
		}
	}
	return n == len(mv.Failed)
}

func (rt *Runtime) liveProcs(v *view) []transport.Proc {
	var ps []transport.Proc
	for p := range rt.peers {
		if !v.failed[p] {
			ps = append(ps, transport.Proc(p))
		}
	}
	return ps
}

// fence stops this process for good: it was replaced in a newer epoch.
func (rt *Runtime) fence(why string) {
	rt.stopWith(ErrFenced, func() {
		rt.log.Error("fenced: this process was replaced and must exit", "why", why)
	})
}

// stop stops this process for good with err, the membership's verdict
// (see MembershipLoss).
func (rt *Runtime) stop(err error) {
	if err == nil {
		err = fmt.Errorf("pgas: the membership gave up on this process: %w", ErrFenced)
	}
	rt.stopWith(err, func() {
		if errors.Is(err, ErrFenced) {
			rt.log.Error("fenced: this process was replaced and must exit", "why", err.Error())
		} else {
			rt.log.Error("stopped: the membership gave up on this process; it must exit", "why", err.Error())
		}
	})
}

// stopWith records err as the reason this process stops (the first
// reason wins), then fails every peer and request with it and wakes
// whoever waits for a view.
func (rt *Runtime) stopWith(err error, logIt func()) {
	if !rt.halt.CompareAndSwap(nil, &err) {
		return
	}
	logIt()
	for _, p := range rt.peers {
		p.fail(err)
	}
	rt.failRequests(func(*request) bool { return true }, err)
	// Cut every connection: a send blocked on a peer this process cannot
	// reach (a full socket buffer, a partition) returns, and nothing
	// more is taken from peers that have moved on.
	if d, ok := rt.tr.(Disconnector); ok {
		rt.goFunc(func() {
			for _, p := range rt.peers {
				if p.proc != rt.self {
					d.Disconnect(p.proc, err)
				}
			}
		})
	}
	// Wake whoever waits for a view (Recover, a spare's promotion): the
	// notice may come from a peer, with no view of the membership behind
	// it, and a replaced process never gets another view.
	rt.viewMu.Lock()
	ch := rt.viewChanged
	rt.viewChanged = make(chan struct{})
	rt.viewMu.Unlock()
	close(ch)
}

// Recover waits until the membership has committed a view that replaces
// every process this runtime saw fail (or, in a job that shrinks, leaves
// its rank vacant: see Vacant), applies it, and returns. Survivors
// call it after an operation failed with a *RankError; afterwards they
// re-run their setup (SegmentCreate is idempotent for survivors) and
// restore state. It returns ErrFenced if this process was itself replaced,
// and the membership's error (for example no spares left) when the job
// cannot go on.
func (rt *Runtime) Recover(ctx context.Context) error {
	if rt.member == nil {
		return fmt.Errorf("pgas: recover: no membership configured: %w", ErrInvalid)
	}
	start := time.Now()
	for {
		if rt.isClosed() {
			return ErrClosed
		}
		if err := rt.halted(); err != nil {
			return err
		}
		rt.viewMu.Lock()
		v, verr, ch := rt.view.Load(), rt.viewErr, rt.viewChanged
		rt.viewMu.Unlock()
		if verr != nil {
			return verr
		}
		if uint64(v.epoch) > rt.failEpoch.Load() && rt.ranksLive(v) {
			if err := rt.drainLanding(ctx, v.epoch); err != nil {
				return err
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
		if v.failed[p] || (p != rt.self && rt.peers[p].isDown()) {
			return false
		}
	}
	return true
}

// waitPromotion blocks a spare until a view gives it a rank.
func (rt *Runtime) waitPromotion(ctx context.Context) error {
	for {
		if rt.isClosed() {
			return ErrClosed
		}
		if err := rt.halted(); err != nil {
			return err
		}
		rt.viewMu.Lock()
		v, verr, fin, ch := rt.view.Load(), rt.viewErr, rt.finished, rt.viewChanged
		rt.viewMu.Unlock()
		if v.rankOf[rt.self] >= 0 {
			return nil
		}
		if verr != nil {
			return fmt.Errorf("%w: %w", ErrNotPromoted, verr)
		}
		if fin {
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

// SendHealth implements health.Sender over FrameHeartbeat frames.
func (rt *Runtime) SendHealth(ctx context.Context, to transport.Proc, payload []byte) error {
	h := transport.Header{Type: transport.FrameHeartbeat}
	return rt.send(ctx, to, &h, payload)
}

func (rt *Runtime) handleHeartbeat(from transport.Proc, p transport.Payload) error {
	if rt.det == nil || p.Len() > 4096 {
		return p.Discard()
	}
	buf := make([]byte, p.Len())
	if err := p.ReadInto(buf); err != nil {
		return err
	}
	return rt.det.Deliver(from, buf)
}

// watchDetector reports confirmed failures to the membership.
func (rt *Runtime) watchDetector(events <-chan health.Event) {
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return
			}
			if ev.Kind != health.Confirmed {
				continue
			}
			if v := rt.view.Load(); v.failed[ev.Proc] {
				continue // the view already replaced it
			}
			epoch := rt.Epoch()
			rt.noteFailure(ev.Proc)
			rt.log.Warn("failure confirmed", "failed_proc", int(ev.Proc), "reason", ev.Reason)
			proc := ev.Proc
			rt.goFunc(func() { rt.reportFailure(proc, epoch) })
		case <-rt.closed:
			return
		}
	}
}

// reportFailure hands a confirmed failure to the membership, retrying until
// it is accepted, the runtime closes, or a view already covers it.
func (rt *Runtime) reportFailure(proc transport.Proc, epoch uint64) {
	for attempt := 0; ; attempt++ {
		if rt.view.Load().failed[proc] || rt.isClosed() {
			return
		}
		ctx, cancel := context.WithTimeout(rt.life, 5*time.Second)
		err := rt.member.ReportFailure(ctx, proc, epoch)
		cancel()
		if err == nil {
			return
		}
		rt.log.Warn("failure report not accepted yet", "failed_proc", int(proc), "err", err, "attempt", attempt)
		select {
		case <-rt.closed:
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Finalize ends the job for this rank. Every live rank calls it: a
// barrier, then the lowest live rank (rank 0 unless the job shrank) has
// the membership record that the job finished (so idle spares stop
// waiting and exit), then a second barrier so that no rank takes its share
// of the membership's quorum away before that is committed, then Close.
//
// A membership change under Finalize (a rank lost, or only an idle spare)
// returns its error (NeedsRecovery holds) and leaves the runtime open: the
// program recovers as after any failure, with every rank (some may not
// have reached Finalize yet), brings a new process to its end state (from
// a final checkpoint, say), and calls Finalize again; or it calls Close.
// Any other outcome closes the runtime.
func (rt *Runtime) Finalize(ctx context.Context) error {
	err := rt.finalizeOnce(ctx)
	if err != nil && NeedsRecovery(err) && rt.member != nil && !rt.isClosed() && rt.halted() == nil {
		return err
	}
	rt.Close()
	return err
}

func (rt *Runtime) finalizeOnce(ctx context.Context) error {
	err := rt.Barrier(ctx, nil)
	if live := rt.view.Load().live; err == nil && len(live) > 0 && rt.Rank() == live[0] {
		if f, ok := rt.member.(Finisher); ok {
			err = f.Finish(ctx)
		}
	}
	if err == nil {
		err = rt.Barrier(ctx, nil)
	}
	return err
}

// Membership returns the membership the runtime was configured with (nil
// without one), for programs that need more of it than the runtime uses,
// such as recording checkpoint IDs or asking who leads.
func (rt *Runtime) Membership() Membership { return rt.member }
