package launch

import (
	"fmt"

	"github.com/gaspigo/gaspigo/internal/bootstrap"
)

type actKind int

const (
	actNotice     actKind = iota // print text (always when important, else unless quiet)
	actRelabel                   // proc's output prefix becomes label
	actTeardown                  // SIGTERM every process group, SIGKILL after the grace
	actStop                      // after the grace, SIGTERM the processes still running (idle spares), SIGKILL after another
	actKill                      // SIGKILL every process group now
	actEvent                     // print a process's event (text, from proc labelled label), unless quiet
	actRespawn                   // start a replacement for lost process proc (labelled label when lost)
	actHostFailed                // a start on host label failed: no more replacements there
)

type action struct {
	kind      actKind
	proc      int
	label     string
	text      string
	important bool
}

type phase int

const (
	running   phase = iota
	finishing       // every rank finished; idle spares are being stopped
	aborting        // the job failed or was cut short; everything is being stopped
)

// tracker is the launcher's decision core: a pure state machine fed with
// process exits, reports and interruptions, returning what to do. It knows
// which process holds which rank, so it can tell a rank failure from the
// exit of a replaced or idle process, and when the job is done.
type tracker struct {
	nRanks, nProcs int
	policy         DeathPolicy // DeathContinue or DeathAbort
	// autoAbort: the policy is DeathAbort because --on-death was left to
	// gaspirun (no spares, no respawn); a job that shrinks turns it into
	// DeathContinue (onShrink).
	autoAbort bool

	holder    []int    // rank -> process holding it, -1: lost
	vacant    []bool   // rank left vacant on purpose (a job that shrinks)
	rankEpoch []uint64 // rank -> epoch of the last role report for it
	rankOf    []int    // process -> rank it holds, -1: none
	heldRank  []int    // process -> last rank it held, -1: never
	replaced  []bool   // process lost its rank to another (fenced)
	exited    []bool
	exit      []exitInfo
	// recent holds the replaced processes whose exit came within
	// Config.ExitSettle of the report of their replacement (the driver
	// sets it): a death that caused the replacement, its report first.
	recent map[int]bool
	// ending holds the exits seen and not judged yet (held back for
	// Config.ExitSettle, exitSeen): gone for the placement of replacements
	// already.
	ending  map[int]exitInfo
	stopped []bool     // the launcher signalled it
	lostBy  []exitInfo // rank -> how its last holder ended, when that lost it
	spareOK int        // processes that never held a rank and exited 0 on their own
	hosts   []string   // process -> host named in messages; nil: one machine
	formed  bool       // every process registered with the rendezvous

	registered []bool // process -> the driver saw it registered with the rendezvous
	plain      []bool // process -> exited 0 before the job formed, never registered (early.go)

	// Processes that joined the running job (respawn.go). The arrays above
	// grow with them (addProc); ids in between that never became a
	// process are absent, and count as ended for nothing.
	nInitial int    // processes started with the job: ids 0..nInitial-1
	absent   []bool // id that is no process of the job (reserved, never started)
	byHand   []bool // joined without gaspirun: no exit status; its disconnection ends it

	// The replacement budget (Config.MaxRestarts; 0: no replacements).
	maxRestarts int
	restarts    int  // replacements asked for (actRespawn) and not given back: started or queued
	queued      int  // of those, not started yet: the job waits for them before it is judged lost
	budgetSaid  bool // the notice that the budget is used up was given

	phase  phase
	code   int
	reason string
}

func newTracker(nRanks, nProcs int, policy DeathPolicy) *tracker {
	t := &tracker{
		nRanks: nRanks, nProcs: nProcs, policy: policy,
		holder:    make([]int, nRanks),
		vacant:    make([]bool, nRanks),
		rankEpoch: make([]uint64, nRanks),
		rankOf:    make([]int, nProcs),
		heldRank:  make([]int, nProcs),
		replaced:  make([]bool, nProcs),
		exited:    make([]bool, nProcs),
		exit:      make([]exitInfo, nProcs),
		ending:    map[int]exitInfo{},
		recent:    map[int]bool{},
		stopped:   make([]bool, nProcs),
		lostBy:    make([]exitInfo, nRanks),

		registered: make([]bool, nProcs),
		plain:      make([]bool, nProcs),

		nInitial: nProcs,
		absent:   make([]bool, nProcs),
		byHand:   make([]bool, nProcs),
	}
	for r := range t.holder {
		t.holder[r] = r
	}
	for p := range t.rankOf {
		t.rankOf[p], t.heldRank[p] = -1, -1
		if p < nRanks {
			t.rankOf[p], t.heldRank[p] = p, p
		}
	}
	return t
}

