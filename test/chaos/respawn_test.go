package chaos

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
)

// Rule: a respawn-spaced schedule owns its schedule: gaspirun --respawn,
// one spare, three or four kills of ranks and nothing else, in order, at
// least respawnMinGap iterations apart on K-means and between a quarter
// and three quarters of TeraSort's progress; it expects success. No other
// schedule respawns. Both workloads draw it.
func TestDrawRespawn(t *testing.T) {
	drawn := map[Workload]int{}
	for seed := uint64(1); seed <= 2000; seed++ {
		s := ScheduleOf(seed)
		kinds := map[Kind]bool{}
		for _, f := range s.Faults {
			kinds[f.Kind] = true
		}
		if !kinds[RespawnSpaced] {
			if s.Respawn {
				t.Errorf("seed %d respawns without a respawn-spaced kill:\n%s", seed, s)
			}
			continue
		}
		drawn[s.Workload]++
		if len(kinds) != 1 || !s.Respawn || s.Spares != respawnSpares || s.Expect != Succeed ||
			len(s.Faults) < respawnMinKills || len(s.Faults) > respawnMaxKills {
			t.Fatalf("seed %d: not a respawn-spaced schedule of %d to %d kills with %d spare, expecting success:\n%s",
				seed, respawnMinKills, respawnMaxKills, respawnSpares, s)
		}
		for i, f := range s.Faults[1:] {
			gap := f.At - s.Faults[i].At
			if gap <= 0 || (s.Workload == KMeans && gap < respawnMinGap) {
				t.Errorf("seed %d: kills %d and %d are %d points apart:\n%s", seed, i+1, i+2, gap, s)
			}
		}
	}
	if drawn[KMeans] == 0 || drawn[TeraSort] == 0 {
		t.Errorf("respawn-spaced schedules among seeds 1-2000 by workload: %v; want both", drawn)
	}
}

