package fttier

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
)

// nonLeaderRanks lists the ranks 0..ranks-1 (held by processes 0..ranks-1
// at epoch 1) whose process is not the Raft leader, highest first.
func nonLeaderRanks(leader int) []int {
	var rs []int
	for r := ranks - 1; r >= 0; r-- {
		if r != leader {
			rs = append(rs, r)
		}
	}
	return rs
}

// others lists the processes of the job not in killed.
func others(killed ...int) []int {
	var ps []int
next:
	for p := 0; p < ranks+spares; p++ {
		for _, k := range killed {
			if p == k {
				continue next
			}
		}
		ps = append(ps, p)
	}
	return ps
}

// waitNewEpochProgress waits until the ranks completed a step in epoch e
// or later, reported after since: recovery is complete.
func (j *job) waitNewEpochProgress(since time.Time, e int) {
	j.t.Helper()
	j.waitFor(fmt.Sprintf("a step completed in epoch %d", e), stepWait, func(recs []rec) bool {
		for _, x := range recs {
			if x.kind == "progress" && x.int("epoch") >= e && !x.recv.Before(since) {
				return true
			}
		}
		return false
	})
}

// lastApplied is how long after at the last of procs applied epoch e
// (read times of the log lines; for the test log only).
func (j *job) lastApplied(at time.Time, procs []int, e int) time.Duration {
	seen := map[int]time.Time{}
	for _, x := range j.snapshot() {
		if x.kind == "log" && x.msg == "view applied" && x.int("epoch") >= e {
			if _, ok := seen[x.proc()]; !ok {
				seen[x.proc()] = x.recv
			}
		}
	}
	var last time.Duration
	for _, p := range procs {
		last = max(last, seen[p].Sub(at))
	}
	return last.Round(time.Millisecond)
}

func (j *job) has(substr string) bool {
	for _, x := range j.snapshot() {
		if strings.Contains(x.raw, substr) {
			return true
		}
	}
	return false
}

// TestFailureFree is the reference: every rank ends with the same sum, in
// epoch 1, and no failure is confirmed while the ranks run.
func TestFailureFree(t *testing.T) {
	j := startJob(t, jobOpts{steps: 100})
	j.running()
	code := j.wait()
	j.checkFailures()
	if code != 0 {
		j.fatalf("gaspirun exit %d, want 0", code)
	}
	if e := j.checkResults(); e != 1 {
		j.fatalf("results in epoch %d, want 1 (no failure happened)", e)
	}
	j.checkFinalize()
}

// TestKillRankAcrossHosts: SIGKILL of a rank mid-run, with the processes
// labelled as three hosts of two (gaspirun --ranks-per-host 2: ranks 0-1,
// ranks 2-3, the spares), so the collectives run in two levels, and the
// spare that takes the rank is on another host than the rank it replaces.
// Every survivor ends in the same new epoch, a spare holds the rank, and
// the results equal the failure-free run's. (test/kmtier's TestKillRank
// is the single kill on one host.)
func TestKillRankAcrossHosts(t *testing.T) {
	killRank(t, jobOpts{steps: 300, launch: []string{"--ranks-per-host", "2"}})
}

func killRank(t *testing.T, o jobOpts) {
	j := startJob(t, o)
	leader := j.running()
	j.waitProgress(20, 1)
	victim := nonLeaderRanks(leader)[0]
	at := j.signal(victim, syscall.SIGKILL)
	holder := j.waitHolder(victim)
	if holder < ranks {
		j.fatalf("rank %d taken over by process %d, want a spare (%d..%d)", victim, holder, ranks, ranks+spares-1)
	}
	survivors := others(victim)
	j.waitApplied(survivors, 2)
	t.Logf("every survivor applied epoch 2 within %v of the kill (log read times)", j.lastApplied(at, survivors, 2))
	code := j.wait()
	j.checkFailures(victim)
	if code != 0 {
		j.fatalf("gaspirun exit %d, want 0", code)
	}
	if e := j.checkResults(); e != 2 {
		j.fatalf("results in epoch %d, want 2 (one membership change)", e)
	}
	// gaspirun names the process by its role when the death reaches it:
	// still rank victim, or already replaced by the spare's role report.
	if !j.has(fmt.Sprintf("gaspirun: rank %d (process %d) was killed by signal 9", victim, victim)) &&
		!j.has(fmt.Sprintf("gaspirun: process %d (formerly rank %d) was killed by signal 9", victim, victim)) {
		j.errorf("gaspirun did not report the death of process %d (rank %d)", victim, victim)
	}
	// The holder's own stats line names it as rank victim.
	found := false
	for _, s := range statsOf(j.snapshot()) {
		if s.int("proc") == holder && s.int("rank") == victim {
			found = true
		}
	}
	if !found {
		j.fatalf("no stats line from process %d as rank %d", holder, victim)
	}
	j.checkFinalize()
}

