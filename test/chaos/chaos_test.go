package chaos

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/health"
	"github.com/gaspigo/gaspigo/internal/faultpoint"
	"github.com/gaspigo/gaspigo/internal/testkit/stats"
	"github.com/gaspigo/gaspigo/pgas"
)

var (
	flagSchedules = flag.Int("chaos.schedules", 0, "run seeds 1..N instead of the fixed sample (the long sweep)")
	flagSeeds     = flag.String("chaos.seeds", "", "comma-separated seeds to run instead of the sample (replay)")
	flagSummary   = flag.String("chaos.summary", "", "also write the summary table to this file")
	flagKeep      = flag.String("chaos.keep", "", "write the whole output of every failed schedule, of every schedule with a fault not applied, and of every respawn schedule that did not lose more processes than its spares, to DIR/seed-N.log (multi-host: DIR/hosts-seed-N.log)")
	flagList      = flag.Bool("chaos.list", false, "print the schedules of the seeds TestChaos would run (with -chaos.seeds or -chaos.schedules) and their replay lines, and run none; with the -race setting of the run it is for: the K-means iterations differ")
)

// sampleSeeds is the fixed CI sample: chosen so that it covers every
// fault kind at least once (TestSampleCoversEveryKind checks it).
var sampleSeeds = []uint64{3, 4, 5, 28, 31, 36, 44, 85, 316, 384}

// WorkloadOf is the workload of a seed: one seed in four runs TeraSort.
func WorkloadOf(seed uint64) Workload {
	if seed%4 == 3 {
		return TeraSort
	}
	return KMeans
}

// ScheduleOf draws the schedule of seed with the workload sizes in force.
func ScheduleOf(seed uint64) Schedule {
	w := WorkloadOf(seed)
	if w == TeraSort {
		return Draw(seed, w, tsLastAt())
	}
	return Draw(seed, w, kmWorkload().lastAt())
}

func seeds(t *testing.T) []uint64 {
	switch {
	case *flagSeeds != "":
		var out []uint64
		for _, f := range strings.Split(*flagSeeds, ",") {
			s, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
			if err != nil {
				t.Fatalf("-chaos.seeds: %q is not a seed (want e.g. -chaos.seeds=7,12)", f)
			}
			out = append(out, s)
		}
		return out
	case *flagSchedules > 0:
		out := make([]uint64, *flagSchedules)
		for i := range out {
			out[i] = uint64(i + 1)
		}
		return out
	}
	return sampleSeeds
}

// summary aggregates a sweep.
type summary struct {
	mu         sync.Mutex
	schedules  int
	byWorkload map[Workload]int
	cov        *coverage[Kind] // drawn, applied, not applied and why, by kind
	recoveries int             // membership changes the ranks recovered through (epochs after the first)
	recMS      []float64
	wrong      int
	hangs      int
	leftovers  int
	violations int
	exhausted  int
	overrun    int // survivable schedules that lost more processes than spares to false suspicion
	declared   int // processes declared failed, over all schedules
	resumed    int
	failedRuns []string
	// Respawn schedules (gaspirun --respawn): how many ran, how many lost
	// more processes than they had spares and had their pool refilled (the
	// kind's point), and over all of them the replacements gaspirun
	// started, those that joined the job, and those that took a rank.
	respawnRuns, refilled            int
	respawns, joins, joinersPromoted int
}

func newSummary() *summary {
	return &summary{byWorkload: map[Workload]int{}, cov: newCoverage(Kinds)}
}

// TestChaos runs seeded fault schedules over real processes and checks
// the invariants after each (see doc.go). Without flags it runs the fixed
// sample; -chaos.schedules=N runs seeds 1..N; -chaos.seeds=S replays.
// It fails when a fault kind its schedules drew was never applied: a
// sweep that did not inject a kind has not tested it.
func TestChaos(t *testing.T) {
	if *flagList {
		for _, seed := range seeds(t) {
			s := ScheduleOf(seed)
			t.Logf("%s\n  replay: %s", s, s.Replay())
		}
		return
	}
	if bins.err != nil {
		t.Skip(bins.err)
	}
	t.Cleanup(removeTSInput)
	sum := newSummary()
	refs := &references{}
	for _, seed := range seeds(t) {
		s := ScheduleOf(seed)
		t.Run(fmt.Sprintf("%s/seed=%d", s.Workload, seed), func(t *testing.T) {
			runSchedule(t, s, refs, sum)
		})
	}
	table := sum.table()
	t.Logf("chaos summary:\n%s", table)
	if *flagSummary != "" {
		if err := os.WriteFile(*flagSummary, []byte(table), 0o644); err != nil {
			t.Errorf("write -chaos.summary: %v", err)
		}
	}
	sum.cov.check(t)
	sum.checkRefill(t)
}

// runSchedule runs one schedule and checks it.
func runSchedule(t *testing.T, s Schedule, refs *references, sum *summary) {
	t.Logf("schedule:\n%s", s)
	var j *job
	// Every fault drawn is counted, also when the schedule stops early.
	defer func() { sum.cover(t, s, j) }()
	ref := refs.get(t, s)
	var (
		res Result
		out = t.TempDir()
	)
	if s.Expect == ResumeOrRefuse {
		j, res = diskSchedule(t, s)
	} else {
		j, res = run(t, build(t, s, out))
		if s.Workload == TeraSort && res.Code == 0 {
			res.Answer = validate(t, out)
		}
		programOutcomes(j, s)
		respawnOutcomes(j, s)
	}
	j.run.Lock()
	for i := range s.Faults {
		if !j.outcomes[i].applied {
			res.Skipped++
		}
	}
	j.run.Unlock()
	viol := Violations(s, res, ref)
	ended := time.Now()
	left := j.leftovers()
	t.Logf("checks after the job took %v", time.Since(ended).Round(time.Millisecond))
	if len(left) > 0 {
		viol = append(viol, fmt.Sprintf("processes left running after gaspirun ended: pids %v", left))
	}
	recoveries := recoveryTimes(j)
	sum.add(s, res, ref, viol, left, recoveries, j)
	// A respawn schedule that lost no more processes than its spares did
	// not test the refill; its output says why (a replacement that did not
	// join, a job that ended first).
	// So did a fault not applied: its output says why too.
	untested := s.Respawn && j.refillOf(s).kills <= s.Spares || res.Skipped > 0
	if len(viol) > 0 || untested {
		keep(t, fmt.Sprintf("seed-%d.log", s.Seed), s.String(), res.Lines)
	}
	if len(viol) > 0 {
		t.Errorf("chaos schedule failed:\n%s\nviolations:\n  %s\nreplay: %s\nlast output:\n%s",
			s, strings.Join(viol, "\n  "), s.Replay(), tail(res.Lines, 40))
	}
}

