package launch

import (
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/gaspigo/gaspigo/internal/bootstrap"
)

// Processes added to a running job: replacements gaspirun starts
// (--respawn), and joiners started by hand.
//
// The tracker decides: a process of the formed job that is lost while the
// job runs (onExit's continue and replaced cases) costs one replacement
// from the budget (Config.MaxRestarts), asked for with an actRespawn; once
// the budget is spent it says so once. A replacement asked for and not
// started yet keeps the job from being judged lost (check), since it may
// yet take the lost rank. The driver (job) owns the clock and the
// processes: each replacement waits in a queue, is started after a delay
// from an exponential backoff (reset when a replacement registers, so a
// crash loop slows down while single losses are replaced at once), on the
// host pickHost chooses, with a process id the rendezvous reserved
// (Server.Reserve: never one used before, since fencing keys on ids) and
// PGAS_JOIN=1. It is then a spare like the job's own ("s7") until a role
// report gives it a rank. Once the job's outcome is decided (every rank
// finished, or a teardown) nothing more is started and the rendezvous is
// told (Server.Finish), so late joiners exit 0.

// Backoff between replacements: the first waits about respawnFirstDelay,
// each next one twice as long up to respawnMaxDelay, until a replacement
// registers.
const (
	respawnFirstDelay = 100 * time.Millisecond
	respawnMaxDelay   = 5 * time.Second
)

// addProc makes p a process of the job that was not among those it
// started with: a replacement, or byHand a joiner gaspirun did not start.
// host is where it runs (a host of the placement; ignored on one machine).
// The tracker's arrays grow to hold it; ids skipped on the way (reserved,
// never started) are absent. It returns false when p is a process already.
func (t *tracker) addProc(p int, host string, byHand bool) bool {
	if p < 0 || p >= bootstrap.MaxProcs {
		return false
	}
	for t.nProcs <= p {
		t.grow()
	}
	if !t.absent[p] {
		return false
	}
	t.absent[p], t.exited[p], t.byHand[p] = false, false, byHand
	if t.hosts != nil {
		t.hosts[p] = host
	}
	return true
}

// grow adds one absent id to every per-process array.
func (t *tracker) grow() {
	t.rankOf = append(t.rankOf, -1)
	t.heldRank = append(t.heldRank, -1)
	t.replaced = append(t.replaced, false)
	t.exited = append(t.exited, true) // absent: never to be waited for
	t.exit = append(t.exit, exitInfo{})
	t.stopped = append(t.stopped, false)
	t.registered = append(t.registered, false)
	t.plain = append(t.plain, false)
	t.absent = append(t.absent, true)
	t.byHand = append(t.byHand, false)
	if t.hosts != nil {
		t.hosts = append(t.hosts, "")
	}
	t.nProcs++
}

// isByHand reports whether p joined the job without gaspirun.
func (t *tracker) isByHand(p int) bool { return p >= 0 && p < t.nProcs && t.byHand[p] }

// onJoined: the rendezvous admitted process p into the running job
// (bootstrap.KindJoined; text is "pid P on HOST"). A replacement gaspirun
// started is known already; any other joined by hand and is tracked from
// now on for its label and reports, with no process to wait for: its
// disconnection ends it (onGone).
func (t *tracker) onJoined(p int, host, text string) []action {
	if p < 0 || p >= bootstrap.MaxProcs {
		return nil
	}
	if p < t.nProcs && !t.absent[p] {
		acts := t.onRegistered(p)
		return append(acts, action{kind: actNotice, text: fmt.Sprintf("%s joined the job as a spare (%s)", t.label(p), oneLine(text))})
	}
	t.addProc(p, host, true)
	t.registered[p] = true
	return []action{{kind: actNotice, text: fmt.Sprintf("process %d joined the running job by hand (%s); it waits as spare s%d", p, oneLine(text), p)}}
}

// onGone: the connection of p, a joiner by hand, closed. gaspirun has no
// exit status for it, so its end is taken for the end of its work: a rank
// it held counts as finished unless a role report later shows another
// process took it over (onRole then counts p as lost), and an idle one is
// a spare that ended. Guessing a death instead would fail a job whose
// joiner simply finished its rank before the others.
func (t *tracker) onGone(p int) []action {
	if !t.isByHand(p) || t.exited[p] {
		return nil
	}
	t.exited[p] = true
	t.exit[p] = exitInfo{}
	if t.phase != running || t.stopped[p] {
		return nil
	}
	acts := []action{{kind: actNotice, text: fmt.Sprintf("%s left the rendezvous; gaspirun has no exit status for it and counts it as ended", t.describe(p))}}
	return append(acts, t.check()...)
}

// replace asks for a replacement of p, lost while the job runs (was is
// its label when lost, for the notices), if the budget has room.
func (t *tracker) replace(p int, was string) []action {
	if t.maxRestarts == 0 || t.phase != running {
		return nil
	}
	if t.restarts >= t.maxRestarts {
		if t.budgetSaid {
			return nil
		}
		t.budgetSaid = true
		return []action{{kind: actNotice, important: true,
			text: fmt.Sprintf("the replacement budget is used up (--max-restarts %d): lost %s is not replaced, nor will later losses be; the job goes on with the spares it has",
				t.maxRestarts, was)}}
	}
	t.restarts++
	t.queued++
	return []action{{kind: actRespawn, proc: p, label: was}}
}