// TestKillRaftLeader: SIGKILL of the process that leads Raft. A new leader
// is elected and recovery completes with the correct result. When the
// leader is a spare, that spare is killed and then the next leader too,
// so that a leader holding a rank is killed.
func TestKillRaftLeader(t *testing.T) {
	j := startJob(t, jobOpts{steps: 400})
	j.running()
	j.waitProgress(20, 1)
	holderOf := map[int]int{} // rank -> process
	rankOf := map[int]int{}   // process -> rank
	for r := 0; r < ranks; r++ {
		holderOf[r], rankOf[r] = r, r
	}
	var killed []int
	epoch := 1
	killedRankLeader := false
	for len(killed) < spares && !killedRankLeader {
		leader := leaderAfter(j.snapshot(), time.Time{})
		r, holds := rankOf[leader]
		at := j.signal(leader, syscall.SIGKILL)
		killed = append(killed, leader)
		epoch++
		newLeader := -1
		j.waitFor(fmt.Sprintf("a new Raft leader after killing leader process %d", leader), stepWait, func(recs []rec) bool {
			newLeader = leaderAfter(recs, at)
			return newLeader >= 0 && newLeader != leader
		})
		t.Logf("process %d leads Raft after the kill of leader process %d", newLeader, leader)
		if holds {
			h := j.waitHolder(r)
			delete(rankOf, leader)
			holderOf[r], rankOf[h] = h, r
			killedRankLeader = true
		}
		survivors := others(killed...)
		j.waitApplied(survivors, epoch)
		t.Logf("every survivor applied epoch %d within %v of the kill (log read times)", epoch, j.lastApplied(at, survivors, epoch))
		j.waitNewEpochProgress(at, epoch)
	}
	if !killedRankLeader {
		t.Logf("the Raft leader was a spare %d times; no rank-holding leader was killed in this run", len(killed))
	}
	code := j.wait()
	j.checkFailures(killed...)
	if code != 0 {
		j.fatalf("gaspirun exit %d, want 0", code)
	}
	if e := j.checkResults(); e != epoch {
		j.fatalf("results in epoch %d, want %d (%d membership changes)", e, epoch, len(killed))
	}
	j.checkFinalize()
}

// TestKillTwoRanks: two ranks killed one after the other (the second after
// the first recovery completed). Both spares are used and the result is
// correct.
func TestKillTwoRanks(t *testing.T) {
	j := startJob(t, jobOpts{steps: 400})
	leader := j.running()
	j.waitProgress(20, 1)
	vs := nonLeaderRanks(leader)[:2]
	at := j.signal(vs[0], syscall.SIGKILL)
	h1 := j.waitHolder(vs[0])
	j.waitApplied(others(vs[0]), 2)
	j.waitNewEpochProgress(at, 2)
	at = j.signal(vs[1], syscall.SIGKILL)
	h2 := j.waitHolder(vs[1])
	j.waitApplied(others(vs...), 3)
	j.waitNewEpochProgress(at, 3)
	if h1 == h2 || h1 < ranks || h2 < ranks {
		j.fatalf("ranks %v taken over by processes %d and %d, want the two spares", vs, h1, h2)
	}
	code := j.wait()
	j.checkFailures(vs...)
	if code != 0 {
		j.fatalf("gaspirun exit %d, want 0", code)
	}
	if e := j.checkResults(); e != 3 {
		j.fatalf("results in epoch %d, want 3 (two membership changes)", e)
	}
	j.checkFinalize()
}