// build turns a schedule into a gaspirun job and the function that applies
// its faults.
func build(t *testing.T, s Schedule, out string) spec {
	sp := spec{ranks: s.Ranks, spares: s.Spares}
	if s.RanksPerHost > 0 {
		sp.launcher = append(sp.launcher, "--ranks-per-host", strconv.Itoa(s.RanksPerHost))
	}
	if s.Respawn {
		// The wait is gaspirun's default with --respawn, given here so that
		// the deadline below is sure to cover it. The job goes through
		// twice the recoveries of any other schedule's (each kill's, and
		// each replacement's join), and a rank may wait refillWait for a
		// replacement: twice the normal deadline covers both.
		sp.launcher = append(sp.launcher, "--respawn", "--refill-wait", refillWait.String())
		sp.deadline = 2 * jobDeadline
	}
	switch s.Workload {
	case KMeans:
		w := kmWorkloadFor(s.Ranks)
		sp.program = append([]string{bins.kmeans}, w.args()...)
		if s.Ranks != Ranks {
			sp.gaspirun, sp.program[0] = scaleBins.gaspirun, scaleBins.kmeans
			sp.deadline = scaleDeadline(s.Ranks+s.Spares, len(s.Faults))
		}
		sp.program = append(sp.program, "--mirrors", strconv.Itoa(s.Mirrors))
		for _, f := range s.Faults {
			switch f.Kind {
			case KillCommit:
				sp.program = append(sp.program, "--inject", fmt.Sprintf("kill:rank=%d,iter=%d,phase=commit", f.Rank, w.commitAt(f)))
			case KillMirror:
				sp.program = append(sp.program, "--inject", fmt.Sprintf("kill:rank=%d,iter=%d", f.Rank, f.At),
					"--inject", fmt.Sprintf("kill:mirror-of=%d,iter=%d", f.Rank, w.mirrorKillAt(f)))
			}
			if mode, ok := f.Kind.storeMode(); ok {
				in := fmt.Sprintf("store:rank=%d,iter=%d", f.Rank, f.At)
				if mode != "" {
					in += ",mode=" + mode
				}
				sp.program = append(sp.program, "--inject", in)
			}
			if f.Kind == KillStoreWake {
				// The first store that finds a parked waiter is the
				// store injection's (K-means parks no other waiter).
				sp.env = []string{faultpoint.EnvVar + "=" + pgas.PointStoreWake}
			}
		}
	case TeraSort:
		sp.program = tsProgram(tsInput(t, tsRecordsOf(s)), out, s.Mirrors)
	}
	sp.faults = len(s.Faults)
	sp.apply = func(j *job) {
		for i, f := range s.Faults {
			if f.Kind.byProgram() {
				continue // the program injects it; its output says whether it did (programOutcomes)
			}
			applied, why, detail := apply(j, s, i)
			j.decide(i, f, applied, why, detail)
		}
	}
	return sp
}

// commitAt is the iteration after which a kill-commit fault kills its
// rank inside the checkpoint commit: f.At rounded down to a checkpoint.
func (w kmeansLoad) commitAt(f Fault) int {
	return max(w.ckptEvery, f.At/w.ckptEvery*w.ckptEvery)
}

// mirrorKillAt is the iteration after which a kill-mirror fault kills the
// holder of its rank's rebuilt mirror: two checkpoints after the first
// kill.
func (w kmeansLoad) mirrorKillAt(f Fault) int { return f.At + 2*w.ckptEvery }

// The reasons a fault is not applied, as the summary counts them.
const (
	whyEnded     = "the job ended first"
	whyLate      = "late (past its point by more than lateBy iterations, with program kills due)"
	whyNoSpare   = "no idle spare alive"
	whyNoLeader  = "no raft leader known"
	whyGone      = "its target process was not alive"
	whyNoAck     = "the target process never put the netfault rule in force"
	whyRiddenOut = "ridden out: its process was never declared failed"
	whyNotFired  = "the program did not fire it"
	whyNotRun    = "the schedule stopped before its faults were applied or checked"
	whyNoStore   = "its writer made no direct store after the partition began"
	whyNoJoin    = "the replacements of the processes lost before it had not joined the job"
	whyNoRespawn = "a kill beyond the spares, and gaspirun respawned no replacement for it"
)

// storeRE is a count line of K-means's store injection (apps/kmeans
// store.go), and storeStartRE its first line.
var (
	storeRE      = regexp.MustCompile(`inject: store rank (\d+) \(proc (\d+)\) into rank \d+: stores=(\d+) direct=(\d+) attempts=(\d+) cancelled=(\d+) wakes=(\d+) `)
	storeStartRE = regexp.MustCompile(`inject: store rank (\d+) \(proc (\d+)\) into rank \d+ after iteration (\d+)`)
	faultKillRE  = regexp.MustCompile(`faultpoint: SIGKILL process (\d+) \(pid \d+\) at ` + regexp.QuoteMeta(pgas.PointStoreWake) + `, hit \d+`)
)

// storeCount is one count line of a store injection's writer.
type storeCount struct {
	idx                                        int // in the job's lines
	rank, proc                                 int
	stores, direct, attempts, cancelled, wakes int
}

// storeCounts returns the count lines of process proc's writer (-1: any
// process), in order. Called with run's lock held.
func (j *job) storeCounts(proc int) []storeCount {
	var out []storeCount
	for i, l := range j.lines {
		m := storeRE.FindStringSubmatch(l.text)
		if m == nil {
			continue
		}
		n := make([]int, len(m))
		for k := 1; k < len(m); k++ {
			n[k], _ = strconv.Atoi(m[k])
		}
		if proc >= 0 && n[2] != proc {
			continue
		}
		out = append(out, storeCount{idx: i, rank: n[1], proc: n[2], stores: n[3], direct: n[4], attempts: n[5], cancelled: n[6], wakes: n[7]})
	}
	return out
}

// injectRE is K-means's line when an --inject kill fires (it then
// SIGKILLs itself): apps/internal/inject.Fire.
var injectRE = regexp.MustCompile(`inject: SIGKILL rank (\d+) \(pid \d+\) after iteration (\d+)(, inside the checkpoint commit)? `)