// replayJob is a job whose output is lines, as gaspirun's reaches the
// harness (through a real process, cat, and the harness's OnLine), with
// one outcome per fault of faults; it returns once the output is read.
func replayJob(t *testing.T, faults int, lines ...string) *job {
	t.Helper()
	f := filepath.Join(t.TempDir(), "out")
	if err := os.WriteFile(f, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	j := &job{t: t, leader: -1, failed: map[int]bool{}, joined: map[int]bool{}, outcomes: make([]outcome, faults),
		deadline: time.Second, start: time.Now()}
	run, err := proctest.Start(proctest.JobConfig{OnLine: j.onLine}, exec.Command("cat", f))
	if err != nil {
		t.Fatal(err)
	}
	j.run = run
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := run.Wait(ctx); err != nil {
		t.Fatalf("cat of %d lines did not end: %v", len(lines), err)
	}
	return j
}

// viewLine is a runtime's "view applied" record as a job's process logs it.
func viewLine(label string, proc, epoch, rank int, failed, moved string) string {
	return fmt.Sprintf(`[%s] time=2026-11-29T06:15:37.509Z level=INFO msg="view applied" proc=%d epoch=%d rank=%d failed=%s moved=%s table=77edb95d`,
		label, proc, epoch, rank, failed, moved)
}

func joinedLine(label string, proc, joiner, epoch int) string {
	return fmt.Sprintf(`[%s] time=2026-11-29T06:15:37.717Z level=INFO msg="a process joined the job" proc=%d joiner=%d addr=127.0.0.1:39473 host=vm epoch=%d`,
		label, proc, joiner, epoch)
}

// committedLine is the membership's record of a failure of the holder of
// rank failed, taken over by spare promoted (-1: none was idle).
func committedLine(epoch, failed, promoted int, note string) string {
	l := fmt.Sprintf(`[r0] time=2026-11-29T06:15:37.653Z level=INFO msg="spares: failure committed" layer=membership proc=0 epoch=%d status=running note=%q failed_proc=%d reporter=0 rank=%d`,
		epoch, note, failed, failed)
	if promoted >= 0 {
		l += fmt.Sprintf(" promoted=%d", promoted)
	}
	return l
}

// respawnRun is the output of a job of 4 ranks and 1 spare under
// gaspirun --respawn, as it came in a real run: rank 1's process is
// killed and spare 4 takes the rank; replacement 5 is started, and rank
// 2's process is killed before 5 joined, so rank 2 awaits a joiner
// (its failed holder stays in the moves of epoch 3) until 5 takes it in
// epoch 4, which only 5's view line and gaspirun's line say (the others
// list moves of newly failed processes only); replacement 6 joins the
// pool in epoch 5. Each element ends a stage the test checks.
var respawnRun = [][]string{
	{ // 0: the job formed
		viewLine("r0", 0, 1, 0, "[]", "[]"), viewLine("r1", 1, 1, 1, "[]", "[]"), viewLine("r2", 2, 1, 2, "[]", "[]"),
		viewLine("r3", 3, 1, 3, "[]", "[]"), viewLine("s4", 4, 1, -1, "[]", "[]"),
		"[r0] iter    1  sse=15839009.5             moved=200000    shift=12.8       time=27.28ms",
	},
	{ // 1: rank 1 lost, spare 4 holds it
		"chaos: applied respawn-spaced rank=1 at=1: SIGKILL process 1",
		committedLine(2, 1, 4, "spare 4 takes rank 1"),
		viewLine("r0", 0, 2, 0, "[1]", `"[1 1 4]"`), viewLine("s4", 4, 2, 1, "[1]", `"[1 1 4]"`),
		"gaspirun: spare process 4 now holds rank 1 (epoch 2)",
		"[r0] recovery: epoch 2 in force after 832µs; checkpoint of iteration 0 restored after 38.494ms; 1 iterations to redo",
		"gaspirun: respawned s5 on this machine for lost r1 (1 of 16)",
		"gaspirun: s5 joined the job as a spare (pid 13271 on vm)",
	},
	{ // 2: rank 2 lost with no spare idle: it awaits a joiner
		"chaos: applied respawn-spaced rank=2 at=9: SIGKILL process 2",
		committedLine(3, 2, -1, "no spare left: rank 2 awaits a joiner for 30s"),
		viewLine("r0", 0, 3, 0, `"[1 2]"`, `"[2 2 2]"`), viewLine("r1", 4, 3, 1, `"[1 2]"`, `"[2 2 2]"`),
	},
	{ // 3: joiner 5 takes rank 2
		joinedLine("r0", 0, 5, 4),
		viewLine("r0", 0, 4, 0, `"[1 2]"`, "[]"), viewLine("r1", 4, 4, 1, `"[1 2]"`, "[]"),
		joinedLine("s5", 5, 5, 4),
		viewLine("s5", 5, 4, 2, `"[1 2]"`, `"[1 1 4 2 2 5]"`),
		"gaspirun: respawned s6 on this machine for lost r2 (2 of 16)",
		"gaspirun: spare process 5 now holds rank 2 (epoch 4)",
		"[r0] recovery: epoch 4 in force after 64.693ms; checkpoint of iteration 5 restored after 88.687ms; 4 iterations to redo",
	},
	{ // 4: joiner 6 joins the pool
		joinedLine("r0", 0, 6, 5),
		viewLine("r0", 0, 5, 0, `"[1 2]"`, "[]"),
	},
}

// through returns the lines of respawnRun's stages up to stage n.
func through(n int) []string {
	var out []string
	for _, st := range respawnRun[:n+1] {
		out = append(out, st...)
	}
	return out
}

// Rule: the harness follows rank holders and idle spares through
// replacements that join with new ids, a rank that awaits a joiner
// included; either the joiner's own view line or gaspirun's line
// suffices for a joiner that took a rank.
func TestHolderFollowsJoiners(t *testing.T) {
	for _, c := range []struct {
		name    string
		lines   []string
		holders [Ranks]int
		idle    []int
	}{
		{"formed", through(0), [Ranks]int{0, 1, 2, 3}, []int{4}},
		{"spare took rank 1", through(1), [Ranks]int{0, 4, 2, 3}, nil},
		{"rank 2 awaits", through(2), [Ranks]int{0, 4, 2, 3}, nil},
		{"joiner took rank 2", through(3), [Ranks]int{0, 4, 5, 3}, nil},
		{"joiner in the pool", through(4), [Ranks]int{0, 4, 5, 3}, []int{6}},
		{"without the joiner's view line", slices.DeleteFunc(through(4), func(l string) bool { return strings.HasPrefix(l, "[s5]") }),
			[Ranks]int{0, 4, 5, 3}, []int{6}},
		{"without gaspirun's line", slices.DeleteFunc(through(4), func(l string) bool { return strings.Contains(l, "process 5 now holds") }),
			[Ranks]int{0, 4, 5, 3}, []int{6}},
	} {
		t.Run(c.name, func(t *testing.T) {
			j := replayJob(t, 0, c.lines...)
			for r, want := range c.holders {
				if got := j.holder(r); got != want {
					t.Errorf("holder(%d) = %d, want %d", r, got, want)
				}
			}
			if got := j.idleSpares(Ranks, 1); !slices.Equal(got, c.idle) {
				t.Errorf("idleSpares = %v, want %v", got, c.idle)
			}
		})
	}
}

// Rule: a process that joined the pool starts no recovery (its join keeps
// the epoch), so it leaves a settled job settled; a recovery, from a loss
// or from a joiner that took an awaiting rank, settles a checkpoint
// interval of iterations after rank 0's recovery line.
func TestSettledAfterJoin(t *testing.T) {
	s := Schedule{Workload: KMeans, Ranks: Ranks, Spares: 1, Respawn: true}
	w := kmWorkload()
	iters := func(n int) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf("[r0] iter %4d  sse=1888239.318            moved=995       shift=0.0304     time=4.76ms", 6+i))
		}
		return out
	}
	recovery := "[r0] recovery: epoch 5 in force after 93µs; checkpoint of iteration 5 restored after 5.805ms; 4 iterations to redo"
	for _, c := range []struct {
		name  string
		lines []string
		want  bool
	}{
		{"the recovery from a loss settled", append(through(3), iters(w.ckptEvery+1)...), true},
		{"joined the pool: no recovery to wait for", append(append(through(3), iters(w.ckptEvery+1)...), respawnRun[4]...), true},
		{"joined, recovered, too few iterations", append(through(4), recovery), false},
		{"joined, recovered, settled", append(append(through(4), recovery), iters(w.ckptEvery+1)...), true},
		{"a joiner's line from another process", append(append(through(3), iters(w.ckptEvery+1)...), joinedLine("r2", 5, 6, 5)), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			j := replayJob(t, 0, c.lines...)
			j.run.Lock()
			got := j.settledLocked(s)
			j.run.Unlock()
			if got != c.want {
				t.Errorf("settled = %v, want %v", got, c.want)
			}
		})
	}
}