// TestSparesExhausted: a third rank killed after both spares are used. The
// job ends with the named error and gaspirun exits 75 (the failing rank's
// code, job.ExitSparesExhausted), leaving no process behind.
func TestSparesExhausted(t *testing.T) {
	j := startJob(t, jobOpts{steps: 1000})
	leader := j.running()
	j.waitProgress(20, 1)
	vs := nonLeaderRanks(leader)[:3]
	for i, v := range vs[:2] {
		at := j.signal(v, syscall.SIGKILL)
		j.waitHolder(v)
		j.waitApplied(others(vs[:i+1]...), i+2)
		j.waitNewEpochProgress(at, i+2)
	}
	j.signal(vs[2], syscall.SIGKILL)
	code := j.wait()
	// Once a process named the error the job is being torn down, and the
	// others see it go.
	j.checkFailuresUntil(func(x rec) bool { return strings.Contains(x.raw, "spare pool exhausted") }, vs...)
	if code != 75 {
		j.fatalf("gaspirun exit %d, want 75 (spares exhausted)", code)
	}
	if !j.has("spare pool exhausted") {
		j.fatalf("no process named the error (spares: spare pool exhausted, job failed)")
	}
	if !j.has("exited with code 75") {
		j.fatalf("gaspirun did not name the rank that exited with code 75")
	}
	if count(j.snapshot(), "result") != 0 {
		j.fatalf("a rank printed a result although the job failed")
	}
}

// TestStoppedRankIsFenced: a rank stopped (SIGSTOP) until a spare replaced
// it, then resumed (SIGCONT). The resumed process finds itself fenced and
// exits 77 (the survivors told it, then cut it off; what it still sends is
// refused), no process applies a stale frame, and the survivors finish with
// the failure-free result.
func TestStoppedRankIsFenced(t *testing.T) {
	stoppedRankIsFenced(t, jobOpts{steps: 500, env: []string{"PGAS_SHM=0"}}, fenceHooks{})
}

// fenceHooks let a variant of the fencing test look at the processes:
// running just before the victim is stopped, and stopped just before it is
// resumed (the survivors are in the new epoch).
type fenceHooks struct {
	running, stopped func(j *job, victim int)
}

// stoppedRankIsFenced is TestStoppedRankIsFenced with the job's options
// and hooks given.
func stoppedRankIsFenced(t *testing.T, o jobOpts, hooks fenceHooks) {
	j := startJob(t, o)
	leader := j.running()
	j.waitProgress(20, 1)
	victim := nonLeaderRanks(leader)[0]
	pid := j.pidOf(victim)
	if hooks.running != nil {
		hooks.running(j, victim)
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGCONT) }) // never leave it stopped
	at := j.signal(victim, syscall.SIGSTOP)
	holder := j.waitHolder(victim)
	j.waitApplied(others(victim), 2)
	j.waitNewEpochProgress(at, 2)
	if hooks.stopped != nil {
		hooks.stopped(j, victim)
	}
	resumed := j.signal(victim, syscall.SIGCONT)
	fenced := fmt.Sprintf("gaspirun: process %d (formerly rank %d) exited with code 77 after it was replaced", victim, victim)
	j.waitFor("the resumed process to exit 77 (fenced)", stepWait, func(recs []rec) bool {
		for _, x := range recs {
			if strings.HasPrefix(x.raw, fenced) {
				return true
			}
		}
		return false
	})
	t.Logf("process %d exited fenced %v after SIGCONT", victim, time.Since(resumed).Round(time.Millisecond))
	code := j.wait()
	j.checkFailures(victim)
	if code != 0 {
		j.fatalf("gaspirun exit %d, want 0", code)
	}
	if e := j.checkResults(); e != 2 {
		j.fatalf("results in epoch %d, want 2", e)
	}
	if s, ok := j.resultFile("exit", victim); !ok || !strings.HasPrefix(s, "code=77") {
		j.fatalf("process %d exit file %q, want code=77", victim, s)
	}
	if _, ok := j.resultFile("result", victim); ok {
		j.fatalf("the fenced process %d wrote a result", victim)
	}
	// Counters per surviving process: the last stats line before SIGCONT
	// (printed with a progress line in epoch 2, after the view change) and
	// the last one (after the result).
	before, after := map[int]int{}, map[int]int{}
	var lines []string
	for _, s := range statsOf(j.snapshot()) {
		n, _ := strconv.Atoi(s.kv["frames_rejected"])
		if s.recv.Before(resumed) {
			before[s.int("proc")] = n
		}
		after[s.int("proc")] = n
		lines = append(lines, s.raw)
	}
	sumBefore, sumAfter := 0, 0
	for p, n := range after {
		sumBefore += before[p]
		sumAfter += n
	}
	t.Logf("frames rejected by the survivors: %d before SIGCONT, %d at the end; last lines:\n%s", sumBefore, sumAfter, strings.Join(lines[max(0, len(lines)-ranks):], "\n"))
	// The survivors tell a process the view declared failed that it was
	// replaced, then cut their connections to it (so nothing more of a
	// frame it was sending can land); a frame it still gets through is
	// refused (frames_rejected). What must hold: nothing stale applied.
	var staleApplied []string
	closed := 0
	for _, x := range j.snapshot() {
		if !strings.Contains(x.raw, `msg="runtime closed"`) {
			continue
		}
		closed++
		if !strings.Contains(x.raw, "stale_applied=0") {
			staleApplied = append(staleApplied, x.raw)
		}
	}
	if closed < ranks {
		j.fatalf("%d processes logged their counters at close, want at least the %d ranks: the stale-frame check cannot be trusted", closed, ranks)
	}
	if len(staleApplied) > 0 {
		j.fatalf("frames from a stale epoch were applied:\n%s", strings.Join(staleApplied, "\n"))
	}
	found := false
	for _, s := range statsOf(j.snapshot()) {
		found = found || (s.int("proc") == holder && s.int("rank") == victim)
	}
	if !found {
		j.fatalf("no stats line from process %d as rank %d", holder, victim)
	}
	j.checkFinalize()
}