// programOutcomes decides the faults K-means injects itself (kill-commit,
// kill-mirror) from the job's output: applied only if the program said it
// fired each of the fault's kills.
func programOutcomes(j *job, s Schedule) {
	if s.Workload != KMeans {
		return
	}
	w := kmWorkloadFor(s.Ranks)
	type kill struct {
		rank, iter int
		commit     bool
	}
	var fired []kill
	j.run.Lock()
	for _, l := range j.lines {
		if m := injectRE.FindStringSubmatch(l.text); m != nil {
			r, _ := strconv.Atoi(m[1])
			i, _ := strconv.Atoi(m[2])
			fired = append(fired, kill{r, i, m[3] != ""})
		}
	}
	j.run.Unlock()
	firedAt := func(rank, iter int, commit bool) bool {
		return slices.ContainsFunc(fired, func(k kill) bool {
			return (rank < 0 || k.rank == rank) && k.iter == iter && k.commit == commit
		})
	}
	for i, f := range s.Faults {
		switch f.Kind {
		case CancelWriter:
			j.run.Lock()
			var best storeCount
			for _, c := range j.storeCounts(-1) {
				if c.rank == f.Rank && c.cancelled > best.cancelled {
					best = c
				}
			}
			j.run.Unlock()
			if best.cancelled > 0 && best.wakes > 0 {
				j.decide(i, f, true, "", fmt.Sprintf("process %d stored %d times with a context that had ended, sent %d wake-ups", best.proc, best.cancelled, best.wakes))
			} else {
				j.decide(i, f, false, whyNotFired, fmt.Sprintf("no store of rank %d with an ended context that woke a waiter in its output (best: %+v)", f.Rank, best))
			}
		case KillStoreWake:
			j.run.Lock()
			l, ok := j.findAfter(0, faultKillRE)
			j.run.Unlock()
			if ok {
				j.decide(i, f, true, "", strings.TrimSpace(l.text))
			} else {
				j.decide(i, f, false, whyNotFired, fmt.Sprintf("no %s kill in its output", pgas.PointStoreWake))
			}
		case KillCommit:
			at := w.commitAt(f)
			if firedAt(f.Rank, at, true) {
				j.decide(i, f, true, "", fmt.Sprintf("rank %d killed itself inside the commit after iteration %d", f.Rank, at))
			} else {
				j.decide(i, f, false, whyNotFired, fmt.Sprintf("no kill of rank %d inside the commit after iteration %d in its output", f.Rank, at))
			}
		case KillMirror:
			at := w.mirrorKillAt(f)
			switch {
			case !firedAt(f.Rank, f.At, false):
				j.decide(i, f, false, whyNotFired, fmt.Sprintf("no kill of rank %d after iteration %d in its output", f.Rank, f.At))
			case !firedAt(-1, at, false):
				j.decide(i, f, false, whyNotFired, fmt.Sprintf("rank %d was killed, but no holder of its mirror after iteration %d", f.Rank, at))
			default:
				j.decide(i, f, true, "", fmt.Sprintf("rank %d killed after iteration %d, its mirror's holder after %d", f.Rank, f.At, at))
			}
		}
	}
}

// programKills reports whether the program injects kills of its own
// (at fixed iterations, not waiting for the harness).
func (s Schedule) programKills() bool {
	for _, f := range s.Faults {
		if f.Kind == KillCommit || f.Kind == KillMirror || f.Kind == KillStoreWake {
			return true
		}
	}
	return false
}

// lateBy is how many iterations past its point a K-means fault may still
// be applied: two checkpoint intervals.
const lateBy = 20

// settledLocked reports whether the job has no recovery under way: every
// failure a survivor confirmed was followed by rank 0's recovery line
// (a process that joins the pool starts none: no new epoch), and
// since that line the job went on long enough to have committed a new
// checkpoint with the new process in it (K-means: a checkpoint interval
// and one more iteration; TeraSort: half a second). A schedule's faults
// are meant one at a time (kill-in-recovery excepted, which makes its own
// overlap): two losses in one recovery window can take a rank together with
// its only mirror, which no survivable schedule means to do. Called with
// run's lock held.
func (j *job) settledLocked(s Schedule) bool {
	lastRec, lastConfirm, lastLoss := -1, -1, -1
	for i, l := range j.lines {
		switch {
		case recoveryRE.MatchString(l.text):
			lastRec = i
		case l.msg() == msgFailureConfirmed:
			lastConfirm = i
		case strings.HasPrefix(l.text, "chaos: applied ") && causesRecovery(l.text):
			lastLoss = i
		case strings.HasPrefix(l.text, "chaos: ridden out "):
			lastLoss = -1 // the fault just applied cost no process
		}
	}
	// A fault applied a moment ago may not be confirmed yet: its recovery
	// must have been seen too.
	if lastConfirm > lastRec || lastLoss > lastRec {
		return false
	}
	if lastRec < 0 {
		return true
	}
	if s.Workload == TeraSort {
		return time.Since(j.lines[lastRec].at) > 500*time.Millisecond
	}
	iters := 0
	for _, l := range j.lines[lastRec:] {
		if iterRE.MatchString(l.text) {
			iters++
		}
	}
	return iters > kmWorkloadFor(s.Ranks).ckptEvery
}

// causesRecovery reports whether an applied-fault note is of a kind that
// changes the membership (every kind but the short pause and the slow or
// lossy link).
func causesRecovery(note string) bool {
	for _, k := range []Kind{PauseShort, SlowLink, LossyLink} {
		if strings.HasPrefix(note, "chaos: applied "+string(k)+" ") {
			return false
		}
	}
	return true
}

// reached waits until the job reaches a fault's trigger point.
func reached(j *job, s Schedule, at int) bool {
	if s.Workload == KMeans {
		return j.waitUntil(j.deadline, func() bool { return j.iter >= at })
	}
	// TeraSort's clock is its logical progress (tsProgress), from the
	// progress lines of rank 0: they begin once the rendezvous is over
	// (every process registered) and the first checkpoint committed, and
	// a point below 1000 per mille comes before rank 0 wrote its whole
	// part, so a fault lands inside the sort however fast it runs.
	return j.waitUntil(j.deadline, func() bool { return j.progress >= at })
}

// leaderWait bounds the wait for a known Raft leader at a kill-leader
// fault: an election after the previous leader's loss.
const leaderWait = 10 * time.Second

// ackWait bounds the wait for a process to put a netfault rule in force
// (it re-reads the rules every netfault.PollInterval).
const ackWait = 5 * time.Second

// refillWait is gaspirun's --refill-wait in respawn schedules: how long a
// rank lost while no spare is idle waits for a replacement to join
// (gaspirun's default with --respawn).
const refillWait = 30 * time.Second

// joinWait bounds the wait, before a respawn-spaced kill, for the
// replacements of the processes lost so far to join the job: gaspirun
// starts each one after a backoff of 100 ms to 5 s, and a race-built
// program on a loaded machine takes seconds to start, register and be
// added to the membership.
const joinWait = 45 * time.Second

