package pgas

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/gaspigo/gaspigo/health"
	"github.com/gaspigo/gaspigo/transport"
)

// noteFailure records that proc was seen failing in the current epoch, so
// that Recover waits for a view that replaces it. A proc the current view
// already declared failed needs no newer view.
func (rt *Runtime) noteFailure(proc transport.Proc) {
	v := rt.view.Load()
	if v.isFailed(proc) {
		return
	}
	for {
		old := rt.failEpoch.Load()
		if uint64(v.epoch) <= old || rt.failEpoch.CompareAndSwap(old, uint64(v.epoch)) {
			return
		}
	}
}

// cutOff fails everything that waits on proc and tells the detector.
func (rt *Runtime) cutOff(proc transport.Proc, err error) {
	pr := rt.peers.get(proc)
	if pr.isDown() {
		return
	}
	// A peer that said goodbye, or any peer once this process is closing
	// (its own goodbyes sent, its transports about to close), ends its
	// connection as part of the job ending: no failure to report.
	departed := pr.departed.Load() || rt.closing.Load()
	if departed {
		rt.log.Debug("peer left", "peer_proc", int(proc), "closing", rt.closing.Load())
	} else {
		rt.log.Info("peer lost", "peer_proc", int(proc), "err", err)
		rt.lostAt(proc)
	}
	pr.fail(fmt.Errorf("%w: %v", ErrRankFailed, err))
	if rt.det != nil && !departed {
		rt.det.PeerDown(proc)
	}
	rt.failRequests(func(r *request) bool { return r.proc == proc }, ErrRankFailed)
	rt.coll.Wake()    // a collective in shared memory waiting on it looks again
	rt.wakeSegments() // so does a waiter on a slot it may have set without its wake-up
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
//
// Over a transport that connects on first use (Connector), only a process
// connected to proc now sends the notice: a paused process keeps its
// connections, so the peers it talked to tell it; a dead one has none, and
// a send would dial it. (At 256 processes every survivor dialled a
// SIGKILLed process three times, in the middle of the restore.)
func (rt *Runtime) disconnect(proc transport.Proc, cause error) {
	d, ok := rt.tr.(Disconnector)
	if !ok {
		return
	}
	conn, lazy := rt.tr.(Connector)
	rt.goFunc(func() {
		ctx, cancel := context.WithTimeout(context.Background(), fencedNoticeTimeout)
		defer cancel()
		if (!lazy || conn.Connected(proc)) && rt.peers.get(proc).toldFenced.CompareAndSwap(false, true) {
			h := transport.Header{Type: transport.FrameControl, A: ctlFenced}
			rt.send(ctx, proc, &h, nil)
		}
		d.Disconnect(proc, cause)
	})
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
	rt.peers.failAll(err)
	rt.failRequests(func(*request) bool { return true }, err)
	rt.coll.Wake()
	// Cut every connection: a send blocked on a peer this process cannot
	// reach (a full socket buffer, a partition) returns, and nothing
	// more is taken from peers that have moved on.
	if d, ok := rt.tr.(Disconnector); ok {
		rt.goFunc(func() {
			rt.peers.each(func(p *peer) {
				if p.proc != rt.self {
					d.Disconnect(p.proc, err)
				}
			})
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
			if v := rt.view.Load(); v.isFailed(ev.Proc) {
				continue // the view already replaced it
			} else if v.finished {
				// Every rank reached Finalize: processes exiting now
				// are the job ending, and there is nothing to recover.
				rt.log.Debug("peer gone after the job finished", "peer_proc", int(ev.Proc))
				continue
			}
			epoch := rt.Epoch()
			rt.noteFailure(ev.Proc)
			rt.log.Info("failure confirmed", "failed_proc", int(ev.Proc), "reason", ev.Reason)
			rt.detected(ev.Proc, ev.Reason)
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
		if rt.view.Load().isFailed(proc) || rt.isClosed() {
			return
		}
		ctx, cancel := context.WithTimeout(rt.life, 5*time.Second)
		err := rt.member.ReportFailure(ctx, proc, epoch)
		cancel()
		if err == nil {
			return
		}
		level := slog.LevelInfo
		if attempt >= 10 { // a second or more: the membership is in trouble
			level = slog.LevelWarn
		}
		rt.log.Log(context.Background(), level, "failure report not accepted yet", "failed_proc", int(proc), "err", err, "attempt", attempt)
		select {
		case <-rt.closed:
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}