// TestLauncherKilled: gaspirun itself is killed with SIGKILL after the
// start. The processes carry on without it, the ranks finish and write
// their results, and every process ends (the spares once the job is
// finished).
func TestLauncherKilled(t *testing.T) {
	// A spare that never learns that the job finished gives up after
	// ftstep's -timeout: keep it short here.
	const progLimit = 45 * time.Second
	j := startJob(t, jobOpts{steps: 150, timeout: progLimit})
	j.running()
	j.waitProgress(20, 1)
	pids := pidsOf(j.snapshot())
	killedAt := time.Now()
	if err := j.run.Procs()[0].Cmd.Process.Kill(); err != nil {
		j.fatalf("kill gaspirun: %v", err)
	}
	t.Logf("killed gaspirun (pid %d)", j.run.Procs()[0].Cmd.Process.Pid)
	// Every process ends by itself.
	deadline := time.Now().Add(progLimit + 30*time.Second)
	ended := map[int]time.Duration{}
	for len(ended) < len(pids) && time.Now().Before(deadline) {
		for p, pid := range pids {
			if _, ok := ended[p]; !ok && !proctest.Alive(pid) {
				ended[p] = time.Since(killedAt).Round(time.Millisecond)
			}
		}
		time.Sleep(50 * time.Millisecond) // real processes: poll with a deadline
	}
	t.Logf("processes ended after the launcher's death: %v", ended)
	for p, pid := range pids {
		if _, ok := ended[p]; !ok {
			j.errorf("process %d (pid %d) still running %v after gaspirun was killed", p, pid, progLimit+30*time.Second)
		}
	}
	want := fmt.Sprintf("sum=%d epoch=1", expectedSum(ranks, int64(j.steps)))
	for r := 0; r < ranks; r++ {
		s, ok := j.resultFile("result", r)
		if !ok || s != fmt.Sprintf("result rank=%d %s", r, want) {
			t.Errorf("process %d result file %q, want \"result rank=%d %s\"", r, s, r, want)
		}
		e, _ := j.resultFile("exit", r)
		if !strings.HasPrefix(e, "code=0") {
			t.Errorf("process %d exit file %q, want code=0", r, e)
		}
		if strings.Contains(e, "finalize_err") {
			t.Errorf("rank %d: Finalize did not complete: %s", r, e)
		}
	}
	for p := ranks; p < ranks+spares; p++ {
		e, _ := j.resultFile("exit", p)
		if e != `code=0 init_err="pgas: spare not promoted: the job finished"` {
			// Without the launcher, an idle spare must learn that the job
			// ended (from the Finish entry, or from every rank's goodbye).
			t.Errorf("spare process %d exit file %q (ended after %v), want code=0 and \"the job finished\"", p, e, ended[p])
		}
	}
}