// awaitReplacements waits, before fault i (a respawn-spaced kill), until
// as many processes joined the job as it lost: the kills of the faults
// before i that applied, or, if more, the processes the membership
// declared failed (a busy machine's false failures are replaced too).
// Then the kill finds the replacement of the one before it idle in the
// pool: the spaced case, which the kind is about, not that of a rank
// left to wait for its replacement. It reports whether they joined, and
// what it saw.
func (j *job) awaitReplacements(i int) (bool, string) {
	var lost, joined int
	ok := j.waitUntil(joinWait, func() bool {
		kills := 0
		for _, o := range j.outcomes[:i] {
			if o.applied {
				kills++
			}
		}
		lost, joined = max(kills, len(j.failed)), len(j.joined)
		return joined >= lost
	})
	j.run.Lock()
	respawned := slices.Clone(j.respawned)
	j.run.Unlock()
	return ok, fmt.Sprintf("%d processes joined the job for the %d it lost, within %v (replacements gaspirun started: %v)", joined, lost, joinWait, respawned)
}

// refill is what a respawn schedule's job did to refill its spare pool.
type refill struct {
	kills     int   // respawn-spaced kills applied
	respawned []int // ids of the replacements gaspirun started
	joined    int   // processes that joined the job (the runtime's records)
	promoted  []int // joiners that took a rank (gaspirun's "now holds rank" lines)
	// awaited counts the failures the membership committed with no spare
	// to promote (no "promoted" attribute): the rank waited for a
	// replacement, or, past the wait, the job shrank or failed. Spaced
	// kills find a spare idle: a count above 0 says a replacement came
	// late or a process was lost besides the kills.
	awaited int
}

// refillOf reads j's refill for schedule s: a process that took a rank
// counts as a joiner if its id is at or above s's ranks plus spares (the
// ids of the job's first processes are below).
func (j *job) refillOf(s Schedule) refill {
	j.run.Lock()
	defer j.run.Unlock()
	r := refill{respawned: slices.Clone(j.respawned), joined: len(j.joined)}
	for i, f := range s.Faults {
		if f.Kind == RespawnSpaced && j.outcomes[i].applied {
			r.kills++
		}
	}
	first := s.Ranks + s.Spares
	awaited := map[string]bool{} // by epoch: every member logs the commit
	for _, l := range j.lines {
		if m := holdsRE.FindStringSubmatch(l.text); m != nil {
			if p, _ := strconv.Atoi(m[1]); p >= first && !slices.Contains(r.promoted, p) {
				r.promoted = append(r.promoted, p)
			}
		}
		if rank, ok := l.rec.Int("rank"); ok && rank >= 0 && l.msg() == msgFailureCommitted && l.rec[attrPromoted] == "" {
			awaited[l.rec["epoch"]] = true
		}
	}
	r.awaited = len(awaited)
	return r
}

// respawnOutcomes checks, after a respawn schedule's job, that its kills
// beyond the spares were refilled: the n-th kill applied, n > Spares, is
// served by the replacement of an earlier loss, so gaspirun must have
// printed at least n-Spares respawn lines. A kill without one did not test
// the kind: it is counted as not applied, for that reason. It logs what
// the job did to refill its pool.
func respawnOutcomes(j *job, s Schedule) {
	if !s.Respawn {
		return
	}
	r := j.refillOf(s)
	n := 0
	for i, f := range s.Faults {
		j.run.Lock()
		applied := j.outcomes[i].applied
		j.run.Unlock()
		if f.Kind != RespawnSpaced || !applied {
			continue
		}
		n++
		if beyond := n - s.Spares; beyond > len(r.respawned) {
			j.withdraw(i, f, whyNoRespawn, fmt.Sprintf("kill %d, %d beyond the schedule's %d spares, and gaspirun printed %d respawn lines", n, beyond, s.Spares, len(r.respawned)))
		}
	}
	r = j.refillOf(s)
	j.t.Logf("refill: %d kills applied with %d spares; gaspirun started replacements %v, %d processes joined the job, joiners %v took a rank; %d failures found no spare idle",
		r.kills, s.Spares, r.respawned, r.joined, r.promoted, r.awaited)
	if r.kills <= s.Spares {
		j.t.Logf("refill: this schedule lost no more processes than its %d spares: it did not test the refilled pool", s.Spares)
	}
}

// nextAt is the K-means iteration at which fault i of s must be over if it
// lasts a while (pauses, links, partitions): the next fault's point, 0 for
// none. A fault's duration is real time while its point is an iteration:
// on a fast machine a link fault of two seconds would otherwise outlast
// the rest of the job, and the faults after it would never apply.
func (s Schedule) nextAt(i int) int {
	if s.Workload != KMeans || i+1 >= len(s.Faults) {
		return 0
	}
	n := s.Faults[i+1]
	at := n.At
	if n.Kind == KillCommit {
		at = kmWorkloadFor(s.Ranks).commitAt(n)
	}
	if at <= s.Faults[i].At {
		return 0
	}
	return at
}

// hold lets a fault last d, or until the job reaches iteration until (if
// not 0) or ends, whichever comes first; it returns how long it lasted and
// why it ended early ("" if it did not). With lost >= 0 (a fault meant to
// outlast failure detection) it ends early at until only once the
// membership declared process lost failed: cut shorter, it would be a
// short fault, ridden out.
func (j *job) hold(d time.Duration, until, lost int) (time.Duration, string) {
	start := time.Now()
	next := func() bool { return until > 0 && j.iter >= until && (lost < 0 || j.failed[lost]) }
	j.waitUntil(d, func() bool { return j.done || next() })
	took := time.Since(start)
	over := j.over()
	j.run.Lock()
	reachedNext := next()
	j.run.Unlock()
	switch {
	case reachedNext:
		return took, fmt.Sprintf(", cut short at iteration %d, the next fault's point", until)
	case over:
		return took, ", cut short: the job ended"
	}
	return took, ""
}

// holdLost holds a fault meant to outlast failure detection (a long
// pause, a partition) of process p: for d stretched by the job's factor
// (the membership stretches its timeouts, the failure detector's too, on
// an oversubscribed host, and logs the factor), ended early at iteration
// until once p was declared failed (hold); then, if p was not declared
// failed yet, up to as long as the failure detector may take on a busy
// machine: its timeouts grow by up to 1+MaxLocalHealth while processes
// see their own clocks stall or acks come late (health/localhealth.go),
// and at a load of 7 a pause of d was ridden out twice in three runs.
// lost reports whether it was declared failed.
func (j *job) holdLost(d time.Duration, until, p int) (held time.Duration, short string, lost bool) {
	j.run.Lock()
	d *= time.Duration(max(j.stretch, 1))
	j.run.Unlock()
	held, short = j.hold(d, until, p)
	j.run.Lock()
	lost = j.failed[p]
	j.run.Unlock()
	if !lost && short == "" {
		start := time.Now()
		lost = j.waitUntil(time.Duration(1+health.DefaultConfig().MaxLocalHealth)*d, func() bool { return j.failed[p] || j.done })
		held += time.Since(start)
		j.run.Lock()
		lost = j.failed[p]
		j.run.Unlock()
	}
	return held, short, lost
}