// label is the output prefix of process p, without brackets: "r2" for a
// rank, "s5" for an idle spare, "p1" for a process that lost its rank.
func (t *tracker) label(p int) string {
	switch {
	case t.rankOf[p] >= 0:
		return fmt.Sprintf("r%d", t.rankOf[p])
	case t.heldRank[p] >= 0:
		return fmt.Sprintf("p%d", p)
	default:
		return fmt.Sprintf("s%d", p)
	}
}

// describe names process p for messages.
func (t *tracker) describe(p int) string {
	on := ""
	if t.hosts != nil {
		on = " on " + t.hosts[p]
	}
	switch {
	case t.rankOf[p] >= 0:
		return fmt.Sprintf("rank %d (process %d%s)", t.rankOf[p], p, on)
	case t.heldRank[p] >= 0:
		return fmt.Sprintf("process %d%s (formerly rank %d)", p, on, t.heldRank[p])
	case t.byHand[p]:
		return fmt.Sprintf("spare process %d%s (joined by hand)", p, on)
	default:
		return fmt.Sprintf("spare process %d%s", p, on)
	}
}

// onFormed: every process has registered with the rendezvous, so the job
// has formed and a process that ends is judged by the rules below.
func (t *tracker) onFormed() { t.formed = true }

// holderOf is the process holding rank r, or -1 (also for a bad r).
func (t *tracker) holderOf(r int) int {
	if r < 0 || r >= t.nRanks {
		return -1
	}
	return t.holder[r]
}

func (t *tracker) live() int {
	n := 0
	for _, e := range t.exited {
		if !e {
			n++
		}
	}
	return n
}

func (t *tracker) done() bool { return t.live() == 0 }

// onExit handles the end of process p.
func (t *tracker) onExit(p int, ex exitInfo) []action {
	if p < 0 || p >= t.nProcs || t.exited[p] {
		return nil
	}
	t.exited[p] = true
	t.exit[p] = ex
	delete(t.ending, p)
	if t.phase == finishing && !t.stopped[p] && t.replaced[p] && t.rankOf[p] < 0 {
		// Its rank's new holder finished the job before this exit was
		// judged (held back for ExitSettle): its death is told all the same.
		return t.replacedNotice(p, ex)
	}
	if t.phase != running || t.stopped[p] {
		return nil
	}
	if !t.formed {
		return t.onEarlyExit(p, ex)
	}
	if t.failedStart(p, ex) {
		return t.startFailed(p, ex)
	}
	r := t.rankOf[p]
	was := t.label(p) // for the notice of its replacement
	switch {
	case ex.ok():
		if t.heldRank[p] < 0 {
			t.spareOK++
		}
		return t.check()
	case t.replaced[p] && r < 0:
		// Another process holds its rank now: whatever happens to this one
		// (a fenced process exits with an error) is not a rank failure.
		acts := t.replacedNotice(p, ex)
		// The pool is one process smaller all the same.
		acts = append(acts, t.replace(p, was)...)
		return append(acts, t.check()...)
	case p >= t.nInitial && r < 0 && t.heldRank[p] < 0 && ex.Signal == 0 && ex.Code == exitCannotJoin:
		// A replacement that found no membership to join (the job's
		// processes were ending, or unreachable): it never held a rank,
		// so the job's fate is the membership's, which ends a rank that
		// waits for it after the refill wait. Not a failure of the job.
		return append([]action{{kind: actNotice,
			text: fmt.Sprintf("%s could not join the running job (exit %d); the job goes on without it", t.describe(p), ex.Code)}}, t.check()...)
	case ex.Signal == 0 && (!leftMembership(ex.Code) || t.policy != DeathContinue):
		return t.abort(ex.Code, fmt.Sprintf("%s %s", t.describe(p), ex))
	case t.policy == DeathContinue:
		// A signal death, or a process that learnt it was replaced
		// (fenced, exit 77) or gave up cut off (exit 74) before its
		// replacement's report reached us.
		what := t.describe(p)
		how := ex.how()
		var text string
		if r >= 0 {
			text = fmt.Sprintf("%s %s; the job continues (the runtime recovers the rank)", what, how)
			t.holder[r] = -1
			t.rankOf[p] = -1
			t.lostBy[r] = ex
		} else {
			text = fmt.Sprintf("%s %s; the job continues with one spare fewer", what, how)
		}
		acts := []action{{kind: actNotice, important: true, text: text}}
		acts = append(acts, t.replace(p, was)...)
		return append(acts, t.check()...)
	default:
		return t.abort(128+int(ex.Signal), fmt.Sprintf("%s was %s", t.describe(p), ex))
	}
}

