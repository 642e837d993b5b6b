package launch

import (
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/gaspigo/gaspigo/internal/bootstrap"
)

var (
	ok     = exitInfo{Code: 0}
	code3  = exitInfo{Code: 3}
	killed = exitInfo{Code: -1, Signal: syscall.SIGKILL}
	termed = exitInfo{Code: -1, Signal: syscall.SIGTERM}
	role   = func(p, r int, e uint64) bootstrap.Report {
		return bootstrap.Report{Proc: uint32(p), Kind: bootstrap.KindRole, Rank: r, Epoch: e}
	}
	actNames = map[actKind]string{actNotice: "notice", actRelabel: "relabel", actTeardown: "teardown", actStop: "stop", actKill: "kill", actEvent: "event", actRespawn: "respawn", actHostFailed: "hostfailed"}
)

// trace renders actions compactly: "notice!:text" (important), "notice:text",
// "relabel:2=r1", "teardown", "stop", "kill".
func trace(acts []action) []string {
	var out []string
	for _, a := range acts {
		s := actNames[a.kind]
		switch a.kind {
		case actNotice:
			if a.important {
				s += "!"
			}
			s += ":" + a.text
		case actRelabel:
			s += ":" + string(rune('0'+a.proc)) + "=" + a.label
		case actEvent:
			s += ":[" + a.label + "] " + a.text
		case actRespawn:
			s += fmt.Sprintf(":%d=%s", a.proc, a.label)
		case actHostFailed:
			s += ":" + a.label
		}
		out = append(out, s)
	}
	return out
}

func expect(t *testing.T, step string, acts []action, want ...string) {
	t.Helper()
	got := trace(acts)
	if len(got) != len(want) {
		t.Fatalf("%s: actions %q, want %d matching %q", step, got, len(want), want)
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Fatalf("%s: action %d = %q, want prefix %q (all: %q)", step, i, got[i], want[i], got)
		}
	}
}

func TestTrackerAllRanksFinishStopsSpares(t *testing.T) {
	tr := newTracker(2, 3, DeathContinue)
	tr.onFormed()
	if l := []string{tr.label(0), tr.label(1), tr.label(2)}; l[0] != "r0" || l[1] != "r1" || l[2] != "s2" {
		t.Fatalf("labels %v", l)
	}
	expect(t, "rank 0 exits 0", tr.onExit(0, ok))
	expect(t, "rank 1 exits 0", tr.onExit(1, ok), "stop")
	if s := tr.stopRemaining(); s != "all 2 ranks finished; stopping the 1 remaining process (idle spares)" {
		t.Fatalf("stopRemaining: %q", s)
	}
	expect(t, "spare stopped", tr.onExit(2, termed))
	if !tr.done() || tr.code != 0 || tr.reason != "" {
		t.Fatalf("done=%v code=%d reason=%q", tr.done(), tr.code, tr.reason)
	}
	if s := tr.summary(); s != "3 processes (2 ranks + 1 spare): 2 exited 0, 1 stopped by gaspirun" {
		t.Fatalf("summary %q", s)
	}
}

func TestTrackerNonZeroExitAborts(t *testing.T) {
	tr := newTracker(3, 3, DeathContinue)
	tr.onFormed()
	expect(t, "rank 1 exits 3", tr.onExit(1, code3),
		"notice!:job failed: rank 1 (process 1) exited with code 3; stopping the other 2 processes", "teardown")
	expect(t, "others stopped", tr.onExit(0, termed))
	expect(t, "a stopped process exiting non-zero changes nothing", tr.onExit(2, exitInfo{Code: 1}))
	if tr.code != 3 || !strings.Contains(tr.reason, "rank 1 (process 1) exited with code 3") {
		t.Fatalf("code=%d reason=%q", tr.code, tr.reason)
	}
	if s := tr.summary(); s != "3 processes (3 ranks + 0 spares): 1 exited with code 3, 2 stopped by gaspirun" {
		t.Fatalf("summary %q", s)
	}
}

func TestTrackerDeathContinuesAndSpareTakesOver(t *testing.T) {
	tr := newTracker(2, 3, DeathContinue)
	tr.onFormed()
	expect(t, "rank 1 killed", tr.onExit(1, killed),
		"notice!:rank 1 (process 1) was killed by signal 9 (SIGKILL); the job continues")
	expect(t, "promotion", tr.onReport(role(2, 1, 1)),
		"relabel:2=r1", "notice:spare process 2 now holds rank 1 (epoch 1)")
	expect(t, "rank 0 done", tr.onExit(0, ok))
	expect(t, "new rank 1 done", tr.onExit(2, ok))
	if tr.phase != finishing || tr.code != 0 || tr.label(2) != "r1" {
		t.Fatalf("phase=%v code=%d label=%s", tr.phase, tr.code, tr.label(2))
	}
}