// lostOrNot is the outcome of a fault meant to cost process p (a long
// pause, a partition): applied only if the membership declared p failed;
// one that was ridden out was a short fault, not the one drawn, and its
// "applied" note no longer counts as a loss (settledLocked).
func (j *job) lostOrNot(f Fault, p int, lost bool, detail string) (bool, string, string) {
	if lost {
		return true, "", detail + fmt.Sprintf("; process %d declared failed", p)
	}
	j.note("ridden out %s: process %d was not declared failed", f, p)
	if j.over() {
		return false, whyEnded, detail + fmt.Sprintf("; the job ended before process %d was declared failed", p)
	}
	return false, whyRiddenOut, detail + fmt.Sprintf("; process %d was not declared failed", p)
}

// storedAfter is the outcome of a partition-writer fault whose process p
// was declared failed: applied only if p's writer made direct stores
// after the partition began (its count lines from the one before index
// from, the process's record that the rule is in force, to the last),
// the evidence that the partition stopped its frames
// and not its stores; the detail says how many, and how many attempts it
// made after the membership declared it failed.
func (j *job) storedAfter(f Fault, p, from int, detail string) (bool, string, string) {
	j.run.Lock()
	defer j.run.Unlock()
	cs := j.storeCounts(p)
	failedAt := len(j.lines)
	for i, l := range j.lines {
		if n, ok := l.rec.Int(attrFailedProc); ok && n == p && l.msg() == msgFailureCommitted {
			failedAt = i
			break
		}
	}
	var base, atFail, last *storeCount
	for k := range cs {
		c := &cs[k]
		if c.idx < from || base == nil {
			base = c
		}
		if c.idx <= failedAt {
			atFail = c
		}
		last = c
	}
	if last == nil || last.direct-base.direct <= 0 {
		return false, whyNoStore, detail + fmt.Sprintf("; process %d declared failed, its count lines %+v", p, cs)
	}
	after := 0
	if atFail != nil {
		after = last.attempts - atFail.attempts
	}
	return true, "", detail + fmt.Sprintf("; process %d declared failed; %d direct stores after the partition began, %d attempts after the failure was committed",
		p, last.direct-base.direct, after)
}