// replacedNotice tells the end of process p after another process took
// its rank over.
func (t *tracker) replacedNotice(p int, ex exitInfo) []action {
	switch {
	case ex.Signal != 0 && t.recent[p]:
		// Killed, and its exit came right after the report of its
		// replacement, which raced it here: the death of the rank, told
		// as such.
		on := ""
		if t.hosts != nil {
			on = " on " + t.hosts[p]
		}
		return []action{{kind: actNotice, important: true,
			text: fmt.Sprintf("rank %d (process %d%s) %s; the job continues (the runtime recovers the rank)", t.heldRank[p], p, on, ex.how())}}
	case ex.Signal != 0:
		return []action{{kind: actNotice, important: true,
			text: fmt.Sprintf("%s was %s after it was replaced; the job continues", t.describe(p), ex)}}
	}
	return []action{{kind: actNotice,
		text: fmt.Sprintf("%s %s after it was replaced; ignored, the job continues", t.describe(p), ex)}}
}

// onReport handles a status report from a process.
func (t *tracker) onReport(r bootstrap.Report) []action {
	p := int(r.Proc)
	if p < 0 || p >= t.nProcs || t.absent[p] {
		return nil
	}
	switch r.Kind {
	case bootstrap.KindRole:
		return t.onRole(p, r.Rank, r.Epoch)
	case bootstrap.KindError:
		return []action{{kind: actNotice, important: true, text: fmt.Sprintf("%s reported an error: %s", t.describe(p), oneLine(r.Text))}}
	case bootstrap.KindVacant:
		return t.onVacant(r.Rank, r.Epoch)
	case bootstrap.KindShrink:
		return t.onShrink()
	case bootstrap.KindEvent:
		return []action{{kind: actEvent, proc: p, label: t.label(p), text: oneLine(r.Text)}}
	}
	return nil
}

func (t *tracker) onRole(p, rank int, epoch uint64) []action {
	if rank >= t.nRanks {
		return nil
	}
	var acts []action
	if rank < 0 {
		if cur := t.rankOf[p]; cur >= 0 {
			t.holder[cur] = -1
			t.rankOf[p] = -1
			t.replaced[p] = true
			acts = append(acts, action{kind: actRelabel, proc: p, label: t.label(p)},
				action{kind: actNotice, text: fmt.Sprintf("process %d gave up rank %d (epoch %d)", p, cur, epoch)})
		}
		return append(acts, t.check()...)
	}
	if epoch < t.rankEpoch[rank] || t.holder[rank] == p {
		return nil
	}
	t.rankEpoch[rank] = epoch
	if cur := t.rankOf[p]; cur >= 0 && t.holder[cur] == p {
		t.holder[cur] = -1
	}
	if old := t.holder[rank]; old >= 0 {
		was := t.label(old)
		t.rankOf[old] = -1
		t.replaced[old] = true
		acts = append(acts, action{kind: actRelabel, proc: old, label: t.label(old)},
			action{kind: actNotice, text: fmt.Sprintf("process %d no longer holds rank %d (replaced)", old, rank)})
		if t.byHand[old] && t.exited[old] && t.phase == running {
			// Its disconnection was taken for the end of its work (it
			// has no exit status); its rank taken over says it was lost.
			acts = append(acts, t.replace(old, was)...)
		}
	}
	was := t.describe(p)
	if t.heldRank[p] < 0 && t.exited[p] && t.exit[p].ok() {
		t.spareOK-- // counted as an idle spare; it ran the rank after all
	}
	t.holder[rank] = p
	t.rankOf[p] = rank
	t.heldRank[p] = rank
	acts = append(acts, action{kind: actRelabel, proc: p, label: t.label(p)},
		action{kind: actNotice, text: fmt.Sprintf("%s now holds rank %d (epoch %d)", was, rank, epoch)})
	return append(acts, t.check()...)
}

// onShrink: the job goes on with fewer ranks when one is lost with no
// spare left, so a death is survived: the job is not ended at the first
// one, as it would be by default without spares. (With --on-death abort
// given, the processes refuse to start: PGAS_ON_DEATH.)
func (t *tracker) onShrink() []action {
	if !t.autoAbort || t.policy != DeathAbort {
		return nil
	}
	t.policy = DeathContinue
	return []action{{kind: actNotice, text: "the job shrinks when a rank is lost: a death does not end it"}}
}

// onVacant: the membership left rank vacant (a job that shrinks); the job
// goes on without it, so it is not lost.
func (t *tracker) onVacant(rank int, epoch uint64) []action {
	if rank < 0 || rank >= t.nRanks || t.vacant[rank] {
		return nil
	}
	t.vacant[rank] = true
	acts := []action{{kind: actNotice, text: fmt.Sprintf("rank %d is vacant (epoch %d): the job goes on without it", rank, epoch)}}
	return append(acts, t.check()...)
}

