package fttier

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
)

// What the job's output says about why processes were taken for failed:
// a test of a busy 2-core machine must tell a false suspicion (a live
// process starved of its heartbeats past the suspicion timeout, declared
// failed by the membership, fenced: exit 77, and the job recovers from
// it as from a kill) from a fence without cause, which is a bug.

var (
	// verdictRE matches the lines that say why a process was taken for
	// failed or fenced. decisiveRE picks those that say what was decided
	// about whom: few, and all are logged; the others (suspicions and
	// refutations, every process's line for every committed epoch) are
	// many, and only the first 60 are.
	verdictRE  = regexp.MustCompile(`suspected|refuted|failure confirmed|failure committed|fenced|declared failed|giving up|exited with code|was killed`)
	decisiveRE = regexp.MustCompile(`failure confirmed|fenced|giving up|exited with code|was killed`)
	// fencedExitRE is gaspirun's notice of a process that ended fenced.
	fencedExitRE = regexp.MustCompile(`^gaspirun: .*\bprocess (\d+)\b.* exited with code 77\b`)
	// declaredRE is a process's log line of a failure the membership
	// committed; suspectedRE one of a suspicion its detector raised.
	declaredRE  = regexp.MustCompile(`msg="spares: failure committed".* failed_proc=(\d+)\b`)
	suspectedRE = regexp.MustCompile(`^\[(\w+)\] .*msg="health: suspected".* peer=(\d+) .*reason="([^"]*)"`)
)

// logVerdicts logs the job's verdict lines (verdictRE): every decisive
// one, and the first 60 of the rest.
func (a *appJob) logVerdicts() {
	rest := 0
	for _, l := range a.run.Texts() {
		switch {
		case decisiveRE.MatchString(l):
			a.t.Logf("verdict: %s", l)
		case verdictRE.MatchString(l) && rest < 60:
			a.t.Logf("verdict: %s", l)
			rest++
		}
	}
}

// checkFalseFailures checks the n processes gaspirun's summary counts as
// ended with exit 77 (fenced), none of which the test killed: each must
// have been declared failed by the membership first. Then it was a false
// suspicion on a starved machine, which the runtime answers as a loss
// (the job's answer and exit are checked as for the kills), and it is
// logged with the suspicions that led to it; a fence without a declared
// failure fails the test.
func (a *appJob) checkFalseFailures(n int) {
	a.t.Helper()
	why, err := falseFailures(a.run.Texts())
	if err == nil && len(why) != n {
		err = fmt.Errorf("gaspirun's summary counts %d processes fenced (exit 77), its notices name %d", n, len(why))
	}
	if err != nil {
		a.errorf("%v", err)
		a.logVerdicts()
		return
	}
	for _, p := range slices.Sorted(maps.Keys(why)) {
		a.t.Logf("known: process %d, not killed by the test, was declared failed and fenced (exit 77), a false failure on a busy machine (load average now %s); its suspicions: %s",
			p, proctest.LoadAvg(), why[p])
	}
}

// falseFailures returns, for each process the output says ended fenced
// (exit 77), the suspicions raised against it, and an error if one was
// never declared failed by the membership.
func falseFailures(lines []string) (map[int]string, error) {
	fenced := map[int]bool{}
	declared := map[int]bool{}
	suspicions := map[int][]string{}
	for _, l := range lines {
		if m := fencedExitRE.FindStringSubmatch(l); m != nil {
			p, _ := strconv.Atoi(m[1])
			fenced[p] = true
		}
		if m := declaredRE.FindStringSubmatch(l); m != nil {
			p, _ := strconv.Atoi(m[1])
			declared[p] = true
		}
		if m := suspectedRE.FindStringSubmatch(l); m != nil {
			p, _ := strconv.Atoi(m[2])
			suspicions[p] = append(suspicions[p], fmt.Sprintf("by %s: %s", m[1], m[3]))
		}
	}
	why := map[int]string{}
	for p := range fenced {
		if !declared[p] {
			return nil, fmt.Errorf("process %d ended fenced (exit 77), and no process logged a committed failure of it: a fence without cause", p)
		}
		why[p] = strings.Join(suspicions[p], "; ")
		if why[p] == "" {
			why[p] = "none logged"
		}
	}
	return why, nil
}

// TestFalseFailuresTellsACauseFromNone checks falseFailures on lines in
// the formats gaspirun and the processes print: a fenced process whose
// failure was committed is a false failure, with its suspicions; one
// whose failure was not is an error.
func TestFalseFailuresTellsACauseFromNone(t *testing.T) {
	lines := []string{
		`[s9] time=2026-11-30T10:49:41.318Z level=INFO msg="health: suspected" proc=9 peer=6 tick=1023 reason="no ack for 150 ticks"`,
		`[r0] time=2026-11-30T10:49:42.001Z level=INFO msg="spares: failure committed" layer=membership proc=0 epoch=7 status=running note="spare 9 takes rank 3" failed_proc=6 reporter=9 rank=3 promoted=9`,
		`gaspirun: process 6 (formerly rank 3) exited with code 77 after it was replaced; ignored, the job continues`,
		`gaspirun: rank 1 (process 7) was killed by signal 9 (SIGKILL); the job continues (the runtime recovers the rank)`,
	}
	why, err := falseFailures(lines)
	if err != nil {
		t.Fatalf("falseFailures: %v", err)
	}
	if want := map[int]string{6: "by s9: no ack for 150 ticks"}; !maps.Equal(why, want) {
		t.Fatalf("falseFailures = %v, want %v", why, want)
	}
	_, err = falseFailures(append(lines, `gaspirun: spare process 12 exited with code 77; the job continues with one spare fewer`))
	if err == nil || !strings.Contains(err.Error(), "process 12") {
		t.Fatalf("a fenced process never declared failed: err %v, want one naming process 12", err)
	}
}

// Rule: the test kills the current holder of a rank, whoever took it over:
// after a false failure moved rank 3 to process 9 and a kill moved rank 1
// to process 4, the holders are 9, 4, and process 2 for a rank never lost.
func TestHolderFollowsEveryTakeover(t *testing.T) {
	lines := []string{
		`gaspirun: spare process 4 now holds rank 1 (epoch 2)`,
		`[r0] recovery: epoch 2 in force after 12ms; restored checkpoint 3 after 80ms`,
		`gaspirun: spare process 9 now holds rank 3 (epoch 5)`,
		`[s9] gaspirun: spare process 7 now holds rank 2 (epoch 6)`,
	}
	got := takeoversIn(lines)
	if want := []takeover{{proc: 4, rank: 1}, {proc: 9, rank: 3}}; !slices.Equal(got, want) {
		t.Fatalf("takeoversIn = %v, want %v (a process's own line is not gaspirun's notice)", got, want)
	}
	for r, want := range map[int]int{1: 4, 3: 9, 2: 2} {
		if p := holderOf(r, got); p != want {
			t.Errorf("holderOf(%d) = %d, want %d", r, p, want)
		}
	}
}