func TestTrackerDeathAbortsWithoutSpares(t *testing.T) {
	tr := newTracker(2, 2, DeathAbort)
	tr.onFormed()
	expect(t, "rank 0 killed", tr.onExit(0, killed),
		"notice!:job failed: rank 0 (process 0) was killed by signal 9 (SIGKILL); stopping the other 1 process", "teardown")
	if tr.code != 128+9 {
		t.Fatalf("code %d, want 137", tr.code)
	}
}

func TestTrackerSpareDeath(t *testing.T) {
	tr := newTracker(1, 2, DeathContinue)
	tr.onFormed()
	expect(t, "spare killed", tr.onExit(1, killed),
		"notice!:spare process 1 was killed by signal 9 (SIGKILL); the job continues with one spare fewer")
	expect(t, "rank done", tr.onExit(0, ok))
	if tr.phase != finishing || tr.code != 0 {
		t.Fatalf("phase=%v code=%d", tr.phase, tr.code)
	}
}

func TestTrackerLostRankFailsWhenNobodyTakesOver(t *testing.T) {
	tr := newTracker(2, 3, DeathContinue)
	tr.onFormed()
	tr.onExit(1, killed)
	expect(t, "rank 0 done", tr.onExit(0, ok))
	expect(t, "spare dies too", tr.onExit(2, killed),
		"notice!:spare process 2 was killed", "notice!:job failed: rank 1 lost its process and no process took over")
	if tr.code != ExitLost {
		t.Fatalf("code %d, want %d", tr.code, ExitLost)
	}
}

func TestTrackerSilentPromotionIsAccepted(t *testing.T) {
	tr := newTracker(2, 3, DeathContinue)
	tr.onFormed()
	tr.onExit(1, killed)
	expect(t, "spare finishes without reporting", tr.onExit(2, ok))
	expect(t, "rank 0 done", tr.onExit(0, ok),
		"notice:rank 1 lost its process, and 1 spare finished without reporting a promotion")
	if tr.phase != finishing || tr.code != 0 {
		t.Fatalf("phase=%v code=%d", tr.phase, tr.code)
	}
}

func TestTrackerRoleReportAfterExit(t *testing.T) {
	// The report arrives after the promoted spare's exit was handled.
	tr := newTracker(2, 3, DeathContinue)
	tr.onFormed()
	tr.onExit(1, killed)
	tr.onExit(2, ok)
	expect(t, "late role", tr.onReport(role(2, 1, 1)), "relabel:2=r1", "notice:spare process 2 now holds rank 1")
	if tr.spareOK != 0 {
		t.Fatalf("spareOK = %d, want 0", tr.spareOK)
	}
	expect(t, "rank 0 done", tr.onExit(0, ok))
	if tr.phase != finishing || tr.code != 0 {
		t.Fatalf("phase=%v code=%d", tr.phase, tr.code)
	}
}

func TestTrackerReplacedProcessIsFenced(t *testing.T) {
	// Rank 1's process was declared failed (say it was paused) and a spare
	// took over; when it wakes up and exits with an error, the job goes on.
	tr := newTracker(2, 3, DeathContinue)
	tr.onFormed()
	expect(t, "promotion", tr.onReport(role(2, 1, 4)),
		"relabel:1=p1", "notice:process 1 no longer holds rank 1", "relabel:2=r1", "notice:spare process 2 now holds rank 1 (epoch 4)")
	expect(t, "fenced exit", tr.onExit(1, exitInfo{Code: 5}),
		"notice:process 1 (formerly rank 1) exited with code 5 after it was replaced; ignored, the job continues")
	expect(t, "stale role", tr.onReport(role(1, 1, 3)))
	expect(t, "rank 0", tr.onExit(0, ok))
	expect(t, "rank 1", tr.onExit(2, ok))
	if tr.phase != finishing || tr.code != 0 {
		t.Fatalf("phase=%v code=%d", tr.phase, tr.code)
	}
}

