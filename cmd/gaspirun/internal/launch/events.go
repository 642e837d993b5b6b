package launch

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/gaspigo/gaspigo/internal/bootstrap"
)

// The loop's handlers: each takes one event (an exit, a report, a timer,
// the user's interruption), feeds it to the tracker and applies what the
// tracker says to do.

// apply carries out the tracker's actions.
func (l *loop) apply(acts []action) {
	j := l.j
	for _, a := range acts {
		switch a.kind {
		case actNotice:
			switch {
			case a.important:
				j.out.alert(a.text)
			case !j.cfg.Quiet:
				j.out.notice(a.text)
			}
		case actEvent:
			if !j.cfg.Quiet {
				j.out.event(a.proc, a.label, a.text)
			}
		case actRelabel:
			if pr := j.byID[a.proc]; pr != nil {
				label := a.label
				pr.label.Store(&label)
			}
		case actRespawn:
			j.refill.add(a)
		case actHostFailed:
			j.refill.failed[a.label] = true
		case actTeardown:
			l.tornDown = true
			j.signalAll(syscall.SIGTERM)
			l.kill.arm(j.cfg.Grace)
		case actStop:
			l.linger.arm(j.cfg.Grace)
		case actKill:
			j.signalAll(syscall.SIGKILL)
		}
	}
	if j.tr.phase != running {
		// The outcome is decided: start nothing more, and let late
		// joiners know.
		j.dropRespawns(l.apply)
		j.finish()
	}
	if j.out.status != nil {
		j.out.status.setState(j.tr.statusState())
	}
}

// decide judges the exit ev, held or not.
func (l *loop) decide(ev exitEvent) {
	delete(l.pending, ev.proc)
	l.handled++
	if !l.j.tr.formed && l.j.formed() {
		l.j.tr.onFormed()
	}
	l.apply(l.j.tr.onExit(ev.proc, ev.info))
}

// decidePending judges every exit held.
func (l *loop) decidePending() {
	for _, ev := range l.pending {
		l.decide(ev)
	}
}

// onExit takes the exit of a process. Reports the process sent before
// exiting must be applied before its exit is judged: once its connection
// to the rendezvous is known to be closed they are all in the channel;
// until then the exit is held, for at most ExitSettle. Once the outcome
// is decided (or without ExitSettle) it is judged at once.
func (l *loop) onExit(ev exitEvent) {
	j := l.j
	l.stall.progress(time.Now())
	if at, ok := l.replacedAt[ev.proc]; ok && time.Since(at) < j.cfg.ExitSettle {
		j.tr.recent[ev.proc] = true
	}
	j.byID[ev.proc].waited = true
	j.tr.exitSeen(ev.proc, ev.info)
	if j.srv.Connected(uint32(ev.proc)) {
		l.apply(j.tr.onRegistered(ev.proc))
	}
	switch {
	case j.tr.phase != running || j.cfg.ExitSettle == 0:
		l.decide(ev)
	case !j.srv.Connected(uint32(ev.proc)):
		l.drain()
		l.decide(ev)
	default:
		l.hold(ev)
	}
}

// hold keeps ev pending until its reports are in, or ExitSettle has
// passed (settleC).
func (l *loop) hold(ev exitEvent) {
	l.pending[ev.proc] = ev
	p, settleC, settled := ev.proc, l.settleC, l.settled
	l.timers = append(l.timers, time.AfterFunc(l.j.cfg.ExitSettle, func() {
		select {
		case settleC <- p:
		case <-settled:
		}
	}))
}

// onReport takes a report from the rendezvous: a joiner by hand, a
// registered process's report or its disconnection.
func (l *loop) onReport(r bootstrap.Report) {
	j := l.j
	if r.Kind == bootstrap.KindJoined {
		host := ""
		if m, ok := j.srv.Member(r.Proc); ok {
			host = m.Host
		}
		l.apply(j.tr.onJoined(int(r.Proc), host, r.Text))
		if j.refill != nil {
			j.refill.registered(int(r.Proc))
		}
		return
	}
	// Only a registered process sends reports (and has its disconnection
	// reported).
	l.apply(j.tr.onRegistered(int(r.Proc)))
	if r.Kind == bootstrap.KindDisconnected {
		if ev, ok := l.pending[int(r.Proc)]; ok {
			l.decide(ev)
		} else if j.tr.isByHand(int(r.Proc)) {
			l.apply(j.tr.onGone(int(r.Proc)))
		}
		return
	}
	old := -1 // the holder a role report replaces
	if r.Kind == bootstrap.KindRole {
		// The exit of the rank's current holder, if already seen, came
		// first: judge it as the death of the rank, not of a replaced
		// process.
		if h := j.tr.holderOf(r.Rank); h >= 0 && h != int(r.Proc) {
			if ev, ok := l.pending[h]; ok {
				l.decide(ev)
			}
		}
		old = j.tr.holderOf(r.Rank)
	}
	l.apply(j.tr.onReport(r))
	if old >= 0 && old != int(r.Proc) && j.tr.replaced[old] && !j.tr.exited[old] {
		l.replacedAt[old] = time.Now()
	}
}

// drain applies the reports already delivered, without waiting.
func (l *loop) drain() {
	for l.reports != nil {
		select {
		case r, ok := <-l.reports:
			if !ok {
				l.reports = nil
				return
			}
			l.onReport(r)
		default:
			return
		}
	}
}

// onTimeout: the job ran longer than --timeout.
func (l *loop) onTimeout() {
	l.timeout.fired()
	if l.j.tr.phase == running {
		l.res.TimedOut = true
	}
	l.apply(l.j.tr.onAbort(ExitTimeout, fmt.Sprintf("timeout: the job ran longer than --timeout %v", l.j.cfg.Timeout)))
}

// onInterrupt: the user interrupted gaspirun (ctx was cancelled).
func (l *loop) onInterrupt() {
	l.ctxDone = nil
	code, why := interruption(l.ctx)
	if l.j.tr.phase == running {
		l.res.Interrupted = true
	}
	l.apply(l.j.tr.onAbort(code, why))
}

// interruption is the exit code and the reason of a job whose ctx was
// cancelled: the Interrupt's, or ExitInterrupted.
func interruption(ctx context.Context) (code int, why string) {
	var in *Interrupt
	if !errors.As(context.Cause(ctx), &in) {
		return ExitInterrupted, "interrupted"
	}
	why = "interrupted by " + in.Signal.String()
	if sig, ok := in.Signal.(syscall.Signal); ok {
		why = "interrupted by " + signalName(sig)
	}
	return in.ExitCode(), why
}

// onLinger: every rank finished a grace ago; stop what still runs.
func (l *loop) onLinger() {
	l.linger.fired()
	if l.j.tr.phase != finishing {
		return // torn down meanwhile
	}
	if text := l.j.tr.stopRemaining(); text != "" {
		if !l.j.cfg.Quiet {
			l.j.out.notice(text)
		}
		l.j.signalLive(syscall.SIGTERM)
		l.kill.arm(l.j.cfg.Grace)
	}
}

// onPoll looks for processes registered with the rendezvous and still
// running.
func (l *loop) onPoll() {
	for _, pr := range l.j.procs {
		if !pr.waited && l.j.srv.Connected(uint32(pr.id)) {
			l.apply(l.j.tr.onRegistered(pr.id))
		}
	}
}