// Rule: a respawn-spaced kill waits for the replacements of the
// processes lost before it to join, counted by the kills applied or the
// processes declared failed, whichever is more.
func TestAwaitReplacements(t *testing.T) {
	applied := func(j *job, n int) {
		for i := range n {
			j.decide(i, Fault{Kind: RespawnSpaced}, true, "", "")
		}
	}
	j := replayJob(t, 3, through(4)...) // two kills, two joiners
	applied(j, 2)
	if ok, detail := j.awaitReplacements(2); !ok {
		t.Errorf("two kills, two joiners: not replaced (%s)", detail)
	}
	j = replayJob(t, 3, through(2)...) // two kills, none joined; the job ended
	applied(j, 2)
	ok, detail := j.awaitReplacements(2)
	if ok || !strings.Contains(detail, "0 processes joined the job for the 2 it lost") || !strings.Contains(detail, "[5]") {
		t.Errorf("two kills, no joiner: %v, %q", ok, detail)
	}
	j = replayJob(t, 3, through(3)...) // one kill applied, two processes declared failed, one joined
	applied(j, 1)
	if ok, detail := j.awaitReplacements(1); ok || !strings.Contains(detail, "1 processes joined the job for the 2 it lost") {
		t.Errorf("one kill, two failures, one joiner: %v, %q", ok, detail)
	}
}

// Rule: a respawn schedule's kill beyond the spares counts as applied
// only if gaspirun printed a respawn line for it (n-Spares lines for the
// n-th kill); the others stand.
func TestRespawnOutcomes(t *testing.T) {
	s := Schedule{Workload: KMeans, Ranks: Ranks, Spares: 1, Respawn: true,
		Faults: []Fault{{Kind: RespawnSpaced, Rank: 1, At: 1}, {Kind: RespawnSpaced, Rank: 2, At: 9}, {Kind: RespawnSpaced, Rank: 3, At: 20}}}
	lines := slices.DeleteFunc(through(4), func(l string) bool { return strings.Contains(l, "respawned s6") })
	j := replayJob(t, len(s.Faults), lines...)
	for i, f := range s.Faults {
		j.decide(i, f, true, "", fmt.Sprintf("SIGKILL process %d", f.Rank))
	}
	respawnOutcomes(j, s)
	for i, want := range []bool{true, true, false} {
		if o := j.outcomes[i]; o.applied != want || (!want && (o.why != whyNoRespawn || !strings.Contains(o.detail, "kill 3, 2 beyond"))) {
			t.Errorf("kill %d: %+v, want applied %v", i+1, o, want)
		}
	}
	r := j.refillOf(s)
	if r.kills != 2 || !slices.Equal(r.respawned, []int{5}) || r.joined != 2 || !slices.Equal(r.promoted, []int{5}) || r.awaited != 1 {
		t.Errorf("refill = %+v, want 2 kills, respawned [5], 2 joined, [5] promoted, 1 failure with no spare idle", r)
	}
	sum := newSummary()
	sum.add(s, Result{Code: 0}, "", nil, nil, nil, j)
	if msg := sum.untestedRefill(); msg != "" {
		t.Errorf("a schedule refilled beyond its spare, and the sweep says %q", msg)
	}
	if !strings.Contains(sum.table(), "1 respawn-spaced schedules (gaspirun --respawn, 1 spare): 1 lost more processes than their spares") {
		t.Errorf("summary lacks the refill line:\n%s", sum.table())
	}
}