func TestTrackerTimeoutAndReports(t *testing.T) {
	tr := newTracker(1, 2, DeathContinue)
	tr.onFormed()
	expect(t, "event", tr.onReport(bootstrap.Report{Proc: 0, Kind: bootstrap.KindEvent, Text: "restored\ncheckpoint 3"}),
		"event:[r0] restored checkpoint 3")
	expect(t, "error", tr.onReport(bootstrap.Report{Proc: 1, Kind: bootstrap.KindError, Text: "boom"}),
		"notice!:spare process 1 reported an error: boom")
	expect(t, "out of range", tr.onReport(role(7, 0, 1)))
	expect(t, "rank out of range", tr.onReport(role(1, 5, 1)))
	expect(t, "timeout", tr.onAbort(ExitTimeout, "timeout"), "notice!:job failed: timeout; stopping the other 2 processes", "teardown")
	expect(t, "second signal", tr.onAbort(ExitInterrupted, "interrupted"), "kill")
	if tr.code != ExitTimeout {
		t.Fatalf("code %d", tr.code)
	}
}

// A holder killed, its replacement reported before its exit: told as the
// rank's death when the exit came right after the report.
func TestTrackerReplacedJustBeforeItsDeath(t *testing.T) {
	tr := newTracker(2, 3, DeathContinue)
	tr.onFormed()
	tr.onReport(role(2, 1, 2))
	tr.recent[1] = true // the driver: its exit came within ExitSettle of the report
	expect(t, "the death that caused the replacement", tr.onExit(1, killed),
		"notice!:rank 1 (process 1) was killed by signal 9 (SIGKILL); the job continues (the runtime recovers the rank)")
}

// A replaced holder's death judged only after its rank's new holder and
// the others finished (its exit held back for ExitSettle): still told.
func TestTrackerReplacedDeathAfterTheJobFinished(t *testing.T) {
	tr := newTracker(2, 3, DeathContinue)
	tr.onFormed()
	tr.onReport(role(2, 1, 1))
	expect(t, "rank 0", tr.onExit(0, ok))
	expect(t, "rank 1's new holder", tr.onExit(2, ok), "stop")
	if tr.phase != finishing {
		t.Fatalf("phase %v, want finishing", tr.phase)
	}
	tr.recent[1] = true
	expect(t, "the replaced holder's loss", tr.onExit(1, killed),
		"notice!:rank 1 (process 1) was killed by signal 9 (SIGKILL); the job continues (the runtime recovers the rank)")
}

// Without spares gaspirun ends the job at the first death, unless the
// processes said that the job shrinks; an explicit policy stays.
func TestTrackerShrinkKeepsTheJobGoing(t *testing.T) {
	shrink := bootstrap.Report{Proc: 0, Kind: bootstrap.KindShrink, Rank: -1}
	tr := newTracker(2, 2, DeathAbort)
	tr.autoAbort = true
	tr.onFormed()
	expect(t, "shrink", tr.onReport(shrink), "notice:the job shrinks when a rank is lost: a death does not end it")
	expect(t, "again", tr.onReport(shrink))
	expect(t, "rank 1 killed", tr.onExit(1, killed),
		"notice!:rank 1 (process 1) was killed by signal 9 (SIGKILL); the job continues (the runtime recovers the rank)")
	if tr.phase != running {
		t.Fatalf("phase %v after a death in a job that shrinks", tr.phase)
	}
	tr = newTracker(2, 2, DeathAbort) // --on-death abort given
	tr.onFormed()
	expect(t, "shrink under an explicit abort", tr.onReport(shrink))
	tr.onExit(1, killed)
	if tr.phase != aborting {
		t.Fatalf("phase %v: an explicit --on-death abort must still abort", tr.phase)
	}
}

func TestTrackerReplacedProcessKilled(t *testing.T) {
	tr := newTracker(2, 3, DeathAbort)
	tr.onFormed()
	tr.onReport(role(2, 1, 1))
	expect(t, "replaced process killed", tr.onExit(1, killed),
		"notice!:process 1 (formerly rank 1) was killed by signal 9 (SIGKILL) after it was replaced; the job continues")
	if tr.phase != running {
		t.Fatalf("phase %v: a replaced process's death must not abort", tr.phase)
	}
}