// respawnStarted: the replacement asked for lost process was (a label)
// runs as process p on host ("" for this machine).
func (t *tracker) respawnStarted(p int, host, was string) []action {
	t.queued--
	t.addProc(p, host, false)
	on := "on this machine"
	if host != "" {
		on = "on host " + host
	}
	return []action{{kind: actNotice, text: fmt.Sprintf("respawned %s %s for lost %s (%d of %d)", t.label(p), on, was, t.restarts-t.queued, t.maxRestarts)}}
}

// respawnDropped: a replacement asked for will not be started (why, for
// the notice; "" once the job's outcome is decided). Its share of the
// budget is given back, and the job may now be judged.
func (t *tracker) respawnDropped(why string) []action {
	if t.queued == 0 {
		return nil
	}
	t.queued--
	t.restarts--
	var acts []action
	if why != "" {
		acts = append(acts, action{kind: actNotice, important: true, text: why})
	}
	return append(acts, t.check()...)
}

// exitSeen: p's exit came and is held back before it is judged (onExit
// follows). The process counts as gone for hostUse at once: a host whose
// every process died must not get a replacement because one of their
// exits was still settling.
func (t *tracker) exitSeen(p int, ex exitInfo) {
	if p >= 0 && p < t.nProcs && !t.exited[p] {
		t.ending[p] = ex
	}
}

// failedStart says p's end is a replacement's start that failed: gaspirun
// started it on a host, and its ssh or srun ended without an exit status
// before the process registered with the rendezvous. The host is then
// taken for unreachable (an ssh to a host that is down exits 255).
func (t *tracker) failedStart(p int, ex exitInfo) bool {
	return p >= t.nInitial && !t.byHand[p] && !t.registered[p] && ex.Lost != "" && t.hosts != nil && t.hosts[p] != ""
}

// startFailed handles failedStart: the host is marked failed (actHostFailed)
// and the replacement asked for again, elsewhere, at no cost to the
// budget: no process of the job was lost.
func (t *tracker) startFailed(p int, ex exitInfo) []action {
	host := t.hosts[p]
	t.restarts-- // replace charges it again
	acts := []action{
		{kind: actHostFailed, label: host},
		{kind: actNotice, important: true, text: fmt.Sprintf("could not start replacement %s on host %s (%s before it registered); the host is taken for lost, trying another", t.label(p), host, ex)},
	}
	return append(append(acts, t.replace(p, t.label(p))...), t.check()...)
}

// hostUse is the job's use of each of hosts, from the processes gaspirun
// placed there.
func (t *tracker) hostUse(hosts []HostSlots) []hostUse {
	use := make([]hostUse, len(hosts))
	if t.hosts == nil {
		return use
	}
	index := make(map[string]int, len(hosts))
	for i, h := range hosts {
		index[h.Name] = i
	}
	for p := range t.nProcs {
		i, ok := index[t.hosts[p]]
		if !ok || t.absent[p] || t.byHand[p] {
			continue
		}
		u := &use[i]
		u.placed++
		ex, ending := t.ending[p]
		if t.exited[p] {
			ex = t.exit[p]
		}
		switch {
		case !t.exited[p] && !ending && t.replaced[p]:
			// The membership declared it failed and gave its rank to
			// another: as good as dead for placing (its end may be slow
			// to reach gaspirun from a host that went down).
			u.died++
		case !t.exited[p] && !ending:
			u.live++
			if t.rankOf[p] >= 0 {
				u.ranks++
			}
		case !ex.ok():
			u.died++
		}
	}
	return use
}

// respawner is the driver's side of the replacements: the queue of those
// the tracker asked for, the backoff that spaces them, and what starts
// them. Only the loop goroutine uses it.
type respawner struct {
	queue []action // actRespawn, oldest first
	bo    *backoff.ExponentialBackOff
	timer *time.Timer
	due   <-chan time.Time // fires when the head of the queue may start; nil while nothing waits
	// failed holds the hosts where a start failed: they are lost.
	failed map[string]bool
	// mine holds the ids of the replacements gaspirun started, to tell
	// them from joiners by hand.
	mine map[int]bool
	// be starts the replacements: the job's back end, or under Slurm a
	// back end of one-task srun steps, made on first use (own: closed
	// with the job).
	be  backend
	own bool
}

func newRespawner() *respawner {
	return &respawner{
		bo: backoff.NewExponentialBackOff(
			backoff.WithInitialInterval(respawnFirstDelay),
			backoff.WithMaxInterval(respawnMaxDelay),
			backoff.WithMaxElapsedTime(0)), // never give up: the budget bounds the replacements
		failed: map[string]bool{},
		mine:   map[int]bool{},
	}
}

// add queues a replacement and arms the timer if none is armed.
func (r *respawner) add(a action) {
	r.queue = append(r.queue, a)
	r.arm()
}