// apply applies fault i of s and reports whether it did, or why not (a
// reason of the summary's, and what exactly happened).
func apply(j *job, s Schedule, i int) (applied bool, why, detail string) {
	f := s.Faults[i]
	if f.Kind.byProgram() {
		return true, "", "" // injected by the program itself
	}
	where := func() string {
		if s.Workload == KMeans {
			j.run.Lock()
			defer j.run.Unlock()
			return fmt.Sprintf("rank 0 was at iteration %d", j.iter)
		}
		j.run.Lock()
		defer j.run.Unlock()
		return fmt.Sprintf("rank 0 had reported %d per mille of the sort's progress, %v after gaspirun started", j.progress, time.Since(j.start).Round(time.Millisecond))
	}
	ended := func(when string) (bool, string, string) {
		return false, whyEnded, when + "; " + where()
	}
	if !reached(j, s, f.At) {
		return ended("before the fault's point")
	}
	if f.Kind == RespawnSpaced {
		if ok, detail := j.awaitReplacements(i); !ok {
			if j.over() {
				return ended("while the harness waited for replacements to join: " + detail)
			}
			return false, whyNoJoin, detail
		}
	}
	if !j.waitUntil(j.deadline, func() bool { return j.settledLocked(s) }) {
		return ended("while an earlier recovery settled")
	}
	if j.over() {
		return ended("at the fault's point, before the harness could act")
	}
	// gone is the reason for a target that is not alive: the job's end,
	// or a process that died apart from the job.
	gone := func(what string) (bool, string, string) {
		if j.over() {
			return ended("before " + what + " could be hit")
		}
		return false, whyGone, what
	}
	if s.Workload == KMeans && s.programKills() {
		// An earlier fault's duration can make this one late. Late, it
		// could land inside the recovery from a kill the program injects
		// itself (kill-commit, kill-mirror) and lose a rank together with
		// its only mirror, which no schedule means to do: skip it.
		j.run.Lock()
		iter := j.iter
		j.run.Unlock()
		if iter > f.At+lateBy {
			return false, whyLate, fmt.Sprintf("the job was at iteration %d", iter)
		}
	}
	switch f.Kind {
	case KillRank, RespawnSpaced:
		p := j.holder(f.Rank)
		if _, ok := j.signal(p, syscall.SIGKILL); !ok {
			return gone(fmt.Sprintf("process %d, holder of rank %d", p, f.Rank))
		}
		j.note("applied %s: SIGKILL process %d", f, p)
		return true, "", fmt.Sprintf("SIGKILL process %d", p)
	case KillSpare:
		idle := j.idleSpares(s.Ranks, s.Spares)
		for _, p := range idle {
			if _, ok := j.signal(p, syscall.SIGKILL); ok {
				j.note("applied %s: SIGKILL spare process %d", f, p)
				return true, "", fmt.Sprintf("SIGKILL spare process %d", p)
			}
		}
		if j.over() {
			return ended("before a spare could be hit")
		}
		return false, whyNoSpare, fmt.Sprintf("idle spares in the newest view: %v", idle)
	case KillLeader:
		// The leader is learned from the membership's records (onLine),
		// and forgotten when it is killed or declared failed: this waits
		// for the election that follows an earlier leader's loss.
		deadline := time.Now().Add(leaderWait)
		for {
			if !j.waitUntil(time.Until(deadline), func() bool { return j.leader >= 0 }) {
				if j.over() {
					return ended("while the harness waited for a raft leader")
				}
				return false, whyNoLeader, fmt.Sprintf("no live process's %q record within %v", msgBecameLeader, leaderWait)
			}
			j.run.Lock()
			p := j.leader
			j.run.Unlock()
			if _, ok := j.signal(p, syscall.SIGKILL); ok {
				j.note("applied %s: SIGKILL raft leader process %d", f, p)
				return true, "", fmt.Sprintf("SIGKILL raft leader process %d", p)
			}
			if j.over() {
				return gone(fmt.Sprintf("raft leader process %d", p))
			}
			// The leader died apart from the harness (a kill the program
			// injected) before its failure was committed: wait for the
			// next election's winner.
			j.run.Lock()
			if j.leader == p {
				j.leader = -1
			}
			j.run.Unlock()
		}
	case KillInRecovery:
		p := j.holder(f.Rank)
		from := j.mark()
		if _, ok := j.signal(p, syscall.SIGKILL); !ok {
			return gone(fmt.Sprintf("process %d, holder of rank %d", p, f.Rank))
		}
		j.note("applied %s: SIGKILL process %d", f, p)
		if !j.waitUntil(j.deadline, func() bool { _, ok := j.findMsgAfter(from, msgFailureConfirmed); return ok }) {
			return ended(fmt.Sprintf("after the first kill (process %d), before a survivor confirmed it", p))
		}
		r2 := (f.Rank + 2) % s.Ranks
		q := j.holder(r2)
		if _, ok := j.signal(q, syscall.SIGKILL); !ok {
			return gone(fmt.Sprintf("process %d, holder of rank %d, for the second kill", q, r2))
		}
		j.note("applied %s: then, in the recovery, SIGKILL process %d (rank %d)", f, q, r2)
		return true, "", fmt.Sprintf("SIGKILL process %d, then in its recovery process %d", p, q)
	case PauseShort, PauseLong:
		p := j.holder(f.Rank)
		pid, ok := j.signal(p, syscall.SIGSTOP)
		if !ok {
			return gone(fmt.Sprintf("process %d, holder of rank %d", p, f.Rank))
		}
		j.run.Lock()
		j.stopped[pid] = true
		j.run.Unlock()
		j.note("applied %s: SIGSTOP process %d", f, p)
		if f.Kind == PauseShort {
			// Ridden out, and no progress while it lasts: no overrun.
			held, short := j.hold(f.Dur, 0, -1) // the fault's own duration, in real time
			syscall.Kill(pid, syscall.SIGCONT)
			j.note("SIGCONT process %d", p)
			return true, "", fmt.Sprintf("SIGSTOP process %d for %v%s", p, held.Round(time.Millisecond), short)
		}
		held, short, lost := j.holdLost(f.Dur, s.nextAt(i), p)
		syscall.Kill(pid, syscall.SIGCONT)
		j.note("SIGCONT process %d", p)
		detail := fmt.Sprintf("SIGSTOP process %d for %v%s", p, held.Round(time.Millisecond), short)
		return j.lostOrNot(f, p, lost, detail)
	case SlowLink, LossyLink, Partition, PartitionWriter:
		p := j.holder(f.Rank)
		rule := map[Kind]string{
			SlowLink:        fmt.Sprintf("proc=%d delay=%gms", p, f.Param),
			LossyLink:       fmt.Sprintf("proc=%d loss=%g", p, f.Param),
			Partition:       fmt.Sprintf("proc=%d partition", p),
			PartitionWriter: fmt.Sprintf("proc=%d partition", p),
		}[f.Kind]
		if f.Kind == PartitionWriter {
			// The program starts the writer at the fault's iteration.
			if !j.waitUntil(ackWait, func() bool { return len(j.storeCounts(p)) > 0 }) {
				if j.over() {
					return ended(fmt.Sprintf("before process %d's store injection began", p))
				}
				return false, whyNotFired, fmt.Sprintf("no count line of process %d's store injection within %v", p, ackWait)
			}
		}
		from := j.mark()
		j.setRule(rule + "\n")
		// Applied once the process says the rule is in force (its
		// netfault record), not when the file was written.
		acked := j.waitUntil(ackWait, func() bool {
			for _, l := range j.lines[from:] {
				if n, ok := l.rec.Int("proc"); ok && n == p && l.msg() == msgRuleInForce && l.rec["rule"] != "none" {
					return true
				}
			}
			return false
		})
		if !acked {
			j.setRule("")
			if j.over() {
				return ended(fmt.Sprintf("before process %d put %q in force", p, rule))
			}
			return false, whyNoAck, fmt.Sprintf("process %d, within %v of %q", p, ackWait, rule)
		}
		j.note("applied %s: netfault %q", f, rule)
		if f.Kind == Partition || f.Kind == PartitionWriter {
			acked := j.mark()
			held, short, lost := j.holdLost(f.Dur, s.nextAt(i), p)
			j.setRule("")
			j.note("healed %s", f)
			detail := fmt.Sprintf("netfault %q in force for %v%s", rule, held.Round(time.Millisecond), short)
			if f.Kind == PartitionWriter && lost {
				return j.storedAfter(f, p, acked, detail)
			}
			return j.lostOrNot(f, p, lost, detail)
		}
		held, short := j.hold(f.Dur, s.nextAt(i), -1) // the fault's own duration, in real time
		j.setRule("")
		j.note("healed %s", f)
		return true, "", fmt.Sprintf("netfault %q in force for %v%s", rule, held.Round(time.Millisecond), short)
	case HostLoss:
		host := fmt.Sprintf("host%d", f.Rank/2)
		var hit []int
		for _, p := range j.pids.OnHost(host) {
			if _, ok := j.signal(p, syscall.SIGKILL); ok {
				hit = append(hit, p)
			}
		}
		slices.Sort(hit)
		if len(hit) == 0 {
			return gone("any process of " + host)
		}
		j.note("applied %s: SIGKILL processes %v of %s", f, hit, host)
		return true, "", fmt.Sprintf("SIGKILL processes %v of %s", hit, host)
	}
	return false, "unknown kind", string(f.Kind)
}

// recoveryTimes measures, for every fault the harness applied that cost a
// process, the time from the fault to the job's next progress after the
// recovery: the first K-means iteration, or TeraSort progress line, of
// the holder of rank 0 after its recovery line (progressRE); without such
// a line, the last "recovered" line of the epochs that followed.
func recoveryTimes(j *job) []time.Duration {
	j.run.Lock()
	defer j.run.Unlock()
	var out []time.Duration
	for i, l := range j.lines {
		if !strings.HasPrefix(l.text, "chaos: applied ") || strings.Contains(l.text, "pause-short") ||
			strings.Contains(l.text, "slow-link") || strings.Contains(l.text, "lossy-link") || strings.Contains(l.text, "kill-spare") {
			continue
		}
		if strings.Contains(l.text, "then, in the recovery") {
			continue // the second kill of kill-in-recovery joins the first's recovery
		}
		if f, _, ok := strings.Cut(strings.TrimPrefix(l.text, "chaos: applied "), ": "); ok &&
			slices.ContainsFunc(j.lines[i:], func(x line) bool { return strings.HasPrefix(x.text, "chaos: ridden out "+f+": ") }) {
			continue // it cost no process: no recovery of its own
		}
		if k := slices.IndexFunc(j.lines[i:], func(x line) bool { return recoveryRE.MatchString(x.text) }); k >= 0 {
			if it, ok := j.findAfter(i+k, progressRE); ok {
				out = append(out, it.at.Sub(l.at))
			}
			continue
		}
		var last time.Time
		for _, x := range j.lines[i:] {
			if x.msg() == msgRecovered {
				last = x.at
			}
		}
		if !last.IsZero() {
			out = append(out, last.Sub(l.at))
		}
	}
	return out
}