// onAbort handles a timeout or an interruption.
func (t *tracker) onAbort(code int, reason string) []action {
	if t.phase == running {
		return t.abort(code, reason)
	}
	// Already stopping: stop harder.
	return []action{{kind: actKill}}
}

// abort fails the job: its notice is gaspirun's verdict, said once ("job
// failed: " and the reason); the summary at the end only counts.
func (t *tracker) abort(code int, reason string) []action {
	t.phase = aborting
	t.code = code
	t.reason = reason
	n := t.stopAll()
	text := "job failed: " + reason
	if n > 0 {
		text += fmt.Sprintf("; stopping the other %d %s", n, plural(n, "process", "processes"))
	}
	return []action{{kind: actNotice, important: true, text: text}, {kind: actTeardown}}
}

// stopAll marks every running process as stopped by the launcher and
// returns how many there are.
func (t *tracker) stopAll() int {
	n := 0
	for p := range t.exited {
		if !t.exited[p] {
			t.stopped[p] = true
			n++
		}
	}
	return n
}

// stopRemaining marks the processes still running once every rank
// finished (and the grace they had to end by themselves passed) as
// stopped by gaspirun, and returns the notice to print, "" if none is
// left.
func (t *tracker) stopRemaining() string {
	what := t.remaining()
	n := t.stopAll()
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("all %d ranks finished; stopping the %d remaining %s (%s)", t.nRanks, n, plural(n, "process", "processes"), what)
}

// remaining says what the processes still running are: "idle spares",
// or e.g. "1 idle spare, 2 replaced" when some lost their rank (cut off,
// or slow to learn it).
func (t *tracker) remaining() string {
	spares, replaced := 0, 0
	for p := range t.exited {
		switch {
		case t.exited[p]:
		case t.heldRank[p] >= 0:
			replaced++
		default:
			spares++
		}
	}
	if replaced == 0 {
		return "idle spares"
	}
	return fmt.Sprintf("%d idle %s, %d replaced", spares, plural(spares, "spare", "spares"), replaced)
}

// recovering says whether the running job lost a process it has not made
// up for yet: a rank has no holder (and was not left vacant), or a
// replacement asked for has not started.
func (t *tracker) recovering() bool {
	if t.queued > 0 {
		return true
	}
	for r, h := range t.holder {
		if h < 0 && !t.vacant[r] {
			return true
		}
	}
	return false
}

// check decides whether the job is over.
func (t *tracker) check() []action {
	if t.phase != running {
		return nil
	}
	var lost []int
	finished := true
	for r, h := range t.holder {
		switch {
		case h < 0 && t.vacant[r]:
		case h < 0:
			lost = append(lost, r)
			finished = false
		case !t.exited[h] || !t.exit[h].ok():
			finished = false
		}
	}
	if finished {
		t.phase = finishing
		for p := range t.exited {
			if !t.exited[p] {
				// Idle spares end by themselves once the membership records
				// the end; the runner gives them the grace (stopRemaining).
				return []action{{kind: actStop}}
			}
		}
		return nil
	}
	if t.live() > 0 || t.queued > 0 {
		// A replacement on its way may yet take the lost ranks.
		return nil
	}
	// Every process has ended, and some rank has no process that finished
	// it. Ranks whose holder finished count as done.
	othersDone := true
	for _, h := range t.holder {
		if h >= 0 && !t.exit[h].ok() {
			othersDone = false
		}
	}
	if othersDone && len(lost) <= t.spareOK {
		// Spares finished on their own, so they ran the lost ranks, but no
		// role report reached us.
		t.phase = finishing
		return []action{{kind: actNotice, text: fmt.Sprintf("%s lost %s process, and %d %s finished without reporting a promotion; assuming %s over",
			rankList(lost), plural(len(lost), "its", "their"), t.spareOK, plural(t.spareOK, "spare", "spares"), plural(t.spareOK, "it took", "they took"))}}
	}
	t.phase = aborting
	t.code = ExitLost
	t.reason = fmt.Sprintf("%s lost %s process and no process took over (a promoted spare sends a %q report)",
		rankList(lost), plural(len(lost), "its", "their"), bootstrap.KindRole)
	for _, r := range lost {
		if ex := t.lostBy[r]; ex.Signal == 0 && ex.Code == ExitCutOff {
			// The process's own verdict says more than "lost".
			t.code = ExitCutOff
			t.reason = fmt.Sprintf("rank %d's process was cut off from the membership (exit %d) and no process took over; %s", r, ExitCutOff, t.reason)
			break
		}
	}
	return []action{{kind: actNotice, important: true, text: "job failed: " + t.reason}}
}