// arm starts the wait for the head of the queue.
func (r *respawner) arm() {
	if r.due != nil || len(r.queue) == 0 {
		return
	}
	r.timer = time.NewTimer(r.bo.NextBackOff())
	r.due = r.timer.C
}

// pop takes the head of the queue once its timer fired.
func (r *respawner) pop() (action, bool) {
	r.due = nil
	if len(r.queue) == 0 {
		return action{}, false
	}
	a := r.queue[0]
	r.queue = r.queue[1:]
	return a, true
}

// clear empties the queue and returns how many waited.
func (r *respawner) clear() int {
	n := len(r.queue)
	r.queue = nil
	r.stop()
	return n
}

func (r *respawner) stop() {
	if r.timer != nil {
		r.timer.Stop()
	}
	r.due = nil
}

// registered: process p registered with the rendezvous; a replacement
// that did resets the backoff (the host and the program work).
func (r *respawner) registered(p int) {
	if r.mine[p] {
		r.bo.Reset()
	}
}

// respawnDue starts the replacement at the head of the queue, now due.
func (j *job) respawnDue(apply func([]action)) {
	r := j.refill
	a, ok := r.pop()
	if !ok {
		return
	}
	defer r.arm()
	if j.tr.phase != running {
		apply(j.tr.respawnDropped(""))
		j.dropRespawns(apply)
		return
	}
	host, envHost, ranksOnHost, why := j.replacementHost(a.proc)
	if why != "" {
		apply(j.tr.respawnDropped(fmt.Sprintf("no replacement for lost %s: %s", a.label, why)))
		return
	}
	be, err := j.replacementBackend()
	if err != nil {
		apply(j.tr.respawnDropped(fmt.Sprintf("no replacement for lost %s: %v", a.label, err)))
		return
	}
	id, err := j.srv.Reserve()
	if err != nil {
		apply(j.tr.respawnDropped(fmt.Sprintf("no replacement for lost %s: the rendezvous reserves no process id: %v", a.label, err)))
		return
	}
	if err := j.startProc(int(id), be, host, envHost, ranksOnHost, true); err != nil {
		if host == "" {
			apply(j.tr.respawnDropped(fmt.Sprintf("no replacement for lost %s: %v", a.label, err)))
			return
		}
		// The host is lost; the next try goes elsewhere (pickHost), so
		// this ends once no host is left.
		r.failed[host] = true
		apply([]action{{kind: actNotice, important: true, text: fmt.Sprintf("could not start a replacement for lost %s on host %s (%v); trying another host", a.label, host, err)}})
		r.queue = append([]action{a}, r.queue...)
		return
	}
	r.mine[int(id)] = true
	j.out.addProc()
	apply(j.tr.respawnStarted(int(id), host, a.label))
}

// dropRespawns gives up the replacements still queued: the job's outcome
// is decided.
func (j *job) dropRespawns(apply func([]action)) {
	if j.refill == nil {
		return
	}
	for n := j.refill.clear(); n > 0; n-- {
		apply(j.tr.respawnDropped(""))
	}
}

// replacementHost says where a replacement of lost process lost runs:
// host for the back end ("" for this machine), envHost for its PGAS_HOST,
// and the ranks on that host for its GOMAXPROCS; or why it cannot run.
func (j *job) replacementHost(lost int) (host, envHost string, ranksOnHost int, why string) {
	if j.place == nil {
		// This machine, under the label of the process it replaces (a
		// local job's labels stand in for hosts).
		envHost = j.hostname
		if pr := j.byID[lost]; pr != nil {
			envHost = pr.host
		}
		return "", envHost, j.cfg.Ranks, ""
	}
	use := j.tr.hostUse(j.place.Hosts)
	for i, h := range j.place.Hosts {
		use[i].failed = j.refill.failed[h.Name]
	}
	i, why := pickHost(j.place.Hosts, use, j.cfg.Backend() == LauncherSlurm)
	if i < 0 {
		if j.cfg.Backend() == LauncherSlurm {
			why += fmt.Sprintf("; to leave room for replacements, ask sbatch or salloc for more tasks than the job's %d processes", j.cfg.NumProcs())
		}
		return "", "", 0, why
	}
	name := j.place.Hosts[i].Name
	// It will likely take a rank there: count it with the ranks.
	return name, name, use[i].ranks + 1, ""
}

// replacementBackend is what starts replacements: the job's own back end,
// except under Slurm, whose step has a fixed set of tasks: there each
// replacement is a step of its own (remoteBackend with srun as the
// connector).
func (j *job) replacementBackend() (backend, error) {
	r := j.refill
	if r.be != nil {
		return r.be, nil
	}
	if j.cfg.Backend() != LauncherSlurm {
		r.be = j.be
		return r.be, nil
	}
	b, err := newRemoteBackend(LauncherSlurm, j.cfg)
	if err != nil {
		return nil, err
	}
	r.be, r.own = b, true
	return b, nil
}

// closeRespawns ends the back end of the replacements if it is their own.
func (j *job) closeRespawns() {
	if j.refill == nil {
		return
	}
	j.refill.stop()
	if j.refill.own {
		j.refill.be.close()
	}
}