func (s *summary) add(sc Schedule, res Result, ref string, viol []string, left []int, recs []time.Duration, j *job) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.schedules++
	s.byWorkload[sc.Workload]++
	s.recoveries += Epochs(res.Lines) - 1
	for _, r := range recs {
		s.recMS = append(s.recMS, float64(r)/float64(time.Millisecond))
	}
	if res.Answer != "" && res.Answer != ref {
		s.wrong++
	}
	if res.Hung {
		s.hangs++
	}
	if len(left) > 0 {
		s.leftovers++
	}
	if sc.Expect == Exhaust {
		s.exhausted++
	}
	s.declared += DeclaredFailed(res.Lines)
	if sc.Expect == Succeed && res.Code == ExitSparesExhausted && len(viol) == 0 {
		s.overrun++
	}
	if sc.Expect == ResumeOrRefuse && res.Answer == ref {
		s.resumed++
	}
	if sc.Respawn && j != nil {
		r := j.refillOf(sc)
		s.respawnRuns++
		if r.kills > sc.Spares {
			s.refilled++
		}
		s.respawns += len(r.respawned)
		s.joins += r.joined
		s.joinersPromoted += len(r.promoted)
	}
	if len(viol) > 0 {
		s.violations++
		s.failedRuns = append(s.failedRuns, fmt.Sprintf("seed %d: %s", sc.Seed, viol[0]))
	}
}

// cover counts the faults of schedule sc in the sweep's coverage, and
// logs what became of each: j's outcomes (j nil, or a fault without one:
// the schedule stopped before the harness got to it).
func (s *summary) cover(t *testing.T, sc Schedule, j *job) {
	var outs []outcome
	if j != nil {
		j.run.Lock()
		outs = slices.Clone(j.outcomes)
		j.run.Unlock()
	}
	var b strings.Builder
	for i, f := range sc.Faults {
		o := outcome{why: whyNotRun}
		if i < len(outs) && outs[i].set {
			o = outs[i]
		}
		s.cov.add(f.Kind, o.applied, o.why)
		state := "applied"
		if !o.applied {
			state = "NOT applied: " + o.why
		}
		if o.detail != "" {
			state += " (" + o.detail + ")"
		}
		fmt.Fprintf(&b, "\n  fault %d: %s: %s", i+1, f, state)
	}
	t.Logf("faults:%s", b.String())
}

func (s *summary) table() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "| schedules | K-means | TeraSort | recoveries | recovery median | recovery p99 | wrong answers | hangs | leftover processes | schedules with violations |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|---|---|\n")
	fmt.Fprintf(&b, "| %d | %d | %d | %d | %.0f ms | %.0f ms | %d | %d | %d | %d |\n\n",
		s.schedules, s.byWorkload[KMeans], s.byWorkload[TeraSort], s.recoveries,
		stats.Percentile(s.recMS, 50), stats.Percentile(s.recMS, 99), s.wrong, s.hangs, s.leftovers, s.violations)
	b.WriteString(s.cov.table())
	b.WriteString("\n")
	fmt.Fprintf(&b, "%d schedules drew more losses than spares (expected: exit 75, or without spares 137, 77 or 74); %d disk-corruption resumes gave the reference result.\n", s.exhausted, s.resumed)
	fmt.Fprintf(&b, "%d processes were declared failed in all; %d survivable schedules ended with exit 75 because more processes were declared failed than they had spares (heartbeats starved on a busy machine).\n", s.declared, s.overrun)
	if s.respawnRuns > 0 {
		fmt.Fprintf(&b, "%d respawn-spaced schedules (gaspirun --respawn, %d spare): %d lost more processes than their spares and had their pool refilled; %d replacements were started, %d joined the job, %d took a rank.\n",
			s.respawnRuns, respawnSpares, s.refilled, s.respawns, s.joins, s.joinersPromoted)
	}
	for _, f := range s.failedRuns {
		fmt.Fprintf(&b, "- %s\n", f)
	}
	return b.String()
}

// checkRefill fails a sweep whose respawn schedules never lost more
// processes than their spares with the pool refilled (untestedRefill).
func (s *summary) checkRefill(t *testing.T) {
	t.Helper()
	if msg := s.untestedRefill(); msg != "" {
		t.Error(msg)
	}
}

// untestedRefill says why the sweep did not test respawning, "" if it
// did or ran no respawn schedule: each of their kills may have applied
// (the per-kind check passes), and yet no replacement served one.
func (s *summary) untestedRefill() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.respawnRuns == 0 || s.refilled > 0 {
		return ""
	}
	return fmt.Sprintf("%d respawn-spaced schedules ran and none lost more processes than its spares with its pool refilled (replacements started %d, joined %d): this sweep did not test respawning",
		s.respawnRuns, s.respawns, s.joins)
}

func tail(lines []string, n int) string {
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// tsProgram is the TeraSort job of the chaos input.
func tsProgram(in, out string, mirrors int) []string {
	return []string{bins.terasort, "sort", "--in", in, "--out", out, "--ckpt-records", strconv.Itoa(tsRecords() / 40),
		"--mirrors", strconv.Itoa(mirrors)}
}

// tsRecordsOf is the size of s's TeraSort input: tsRecords, or four times
// that for a respawn schedule. The harness waits for each replacement to
// join before the next spaced kill, and a job of tsRecords (a second on
// an idle machine) ended during those waits in half the schedules, its
// later kills never applied.
func tsRecordsOf(s Schedule) int {
	if s.Respawn {
		return 4 * tsRecords()
	}
	return tsRecords()
}

// references holds the failure-free answers, computed once per test run:
// K-means's from a job without faults, TeraSort's from its input.
type references struct {
	mu sync.Mutex
	m  map[string]string // by workload (and TeraSort's input size)
}

func (r *references) get(t *testing.T, s Schedule) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[string]string{}
	}
	w := s.Workload
	key := string(w)
	if w == TeraSort {
		key = fmt.Sprintf("%s of %d records", w, tsRecordsOf(s))
	}
	if a, ok := r.m[key]; ok {
		return a
	}
	var a string
	switch w {
	case KMeans:
		_, res := run(t, spec{ranks: Ranks, program: append([]string{bins.kmeans}, kmWorkload().args()...)})
		if res.Code != 0 || res.Answer == "" {
			t.Fatalf("failure-free K-means reference failed (exit %d):\n%s", res.Code, tail(res.Lines, 30))
		}
		a = res.Answer
	case TeraSort:
		a = sumInput(t, tsInput(t, tsRecordsOf(s)))
	}
	t.Logf("reference %s: %s", key, a)
	r.m[key] = a
	return a
}