// A process that exits 77 learnt it was replaced (fenced) before its
// replacement's role report arrived: with spares the job goes on, as for a
// killed process; without them it is a failure like any other exit code.
func TestTrackerFencedExitBeforeReport(t *testing.T) {
	fenced := exitInfo{Code: ExitFenced}
	tr := newTracker(2, 3, DeathContinue)
	tr.onFormed()
	expect(t, "rank 1 fenced", tr.onExit(1, fenced),
		"notice!:rank 1 (process 1) exited with code 77; the job continues (the runtime recovers the rank)")
	expect(t, "promotion", tr.onReport(role(2, 1, 1)),
		"relabel:2=r1", "notice:spare process 2 now holds rank 1 (epoch 1)")
	expect(t, "rank 0 done", tr.onExit(0, ok))
	expect(t, "new rank 1 done", tr.onExit(2, ok))
	if tr.phase != finishing || tr.code != 0 {
		t.Fatalf("phase=%v code=%d", tr.phase, tr.code)
	}
	tr = newTracker(2, 2, DeathAbort)
	tr.onFormed()
	expect(t, "fenced without spares", tr.onExit(1, fenced),
		"notice!:job failed: rank 1 (process 1) exited with code 77; stopping the other 1 process", "teardown")
}

// A process that exits 74 gave up cut off from the membership: with
// spares it is judged like 77 (replaced, or about to be) and a recovered
// job exits 0; a rank whose only holder exits 74 with nobody to take over
// fails the job with 74; without spares it aborts the job at once.
func TestTrackerCutOffExit(t *testing.T) {
	cut := exitInfo{Code: ExitCutOff}
	tr := newTracker(2, 3, DeathContinue)
	tr.onFormed()
	expect(t, "rank 1 cut off", tr.onExit(1, cut),
		"notice!:rank 1 (process 1) exited with code 74; the job continues (the runtime recovers the rank)")
	expect(t, "promotion", tr.onReport(role(2, 1, 2)),
		"relabel:2=r1", "notice:spare process 2 now holds rank 1 (epoch 2)")
	expect(t, "rank 0 done", tr.onExit(0, ok))
	expect(t, "new rank 1 done", tr.onExit(2, ok))
	if tr.phase != finishing || tr.code != 0 {
		t.Fatalf("recovered job: phase=%v code=%d, want finishing and 0", tr.phase, tr.code)
	}

	// Replaced first (the spare's report came), then cut off: ignored.
	tr = newTracker(2, 3, DeathContinue)
	tr.onFormed()
	tr.onReport(role(2, 1, 2))
	expect(t, "replaced process cut off", tr.onExit(1, cut),
		"notice:process 1 (formerly rank 1) exited with code 74 after it was replaced; ignored")
	tr.onExit(0, ok)
	tr.onExit(2, ok)
	if tr.code != 0 {
		t.Fatalf("code %d, want 0", tr.code)
	}

	// Nobody takes over: the job fails with 74.
	tr = newTracker(2, 3, DeathContinue)
	tr.onFormed()
	tr.onExit(1, cut)
	tr.onExit(0, ok)
	expect(t, "the idle spare cut off too", tr.onExit(2, cut),
		"notice!:spare process 2 exited with code 74; the job continues with one spare fewer",
		"notice!:job failed: rank 1's process was cut off from the membership (exit 74) and no process took over")
	if tr.code != ExitCutOff {
		t.Fatalf("code %d, want %d", tr.code, ExitCutOff)
	}

	tr = newTracker(2, 2, DeathAbort)
	tr.onFormed()
	expect(t, "cut off without spares", tr.onExit(1, cut),
		"notice!:job failed: rank 1 (process 1) exited with code 74; stopping the other 1 process", "teardown")
	if tr.code != ExitCutOff {
		t.Fatalf("code %d, want %d", tr.code, ExitCutOff)
	}
}

// A rank the membership left vacant (a job that shrinks) is not lost:
// once the others finish, the job succeeds, whether the vacant report
// comes before or after the death is seen.
func TestTrackerVacantRankIsDone(t *testing.T) {
	for _, reportFirst := range []bool{false, true} {
		tr := newTracker(3, 3, DeathContinue)
		tr.onFormed()
		vacant := bootstrap.Report{Proc: 0, Kind: bootstrap.KindVacant, Rank: 1, Epoch: 2}
		if reportFirst {
			expect(t, "vacant report", tr.onReport(vacant), "notice:rank 1 is vacant (epoch 2)")
		}
		expect(t, "rank 1 killed", tr.onExit(1, killed), "notice!:rank 1 (process 1) was killed")
		if !reportFirst {
			expect(t, "vacant report", tr.onReport(vacant), "notice:rank 1 is vacant (epoch 2)")
		}
		expect(t, "vacant again", tr.onReport(vacant))
		expect(t, "rank 0 exits 0", tr.onExit(0, ok))
		expect(t, "rank 2 exits 0", tr.onExit(2, ok))
		if tr.phase != finishing || tr.code != 0 {
			t.Fatalf("report first %v: phase %d code %d (%s), want a finished job", reportFirst, tr.phase, tr.code, tr.reason)
		}
	}
}

