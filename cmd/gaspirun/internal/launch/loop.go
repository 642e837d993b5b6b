package launch

import (
	"cmp"
	"context"
	"syscall"
	"time"

	"github.com/gaspigo/gaspigo/internal/bootstrap"
)

// The job's life, as Run's loop goes through it: forming (not every
// process has registered yet), running, recovering (a process was lost
// and the job is making up for it), ending (the outcome is decided). Each
// state is a function that waits for one event, handles it, and names the
// state that follows. The tracker decides; the loop owns the clock, the
// channels and the signals, and applies the tracker's actions.

// registrationPoll is how often the loop looks for a registration with
// the rendezvous while a plain process has ended and others run.
const registrationPoll = 100 * time.Millisecond

type exitEvent struct {
	proc int
	info exitInfo
}

// state is one state of the job's life: it handles one event and returns
// the state that follows, nil when the loop is over.
type state func() state

// loop runs until every process has exited and its exit was decided on.
func (j *job) loop(ctx context.Context) Result {
	l := newLoop(ctx, j)
	defer l.stop()
	for s := l.next(); s != nil; s = s() {
	}
	return l.end()
}

// forming: not every process has registered, as far as the exits judged
// so far tell (tracker.formed), so an exit is judged as an early one
// (early.go). While a plain process has ended and others run, the
// rendezvous is polled for a registration, which it sends no event for
// and which would make this a gaspigo job that cannot form.
func (l *loop) forming() state {
	l.pollRegistrations(l.j.tr.awaitingRegistration())
	l.await()
	if !l.stillForming() {
		l.pollRegistrations(false)
	}
	return l.next()
}

// running: the job formed and every rank has its process. Each exit is
// held until the process's last reports are in (Config.ExitSettle), then
// judged as the end of a rank's process, a spare or a replaced process.
func (l *loop) running() state {
	l.await()
	return l.next()
}

// recovering: the job formed and lost a process it has not made up for:
// a rank waits for the spare that takes it over (its role report), or a
// replacement waits in the queue for its start (respawn.go), or exits
// are held for their reports. A job with a replacement on its way is not
// judged lost.
func (l *loop) recovering() state {
	l.await()
	return l.next()
}

// ending: the outcome is decided: every rank finished, or the job failed
// or was cut short. Nothing more is started; after a teardown the exits
// held are decided at once (order no longer matters); idle spares get the
// grace to end by themselves, and what outlives the grace is killed.
func (l *loop) ending() state {
	if l.j.tr.phase == aborting {
		l.decidePending()
	}
	if l.j.over(l.handled) {
		return nil
	}
	l.await()
	return l.next()
}

// next is the state the job is in.
func (l *loop) next() state {
	t := l.j.tr
	switch {
	case l.j.over(l.handled):
		return nil
	case t.phase != running:
		return l.ending
	case !t.formed:
		return l.forming
	case len(l.pending) > 0 || t.recovering():
		return l.recovering
	}
	return l.running
}

// stillForming says whether the job is still forming (see forming).
func (l *loop) stillForming() bool { return l.j.tr.phase == running && !l.j.tr.formed }

// loop is the state of job.loop besides the tracker's: the exits held,
// the timers and the channels it waits on. Only the loop goroutine uses
// it; the settle timers only send on settleC.
type loop struct {
	j   *job
	ctx context.Context
	res Result

	pending    map[int]exitEvent       // exits held until their reports are in (ExitSettle)
	handled    int                     // exits decided
	settleC    chan int                // a held exit whose ExitSettle has passed
	settled    chan struct{}           // closed when the loop ends: no settle timer blocks on settleC then
	timers     []*time.Timer           // the settle timers
	replacedAt map[int]time.Time       // when a role report made a live holder a replaced process
	ctxDone    <-chan struct{}         // nil once the interruption was handled
	reports    <-chan bootstrap.Report // nil once the rendezvous closed it
	tornDown   bool                    // a teardown was applied

	stall   *stallWatch
	stallT  *time.Ticker
	timeout alarm        // --timeout
	kill    alarm        // the grace after a SIGTERM to all
	linger  alarm        // the idle spares' grace to end by themselves
	watch   *time.Ticker // looking for a registration (awaitingRegistration)
	watchC  <-chan time.Time
}