var tsIn struct {
	mu   sync.Mutex
	dirs map[int]string // by records
}

// tsInput generates a TeraSort input of records once per test binary.
func tsInput(t *testing.T, records int) string {
	tsIn.mu.Lock()
	defer tsIn.mu.Unlock()
	if dir, ok := tsIn.dirs[records]; ok {
		return dir
	}
	dir, err := os.MkdirTemp("", "chaos-terasort-")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := runTool(bins.terasort, "gen", "--records", strconv.Itoa(records), "--out", dir, "--quiet"); err != nil {
		os.RemoveAll(dir)
		t.Fatalf("terasort gen: %v\n%s", err, out)
	}
	if tsIn.dirs == nil {
		tsIn.dirs = map[int]string{}
	}
	tsIn.dirs[records] = dir
	return dir
}

// removeTSInput removes the TeraSort inputs once TestChaos, their only
// user, is over: 200 MB without the race detector (800 MB more with a
// respawn schedule), left behind by every run otherwise.
func removeTSInput() {
	tsIn.mu.Lock()
	defer tsIn.mu.Unlock()
	for _, dir := range tsIn.dirs {
		os.RemoveAll(dir)
	}
	tsIn.dirs = nil
}

// sumInput is the input's count and checksum, as validate prints them.
func sumInput(t *testing.T, dir string) string {
	out, err := runTool(bins.terasort, "sum", dir)
	if err != nil {
		t.Fatalf("terasort sum: %v\n%s", err, out)
	}
	return lastLine(out)
}

// validate checks the sorted output (its _SUCCESS marker, which must list
// exactly the part files, and their order) and returns its count and
// checksum line; a missing marker or a disorder gives a line that cannot
// equal the input's.
func validate(t *testing.T, dir string) string {
	out, err := runTool(bins.terasort, "validate", dir)
	if err != nil {
		return "validate failed: " + lastLine(out)
	}
	return lastLine(out)
}

func lastLine(s string) string {
	s = strings.TrimRight(s, "\n")
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// diskSchedule runs the disk-level scenario: a job with --ckpt-dir and no
// spares is killed at the fault's iteration (it fails, exit 137), one rank
// file of its newest complete disk checkpoint is corrupted or truncated,
// and gaspirun --resume runs the job again without faults. The result is
// the resumed run's.
func diskSchedule(t *testing.T, s Schedule) (*job, Result) {
	f := s.Faults[0]
	w := kmWorkload()
	dir := t.TempDir()
	prog := append([]string{bins.kmeans}, w.args()...)
	prog = append(prog, "--ckpt-dir", dir)
	// The kill comes late enough for two disk checkpoints, so that an
	// older one exists to fall back to.
	at := max(f.At, 3*w.ckptEvery+1)
	killed := fmt.Sprintf("the first run ended before iteration %d, unkilled", at)
	_, first := run(t, spec{ranks: Ranks, program: prog, apply: func(j *job) {
		if reached(j, s, at) {
			if _, ok := j.signal(j.holder(f.Rank), syscall.SIGKILL); ok {
				killed = fmt.Sprintf("the first run killed at iteration %d", at)
			}
		}
	}})
	if first.Code != ExitKilledNoSpares {
		t.Logf("the killed run exited %d (want %d); resuming anyway", first.Code, ExitKilledNoSpares)
	}
	newest, err := newestCheckpoint(dir)
	if err != nil {
		t.Fatalf("disk level after the kill: %v", err)
	}
	victim := filepath.Join(newest, fmt.Sprintf("rank-%d.snap", f.Rank))
	st, err := os.Stat(victim)
	if err != nil {
		t.Fatalf("disk level: %v", err)
	}
	if f.Param == 1 {
		err = os.Truncate(victim, st.Size()/2)
		t.Logf("chaos: truncated %s from %d to %d bytes", victim, st.Size(), st.Size()/2)
	} else {
		var fh *os.File
		if fh, err = os.OpenFile(victim, os.O_RDWR, 0); err == nil {
			b := make([]byte, 8)
			off := st.Size() / 2
			if _, err = fh.ReadAt(b, off); err == nil {
				for i := range b {
					b[i] ^= 0x5a
				}
				_, err = fh.WriteAt(b, off)
			}
			fh.Close()
		}
		t.Logf("chaos: corrupted 8 bytes at offset %d of %s", st.Size()/2, victim)
	}
	if err != nil {
		t.Fatalf("damage %s: %v", victim, err)
	}
	j, res := run(t, spec{ranks: Ranks, launcher: []string{"--resume", dir}, program: prog, faults: 1})
	j.note("applied %s", f)
	// The fault is the damage to the checkpoint the resumed run reads.
	j.decide(0, f, true, "", fmt.Sprintf("%s; %s damaged", killed, filepath.Base(victim)))
	return j, res
}

// newestCheckpoint returns the newest complete checkpoint directory (one
// with a manifest) under dir.
func newestCheckpoint(dir string) (string, error) {
	ms, err := filepath.Glob(filepath.Join(dir, "ckpt-*", "manifest.json"))
	if err != nil || len(ms) == 0 {
		return "", fmt.Errorf("no complete checkpoint in %s", dir)
	}
	best, bestID := "", -1
	for _, m := range ms {
		d := filepath.Dir(m)
		id, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), "ckpt-"))
		if err == nil && id > bestID {
			best, bestID = d, id
		}
	}
	return best, nil
}

// runTool runs a command to completion and returns its standard output,
// with its standard error appended when it fails.
func runTool(bin string, args ...string) (string, error) {
	cmd := exec.Command(bin, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out) + stderr.String(), err
	}
	return string(out), nil
}

// keep writes the whole output of a failed schedule to -chaos.keep's
// directory, when it is set.
func keep(t *testing.T, name, schedule string, lines []string) {
	if *flagKeep == "" {
		return
	}
	p := filepath.Join(*flagKeep, name)
	if err := os.WriteFile(p, []byte(schedule+"\n"+strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Errorf("-chaos.keep: %v", err)
	} else {
		t.Logf("whole output: %s", p)
	}
}