func TestTrackerExitBeforeFormingAborts(t *testing.T) {
	// Spares cannot help a job whose table never completes: the others
	// would wait at the rendezvous for ever.
	tr := newTracker(2, 3, DeathContinue)
	tr.onRegistered(0)
	expect(t, "spare killed before registering", tr.onExit(2, killed),
		"notice!:job failed: spare process 2 was killed by signal 9 (SIGKILL) before every process had registered with the rendezvous, so the job cannot start; stopping the other 2 processes", "teardown")
	if tr.code != 137 {
		t.Fatalf("code %d, want 137", tr.code)
	}
	// Nobody registered yet: a plain failure, judged as mpirun would.
	tr = newTracker(2, 3, DeathContinue)
	expect(t, "spare killed, nobody registered", tr.onExit(2, killed),
		"notice!:job failed: spare process 2 was killed by signal 9 (SIGKILL); stopping the other 2 processes", "teardown")
	if tr.code != 137 {
		t.Fatalf("code %d, want 137", tr.code)
	}
	tr = newTracker(1, 2, DeathContinue)
	tr.hosts = []string{"node1", "node2"}
	tr.onRegistered(0)
	expect(t, "registered, then exit 0 before forming", tr.onExit(0, ok),
		"notice!:job failed: rank 0 (process 0 on node1) exited with code 0 before every process had registered with the rendezvous, so the job cannot start", "teardown")
	if tr.code != ExitLost {
		t.Fatalf("code %d, want %d", tr.code, ExitLost)
	}
	tr = newTracker(2, 2, DeathContinue)
	tr.hosts = []string{"node1", "node2"}
	unreachable := exitInfo{Code: -1, Signal: syscall.SIGKILL, LostCode: 255, Lost: "ssh to node2 exited with code 255 without the process's exit status"}
	expect(t, "ssh fails at start", tr.onExit(1, unreachable),
		"notice!:job failed: rank 1 (process 1 on node2) was lost: ssh to node2 exited with code 255 without the process's exit status; stopping", "teardown")
	if tr.code != 255 {
		t.Fatalf("code %d, want 255", tr.code)
	}
}

// Rule (cmd/gaspirun, Programs that never join): processes that all exit
// 0 without registering are a plain job, which exits 0; a failing one
// fails it with its code, as under mpirun.
func TestTrackerPlainJob(t *testing.T) {
	tr := newTracker(2, 3, DeathContinue)
	expect(t, "process 1 exits 0", tr.onExit(1, ok))
	if !tr.awaitingRegistration() {
		t.Fatal("not watching for a registration while others run")
	}
	expect(t, "process 0 exits 0", tr.onExit(0, ok))
	expect(t, "spare exits 0", tr.onExit(2, ok))
	if !tr.done() || tr.phase != finishing || tr.code != 0 || tr.reason != "" || tr.awaitingRegistration() {
		t.Fatalf("done=%v phase=%d code=%d reason=%q", tr.done(), tr.phase, tr.code, tr.reason)
	}
	if s := tr.summary(); s != "3 processes (2 ranks + 1 spare): 3 exited 0" {
		t.Fatalf("summary %q", s)
	}

	tr = newTracker(3, 3, DeathAbort)
	expect(t, "process 0 exits 0", tr.onExit(0, ok))
	expect(t, "process 2 exits 3", tr.onExit(2, code3),
		"notice!:job failed: rank 2 (process 2) exited with code 3; stopping the other 1 process", "teardown")
	if tr.code != 3 {
		t.Fatalf("code %d, want 3", tr.code)
	}
}