func newLoop(ctx context.Context, j *job) *loop {
	l := &loop{
		j: j, ctx: ctx,
		pending:    map[int]exitEvent{},
		settleC:    make(chan int, len(j.procs)),
		settled:    make(chan struct{}),
		replacedAt: map[int]time.Time{},
		ctxDone:    ctx.Done(),
		reports:    j.srv.Reports(),
		stall:      newStallWatch(cmp.Or(j.cfg.StallAfter, DefaultStallAfter), cmp.Or(j.cfg.StallEvery, DefaultStallEvery), time.Now()),
	}
	l.stallT = time.NewTicker(stallTick(l.stall.after))
	if j.cfg.Timeout > 0 {
		l.timeout.arm(j.cfg.Timeout)
	}
	return l
}

// stop stops the loop's timers and releases the settle timers.
func (l *loop) stop() {
	for _, t := range l.timers {
		t.Stop()
	}
	l.kill.stop()
	l.linger.stop()
	l.pollRegistrations(false)
	close(l.settled)
	l.timeout.stop()
	l.stallT.Stop()
}

// alarm is a one-shot timer the loop waits on: its channel is nil until
// it is armed, and again once it has fired (fired).
type alarm struct {
	t *time.Timer
	C <-chan time.Time
}

// arm starts the timer, unless it was started before.
func (a *alarm) arm(d time.Duration) {
	if a.t == nil {
		a.t = time.NewTimer(d)
		a.C = a.t.C
	}
}

func (a *alarm) fired() { a.C = nil }

func (a *alarm) stop() {
	if a.t != nil {
		a.t.Stop()
	}
}

// await waits for one event and handles it.
func (l *loop) await() {
	var respawnC <-chan time.Time
	if l.j.refill != nil {
		respawnC = l.j.refill.due
	}
	select {
	case now := <-l.stallT.C:
		l.j.stallCheck(l.stall, now)
	case ev := <-l.j.exits:
		l.onExit(ev)
	case p := <-l.settleC:
		if ev, ok := l.pending[p]; ok {
			l.decide(ev)
		}
	case <-respawnC:
		l.j.respawnDue(l.apply)
	case r, ok := <-l.reports:
		if !ok {
			l.reports = nil
			return
		}
		l.stall.progress(time.Now())
		l.onReport(r)
	case <-l.timeout.C:
		l.onTimeout()
	case <-l.ctxDone:
		l.onInterrupt()
	case <-l.linger.C:
		l.onLinger()
	case <-l.kill.C:
		l.kill.fired()
		l.j.signalAll(syscall.SIGKILL)
	case <-l.watchC:
		l.onPoll()
	}
}

// pollRegistrations starts or stops the poll of the rendezvous for
// registrations.
func (l *loop) pollRegistrations(on bool) {
	switch {
	case on && l.watch == nil:
		l.watch = time.NewTicker(registrationPoll)
		l.watchC = l.watch.C
	case !on && l.watch != nil:
		l.watch.Stop()
		l.watch, l.watchC = nil, nil
	}
}

// end tells the rendezvous the job is over, stops what the processes left
// running, drains their output and makes the Result.
func (l *loop) end() Result {
	j := l.j
	j.finish()
	if l.tornDown || j.tr.phase == aborting {
		// Whatever the processes started must not outlive the job.
		j.signalAll(syscall.SIGKILL)
	} else {
		j.signalAll(syscall.SIGTERM)
	}
	j.closePumps()

	res := l.res
	res.ExitCode = j.tr.code
	res.Reason = j.tr.reason
	for _, pr := range j.procs {
		ex := j.tr.exit[pr.id]
		res.Procs = append(res.Procs, ProcResult{
			Proc: pr.id, Pid: pr.pid, Host: pr.host, Label: *pr.label.Load(),
			Code: ex.Code, Signal: ex.Signal, Stopped: j.tr.stopped[pr.id],
		})
	}
	return res
}

// over says whether the loop is done: every process gaspirun started has
// ended and been judged, and, while the job runs, no replacement is on
// its way and no joiner by hand runs.
func (j *job) over(handled int) bool {
	if handled < len(j.procs) {
		return false
	}
	return j.tr.phase != running || (j.tr.live() == 0 && j.tr.queued == 0)
}

// finish tells the rendezvous, once, that the job's outcome is decided:
// joiners that come later exit 0 instead of joining.
func (j *job) finish() {
	if !j.finished {
		j.finished = true
		j.srv.Finish()
	}
}