// Rule: a sweep whose respawn schedules never lost more processes than
// their spares with the pool refilled did not test respawning, and says
// so.
func TestUntestedRefill(t *testing.T) {
	s := Schedule{Workload: KMeans, Ranks: Ranks, Spares: 1, Respawn: true,
		Faults: []Fault{{Kind: RespawnSpaced, Rank: 1, At: 1}, {Kind: RespawnSpaced, Rank: 2, At: 9}, {Kind: RespawnSpaced, Rank: 3, At: 20}}}
	j := replayJob(t, len(s.Faults), through(1)...)
	j.decide(0, s.Faults[0], true, "", "")
	j.decide(1, s.Faults[1], false, whyEnded, "")
	j.decide(2, s.Faults[2], false, whyEnded, "")
	sum := newSummary()
	sum.add(s, Result{Code: 0}, "", nil, nil, nil, j)
	if msg := sum.untestedRefill(); !strings.Contains(msg, "did not test respawning") {
		t.Errorf("one kill with one spare: untestedRefill = %q", msg)
	}
	if msg := newSummary().untestedRefill(); msg != "" {
		t.Errorf("no respawn schedule: untestedRefill = %q", msg)
	}
}

// Rule: replacements get new ids, at or above the job's first processes'
// (ranks plus spares), never one twice; a view never lists one of the
// first processes as joined.
func TestJoinerViolations(t *testing.T) {
	for _, c := range []struct {
		name  string
		lines []string
		want  []string
	}{
		{"new ids", through(4), nil},
		{"a first process's id", []string{"gaspirun: respawned s3 on this machine for lost r3 (1 of 16)"}, []string{"id 3, the id of one of the job's first 5"}},
		{"an id twice", []string{"gaspirun: respawned s5 on this machine for lost r1 (1 of 16)", "gaspirun: respawned s5 on host node2 for lost r2 (2 of 16)"},
			[]string{"two replacements with id 5"}},
		{"a view lists a first process as joined", []string{joinedLine("r0", 0, 4, 3), joinedLine("r1", 1, 4, 3)}, []string{"lists process 4 as joined"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := joinerViolations(Ranks+1, c.lines)
			if len(v) != len(c.want) {
				t.Fatalf("violations %q, want %d", v, len(c.want))
			}
			for i, w := range c.want {
				if !strings.Contains(v[i], w) {
					t.Errorf("violation %q, want it to say %q", v[i], w)
				}
			}
		})
	}
}

// Rule: with --respawn, a pool that ran out (exit 75) is a violation even
// when more processes were declared failed than the job had spares: every
// lost process is replaced. Without it, that is the documented end of a
// starved machine.
func TestRespawnExhaustedIsViolation(t *testing.T) {
	lines := []string{committedLine(2, 1, 4, "spare 4 takes rank 1"), committedLine(3, 2, -1, "no spare left"),
		"gaspirun: job failed: rank 2 awaited a joiner for 30s; exit 75"}
	s := Schedule{Workload: KMeans, Ranks: Ranks, Spares: 1, Expect: Succeed}
	res := Result{Code: ExitSparesExhausted, Lines: lines}
	if v := Violations(s, res, "ref"); len(v) != 0 {
		t.Errorf("without --respawn: violations %q, want none (starved heartbeats)", v)
	}
	s.Respawn = true
	if v := Violations(s, res, "ref"); len(v) != 1 || !strings.Contains(v[0], "survivable") {
		t.Errorf("with --respawn: violations %q, want the survivable schedule's", v)
	}
}