// Rule (cmd/gaspirun, Programs that never join): once any process has
// registered, a process that exited 0 without registering fails the job,
// whichever was seen first.
func TestTrackerPlainProcessInAJob(t *testing.T) {
	want := "notice!:job failed: rank 0 (process 0) exited with code 0 without registering with the rendezvous, but rank 1 (process 1) registered, so the job cannot start"
	tr := newTracker(3, 3, DeathContinue)
	expect(t, "plain exit first", tr.onExit(0, ok))
	expect(t, "then a registration", tr.onRegistered(1), want, "teardown")
	if tr.code != ExitLost {
		t.Fatalf("code %d, want %d", tr.code, ExitLost)
	}

	tr = newTracker(3, 3, DeathContinue)
	expect(t, "registration first", tr.onRegistered(1))
	expect(t, "then a plain exit", tr.onExit(0, ok), want, "teardown")

	// The registration of the exited process itself arrives late (its
	// disconnection report after its exit).
	tr = newTracker(2, 2, DeathContinue)
	expect(t, "exit judged plain", tr.onExit(0, ok))
	expect(t, "its registration seen", tr.onRegistered(0),
		"notice!:job failed: rank 0 (process 0) exited with code 0 before every process had registered", "teardown")

	// A registration after the job formed changes nothing.
	tr = newTracker(2, 2, DeathContinue)
	tr.onFormed()
	expect(t, "formed", tr.onRegistered(0))
	if tr.awaitingRegistration() {
		t.Fatal("watching for registrations in a formed job")
	}
}

func TestTrackerLostHostIsADeath(t *testing.T) {
	tr := newTracker(2, 3, DeathContinue)
	tr.hosts = []string{"a", "b", "c"}
	tr.onFormed()
	lost := exitInfo{Code: -1, Signal: syscall.SIGKILL, LostCode: 255, Lost: "ssh to b exited with code 255 without the process's exit status"}
	expect(t, "rank 1's host lost", tr.onExit(1, lost),
		"notice!:rank 1 (process 1 on b) was lost: ssh to b exited with code 255 without the process's exit status; the job continues (the runtime recovers the rank)")
	expect(t, "promotion", tr.onReport(role(2, 1, 1)),
		"relabel:2=r1", "notice:spare process 2 on c now holds rank 1 (epoch 1)")
	expect(t, "rank 0 done", tr.onExit(0, ok))
	expect(t, "rank 1 done", tr.onExit(2, ok))
	if tr.phase != finishing || tr.code != 0 {
		t.Fatalf("phase=%v code=%d", tr.phase, tr.code)
	}
	if s := tr.summary(); s != "3 processes (2 ranks + 1 spare): 2 exited 0, 1 lost (no exit status from its host)" {
		t.Fatalf("summary %q", s)
	}
	// The same loss without spares aborts like a SIGKILL.
	tr = newTracker(2, 2, DeathAbort)
	tr.onFormed()
	expect(t, "lost without spares", tr.onExit(1, lost), "notice!:job failed: rank 1 (process 1) was lost: ssh to b", "teardown")
	if tr.code != 137 {
		t.Fatalf("code %d, want 137", tr.code)
	}
}

func TestTrackerStopsReplacedProcesses(t *testing.T) {
	// A host cut off: its rank is replaced, but its process runs on out of
	// reach until gaspirun stops it with the idle spares.
	tr := newTracker(2, 4, DeathContinue)
	tr.onFormed()
	expect(t, "promotion", tr.onReport(role(2, 1, 1)),
		"relabel:1=p1", "notice:process 1 no longer holds rank 1 (replaced)", "relabel:2=r1", "notice:spare process 2 now holds rank 1 (epoch 1)")
	expect(t, "rank 0 done", tr.onExit(0, ok))
	expect(t, "rank 1 done", tr.onExit(2, ok), "stop")
	if s := tr.stopRemaining(); s != "all 2 ranks finished; stopping the 2 remaining processes (1 idle spare, 1 replaced)" {
		t.Fatalf("stopRemaining: %q", s)
	}
}

// Rule: an idle spare that ends by itself in the grace after the last rank
// is counted as exited, not stopped, and nothing is left to stop.
func TestTrackerSpareEndsByItself(t *testing.T) {
	tr := newTracker(2, 3, DeathContinue)
	tr.onFormed()
	expect(t, "rank 0 exits 0", tr.onExit(0, ok))
	expect(t, "rank 1 exits 0", tr.onExit(1, ok), "stop")
	expect(t, "spare exits 0", tr.onExit(2, ok))
	if s := tr.stopRemaining(); s != "" {
		t.Fatalf("stopRemaining after every process ended: %q", s)
	}
	if s := tr.summary(); s != "3 processes (2 ranks + 1 spare): 3 exited 0" {
		t.Fatalf("summary %q", s)
	}
}
