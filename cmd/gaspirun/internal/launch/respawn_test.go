package launch

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/internal/bootstrap"
)

var fenced = exitInfo{Code: ExitFenced}

// respawnTracker is a formed job's tracker with a replacement budget.
func respawnTracker(ranks, procs, budget int) *tracker {
	tr := newTracker(ranks, procs, DeathContinue)
	tr.maxRestarts = budget
	tr.onFormed()
	return tr
}

// Rule (cmd/gaspirun, Keeping the spare pool full): each process lost
// while the job runs costs one replacement, which joins as a spare with a
// new id, is labelled and judged like the job's own, and is counted in
// the summary.
func TestTrackerRespawnReplacesLostProcess(t *testing.T) {
	tr := respawnTracker(2, 3, 2)
	expect(t, "rank 1 killed", tr.onExit(1, killed),
		"notice!:rank 1 (process 1) was killed by signal 9 (SIGKILL); the job continues", "respawn:1=r1")
	expect(t, "spare 2 takes rank 1", tr.onReport(role(2, 1, 2)),
		"relabel:2=r1", "notice:spare process 2 now holds rank 1 (epoch 2)")
	expect(t, "replacement started", tr.respawnStarted(3, "", "r1"),
		"notice:respawned s3 on this machine for lost r1 (1 of 2)")
	if l := tr.label(3); l != "s3" || tr.nProcs != 4 || tr.live() != 3 {
		t.Fatalf("label %q, %d processes, %d live", l, tr.nProcs, tr.live())
	}
	expect(t, "replacement registers", tr.onJoined(3, "", "pid 42 on here"),
		"notice:s3 joined the job as a spare (pid 42 on here)")
	if !tr.registered[3] {
		t.Fatal("the replacement is not registered")
	}
	// Reports and the status line know the new process.
	expect(t, "its event", tr.onReport(bootstrap.Report{Proc: 3, Kind: bootstrap.KindEvent, Text: "waiting"}), "event:[s3] waiting")
	if _, c := tr.statusState(); c.spares != 1 || c.running != 2 || c.ended != 1 {
		t.Fatalf("status %+v", c)
	}
	expect(t, "rank 0 done", tr.onExit(0, ok))
	expect(t, "rank 1 done", tr.onExit(2, ok), "stop")
	tr.stopRemaining()
	expect(t, "replacement stopped", tr.onExit(3, termed))
	if tr.code != 0 || !tr.done() {
		t.Fatalf("code %d, done %v", tr.code, tr.done())
	}
	want := "4 processes (2 ranks + 1 spare + 1 joined): 2 exited 0, 1 killed by signal 9 (SIGKILL), 1 stopped by gaspirun; 1 replacement started (budget 2)"
	if s := tr.summary(); s != want {
		t.Fatalf("summary\n%q\nwant\n%q", s, want)
	}
}

// A rank lost with no spare idle is not judged lost while its
// replacement is on its way; the replacement takes it and the job
// succeeds.
func TestTrackerWaitsForQueuedReplacement(t *testing.T) {
	tr := respawnTracker(1, 1, 1)
	expect(t, "the only process killed", tr.onExit(0, killed),
		"notice!:rank 0 (process 0) was killed", "respawn:0=r0")
	if tr.phase != running || tr.live() != 0 {
		t.Fatalf("phase %v with %d live: the job was judged before its replacement came", tr.phase, tr.live())
	}
	expect(t, "replacement started", tr.respawnStarted(1, "", "r0"), "notice:respawned s1 on this machine for lost r0 (1 of 1)")
	expect(t, "it takes rank 0", tr.onReport(role(1, 0, 2)), "relabel:1=r0", "notice:spare process 1 now holds rank 0 (epoch 2)")
	expect(t, "it finishes", tr.onExit(1, ok))
	if tr.phase != finishing || tr.code != 0 {
		t.Fatalf("phase %v, code %d", tr.phase, tr.code)
	}
	if s := tr.summary(); !strings.HasSuffix(s, "1 exited 0, 1 killed by signal 9 (SIGKILL); 1 replacement started (budget 1)") {
		t.Fatalf("summary %q", s)
	}
}

// A replacement that cannot be started gives its share of the budget
// back, and the job is judged at once.
func TestTrackerDroppedReplacementJudgesJob(t *testing.T) {
	tr := respawnTracker(1, 1, 3)
	expect(t, "killed", tr.onExit(0, killed), "notice!", "respawn:0=r0")
	expect(t, "no room", tr.respawnDropped("no replacement for lost r0: no node of the allocation has room"),
		"notice!:no replacement for lost r0: no node", "notice!:job failed: rank 0 lost its process and no process took over")
	if tr.code != ExitLost || tr.restarts != 0 || tr.queued != 0 {
		t.Fatalf("code %d, restarts %d, queued %d", tr.code, tr.restarts, tr.queued)
	}
	if s := tr.summary(); !strings.HasSuffix(s, "; 0 replacements started (budget 3)") {
		t.Fatalf("summary %q", s)
	}
}

// The budget bounds the replacements, and its end is said once.
func TestTrackerRespawnBudget(t *testing.T) {
	tr := respawnTracker(1, 4, 1)
	expect(t, "spare 1 killed", tr.onExit(1, killed), "notice!:spare process 1 was killed", "respawn:1=s1")
	expect(t, "started", tr.respawnStarted(4, "", "s1"), "notice:respawned s4 on this machine for lost s1 (1 of 1)")
	expect(t, "spare 2 killed", tr.onExit(2, killed), "notice!:spare process 2 was killed",
		"notice!:the replacement budget is used up (--max-restarts 1): lost s2 is not replaced, nor will later losses be")
	expect(t, "spare 3 killed", tr.onExit(3, killed), "notice!:spare process 3 was killed")
}

// Processes that lost their rank count as lost whatever their exit (77
// after a takeover), those that exit 0 or fail a job do not, and nothing
// is replaced once the outcome is decided or before the job formed.
func TestTrackerRespawnOnlyForLossesWhileRunning(t *testing.T) {
	tr := respawnTracker(2, 3, 5)
	expect(t, "spare 2 takes rank 1", tr.onReport(role(2, 1, 2)),
		"relabel:1=p1", "notice:process 1 no longer holds rank 1", "relabel:2=r1", "notice")
	expect(t, "the replaced process exits 77", tr.onExit(1, fenced),
		"notice:process 1 (formerly rank 1) exited with code 77 after it was replaced", "respawn:1=p1")
	expect(t, "rank 0 exits 0", tr.onExit(0, ok))
	expect(t, "rank 1 exits 0", tr.onExit(2, ok))
	if tr.phase != finishing {
		t.Fatalf("phase %v", tr.phase)
	}
	expect(t, "a late replacement is dropped silently", tr.respawnDropped(""))

	tr = respawnTracker(2, 3, 5)
	expect(t, "rank 1 fails", tr.onExit(1, code3), "notice!:job failed", "teardown")
	expect(t, "torn-down spare", tr.onExit(2, killed))

	tr = newTracker(2, 2, DeathContinue)
	tr.maxRestarts = 5
	expect(t, "death before the job formed", tr.onExit(1, killed), "notice!:job failed: rank 1 (process 1) was killed", "teardown")
}

// Ids skipped between replacements (reserved, never started) are no
// processes: not waited for, not counted, and their reports are ignored.
func TestTrackerAddProcWithGap(t *testing.T) {
	tr := respawnTracker(1, 2, 4)
	if !tr.addProc(5, "", false) || tr.addProc(5, "", false) {
		t.Fatal("addProc: want true once")
	}
	if tr.nProcs != 6 || tr.live() != 3 || !tr.absent[3] || !tr.absent[4] || tr.absent[5] {
		t.Fatalf("%d ids, %d live, absent %v", tr.nProcs, tr.live(), tr.absent)
	}
	expect(t, "an absent id's exit", tr.onExit(3, killed))
	expect(t, "an absent id's report", tr.onReport(role(4, 0, 3)))
	if s := tr.summary(); !strings.HasPrefix(s, "3 processes (1 rank + 1 spare + 1 joined): 3 still running") {
		t.Fatalf("summary %q", s)
	}
	if _, c := tr.statusState(); c.spares != 2 || c.ended != 0 {
		t.Fatalf("status %+v", c)
	}
}

// Rule (cmd/gaspirun, Keeping the spare pool full): a joiner started by
// hand is tracked from its registration; its disconnection ends it as the
// end of its work, unless another process takes its rank over, which
// makes it a loss to replace.
func TestTrackerJoinerByHand(t *testing.T) {
	tr := respawnTracker(2, 2, 4)
	tr.hosts = []string{"h0", "h1"}
	expect(t, "joins by hand", tr.onJoined(4, "laptop", "pid 9 on laptop"),
		"notice:process 4 joined the running job by hand (pid 9 on laptop); it waits as spare s4")
	if !tr.isByHand(4) || !tr.registered[4] || tr.hosts[4] != "laptop" || tr.describe(4) != "spare process 4 on laptop (joined by hand)" {
		t.Fatalf("byHand %v, registered %v, host %q, %q", tr.isByHand(4), tr.registered[4], tr.hosts[4], tr.describe(4))
	}
	expect(t, "rank 1 killed", tr.onExit(1, killed), "notice!", "respawn:1=r1")
	expect(t, "the joiner takes rank 1", tr.onReport(role(4, 1, 2)), "relabel:4=r1", "notice")
	expect(t, "it disconnects", tr.onGone(4),
		"notice:rank 1 (process 4 on laptop) left the rendezvous; gaspirun has no exit status for it and counts it as ended")
	expect(t, "rank 0 finishes", tr.onExit(0, ok))
	if tr.phase != finishing || tr.code != 0 {
		t.Fatalf("phase %v, code %d", tr.phase, tr.code)
	}
	if s := tr.summary(); !strings.Contains(s, "1 ended (joined by hand: no exit status)") || !strings.Contains(s, "+ 1 joined") {
		t.Fatalf("summary %q", s)
	}

	tr = respawnTracker(2, 3, 4)
	tr.onJoined(5, "", "pid 9 on laptop")
	tr.onExit(1, killed)
	tr.respawnDropped("")
	tr.onReport(role(5, 1, 2))
	expect(t, "the joiner holding rank 1 disconnects", tr.onGone(5), "notice")
	expect(t, "the spare takes rank 1 over", tr.onReport(role(2, 1, 3)),
		"relabel:5=p5", "notice:process 5 no longer holds rank 1 (replaced)", "respawn:5=r1", "relabel:2=r1", "notice")
	expect(t, "a second disconnection", tr.onGone(5))
}

// Rule (cmd/gaspirun, Keeping the spare pool full): a replacement goes to
// a host that is not lost, with a free slot first, then the fewest live
// processes, then the earlier host; under Slurm only a node with room.
func TestPickHost(t *testing.T) {
	hosts := []HostSlots{{"a", 2}, {"b", 2}, {"c", 2}}
	cases := []struct {
		name     string
		use      []hostUse
		needRoom bool
		want     int
		why      string
	}{
		{"where the process died", []hostUse{{placed: 2, live: 1, died: 1}, {placed: 2, live: 2}, {placed: 2, live: 2}}, false, 0, ""},
		{"a lost host's processes go elsewhere", []hostUse{{placed: 2, died: 2}, {placed: 2, live: 2}, {placed: 1, live: 1}}, false, 2, ""},
		{"the fewest live among free", []hostUse{{placed: 2, live: 1, died: 1}, {placed: 1}, {placed: 2, live: 2}}, false, 1, ""},
		{"a failed start makes a host lost", []hostUse{{placed: 1, failed: true}, {placed: 2, live: 1}, {placed: 2, live: 1}}, false, 1, ""},
		{"over ssh a full host rather than none", []hostUse{{placed: 2, died: 2}, {placed: 3, live: 3}, {placed: 2, live: 2}}, false, 2, ""},
		{"under Slurm only room", []hostUse{{placed: 2, died: 2}, {placed: 2, live: 2}, {placed: 2, live: 2}}, true, -1,
			"no node of the allocation has room: a (every process placed there died), b (2 of its 2 slots in use), c (2 of its 2 slots in use)"},
		{"every host lost", []hostUse{{placed: 2, died: 2}, {failed: true}, {placed: 1, died: 1}}, false, -1,
			"every host is lost: a (every process placed there died), b (a start there failed), c (every process placed there died)"},
		{"an unused host is not lost", []hostUse{{placed: 2, died: 2}, {placed: 2, live: 2}, {}}, true, 2, ""},
		{"among hosts with room, one with no loss", []hostUse{{placed: 2, live: 2}, {placed: 2, live: 1, died: 1}, {placed: 1, live: 1}}, false, 2, ""},
		{"no loss before fewer live", []hostUse{{placed: 2, live: 0, died: 1}, {placed: 2, live: 1}, {placed: 2, live: 2}}, false, 1, ""},
	}
	for _, c := range cases {
		got, why := pickHost(hosts, c.use, c.needRoom)
		if got != c.want || why != c.why {
			t.Errorf("%s: host %d (%q), want %d (%q)", c.name, got, why, c.want, c.why)
		}
	}
}

// hostUse counts what gaspirun placed on each host, without joiners by
// hand or hosts outside the placement.
func TestTrackerHostUse(t *testing.T) {
	tr := respawnTracker(3, 4, 4)
	tr.hosts = []string{"a", "a", "b", "b"}
	tr.onExit(1, killed)
	tr.respawnStarted(4, "c", "r1")
	tr.onJoined(5, "a", "pid 1 on a")
	hosts := []HostSlots{{"a", 2}, {"b", 2}, {"c", 1}}
	got := tr.hostUse(hosts)
	want := []hostUse{{placed: 2, live: 1, ranks: 1, died: 1}, {placed: 2, live: 2, ranks: 1}, {placed: 1, live: 1}}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("host %s: %+v, want %+v", hosts[i].Name, got[i], want[i])
		}
	}
	tr.onExit(0, killed)
	if u := tr.hostUse(hosts)[0]; !u.lost() {
		t.Errorf("host a with every process dead: %+v is not lost", u)
	}
}

// An exit held back before it is judged (ExitSettle) counts as gone for
// the placement already: a host whose last live process has just died is
// lost, and the replacement of its first loss goes elsewhere.
func TestTrackerHostUseCountsSettlingExits(t *testing.T) {
	tr := respawnTracker(4, 5, 4)
	tr.hosts = []string{"a", "a", "b", "b", "c"}
	hosts := []HostSlots{{"a", 2}, {"b", 2}, {"c", 2}}
	lost := exitInfo{Code: -1, Signal: syscall.SIGKILL, LostCode: 255, Lost: "ssh to b exited with code 255 without the process's exit status"}
	tr.onExit(2, lost)
	tr.exitSeen(3, lost) // held for ExitSettle
	use := tr.hostUse(hosts)
	if u := use[1]; !u.lost() || u.live != 0 || u.died != 2 {
		t.Fatalf("host b with one exit judged and one settling: %+v, want lost", u)
	}
	if i, why := pickHost(hosts, use, false); i != 2 {
		t.Fatalf("replacement placed on host %d (%q), want c", i, why)
	}
	expect(t, "the settled exit", tr.onExit(3, lost), "notice!:rank 3 (process 3 on b) was lost", "respawn:3=r3")
	if u := tr.hostUse(hosts)[1]; u.died != 2 || u.placed != 2 {
		t.Fatalf("host b after both exits judged: %+v", u)
	}
	// A process the membership replaced is as good as dead, even before
	// its exit arrives.
	tr.onReport(role(4, 0, 2))
	if u := tr.hostUse(hosts)[0]; u.live != 1 || u.died != 1 {
		t.Fatalf("host a with rank 0's holder replaced: %+v, want 1 live and 1 died", u)
	}
	// A settling exit 0 is an end, not a death.
	tr.exitSeen(1, ok)
	if u := tr.hostUse(hosts)[0]; u.live != 0 || u.died != 1 || !u.lost() {
		t.Fatalf("host a with rank 0's holder replaced and an exit 0 settling: %+v, want lost", u)
	}
}

// A replacement whose ssh ended without an exit status before it
// registered did not start: its host is marked failed, the replacement is
// asked for again at no cost to the budget, and the next one goes to
// another host.
func TestTrackerFailedStartMarksHost(t *testing.T) {
	tr := respawnTracker(2, 3, 1)
	tr.hosts = []string{"a", "b", "c"}
	expect(t, "rank 1 killed", tr.onExit(1, killed), "notice!:", "respawn:1=r1")
	tr.respawnStarted(3, "b", "r1")
	down := exitInfo{Code: -1, Signal: syscall.SIGKILL, LostCode: 255, Lost: "ssh to b exited with code 255 without the process's exit status"}
	expect(t, "its ssh fails", tr.onExit(3, down),
		"hostfailed:b", "notice!:could not start replacement s3 on host b (lost: ssh to b exited with code 255", "respawn:3=s3")
	if tr.restarts != 1 || tr.queued != 1 {
		t.Fatalf("budget: %d asked for, %d queued; want the failed start given back (1, 1)", tr.restarts, tr.queued)
	}
	// Once it registered, the same end is a lost process: the budget of 1
	// is spent, and said so.
	tr.respawnStarted(4, "c", "s3")
	tr.onJoined(4, "c", "pid 9 on c")
	expect(t, "the registered replacement is lost", tr.onExit(4, exitInfo{Code: -1, Signal: syscall.SIGKILL, LostCode: 255, Lost: "ssh to c exited with code 255"}), "notice!:spare process 4 on c was lost", "notice!:the replacement budget is used up")
}

// Lines of a process that joined later collapse with the others'.
func TestCollapserTakesJoinedProcess(t *testing.T) {
	c := newCollapser(time.Second, 2, 1<<20)
	now := time.Unix(0, 0)
	if out := c.add(now, 0, "r0", streamStdout, "x"); len(out) != 0 {
		t.Fatalf("printed at once: %v", out)
	}
	c.addProc()
	if out := c.add(now, 5, "s5", streamStdout, "x"); len(out) != 0 {
		t.Fatalf("the joiner's line was not held: %v", out)
	}
	out := c.add(now, 1, "r1", streamStdout, "x")
	if len(out) != 1 || out[0].labels != "r0-1,s5" {
		t.Fatalf("got %+v, want one line for r0-1,s5", out)
	}
}

// respawnChecks are what every launcher's respawn test expects: the job
// recovers through the replacement, which joined with the reserved id 2
// on host (PGAS_HOST) and took rank 1.
func respawnChecks(t *testing.T, res Result, out, errs *watchBuffer, on string) {
	t.Helper()
	if res.ExitCode != 0 {
		dump(t, out, errs)
		t.Fatalf("exit %d: %s", res.ExitCode, res.Reason)
	}
	for _, w := range []string{
		"gaspirun: respawned s2 " + on + " for lost r1 (1 of 2)\n",
		"gaspirun: s2 joined the job as a spare (pid ",
		"now holds rank 1 (epoch 2)\n",
		"gaspirun: 3 processes (2 ranks + 0 spares + 1 joined): 2 exited 0, 1 killed by signal 9 (SIGKILL); 1 replacement started (budget 2); exit 0",
	} {
		if !strings.Contains(errs.String(), w) {
			dump(t, out, errs)
			t.Fatalf("stderr lacks %q", w)
		}
	}
	if !regexp.MustCompile(`\[(s2|r1)\] joined as 2 on \S+, holding rank 1\n`).MatchString(out.String()) {
		dump(t, out, errs)
		t.Fatal("the replacement's line is missing")
	}
	if len(res.Procs) != 3 {
		t.Fatalf("%d processes in the result, want 3: %+v", len(res.Procs), res.Procs)
	}
	if p := res.Procs[2]; p.Proc != 2 || p.Code != 0 || p.Label != "r1" || p.Stopped {
		t.Errorf("the replacement: %+v; want process 2 holding r1, exited 0", p)
	}
	if p := res.Procs[1]; p.Signal != syscall.SIGKILL {
		t.Errorf("rank 1's process %+v: want killed by SIGKILL", p)
	}
}

// Rule (cmd/gaspirun, Keeping the spare pool full): with no spare, a
// killed rank is replaced by a process started with PGAS_JOIN=1 and a
// reserved id, which takes the rank; the job exits 0.
func TestRespawnLocal(t *testing.T) {
	cfg, out, errs := jobConfig("refill", 2, 0)
	cfg.Env = append(cfg.Env, dirVar+"="+t.TempDir())
	cfg.MaxRestarts = 2
	res := run(t, context.Background(), cfg)
	respawnChecks(t, res, out, errs, "on this machine")
}

// Over ssh, the host whose every process died is lost: the replacement
// goes to the free host.
func TestRespawnSSHAvoidsLostHost(t *testing.T) {
	cfg, out, errs, dir := remoteJob(t, "refill", 2, 0, 1, 1, 1)
	cfg.MaxRestarts = 2
	res := run(t, context.Background(), cfg)
	respawnChecks(t, res, out, errs, "on host h2")
	if res.Procs[2].Host != "h2" || !strings.Contains(out.String(), "joined as 2 on h2") {
		dump(t, out, errs)
		t.Errorf("the replacement ran on %q, want h2", res.Procs[2].Host)
	}
	if _, err := os.Stat(filepath.Join(dir, "fakessh.h2.argv")); err != nil {
		t.Errorf("no ssh session to h2: %v", err)
	}
	waitNoRemoteSides(t)
}

// Under Slurm a replacement is a step of its own, of one task on a node
// with room.
func TestRespawnSlurmStepOfOne(t *testing.T) {
	dir := t.TempDir()
	fakeSlurm(t, dir)
	cfg, out, errs := jobConfig("refill", 2, 0)
	cfg.Launcher = LauncherAuto
	cfg.RemoteCommand = []string{os.Args[0], "--remote-exec"}
	cfg.Env = append(cfg.Env, dirVar+"="+dir)
	cfg.MaxRestarts = 2
	slurm := map[string]string{"SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "node[1-3]", "SLURM_TASKS_PER_NODE": "1(x3)"}
	cfg.LookupEnv = func(k string) (string, bool) { v, ok := slurm[k]; return v, ok }
	res := run(t, context.Background(), cfg)
	respawnChecks(t, res, out, errs, "on host node3")
	argv, err := os.ReadFile(filepath.Join(dir, "fakesrun.node3.argv"))
	if err != nil {
		dump(t, out, errs)
		t.Fatal(err)
	}
	want := []string{"--ntasks=1", "--nodes=1", "--nodelist=node3", "--overlap", "--kill-on-bad-exit=0", "--no-kill", os.Args[0], "--remote-exec"}
	if got := strings.Split(string(argv), "\x00")[1:]; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("the replacement's srun argv %q, want %q", got, want)
	}
	waitNoRemoteSides(t)
}

// A replacement that could not join (exit 69: no membership took it in,
// the job's processes were ending) never held a rank: it does not fail a
// job whose ranks finish (the membership decides the fate of a rank that
// waits for it).
func TestTrackerReplacementThatCannotJoin(t *testing.T) {
	tr := respawnTracker(2, 3, 2)
	expect(t, "rank 1 killed", tr.onExit(1, killed), "notice!:rank 1 (process 1) was killed", "respawn:1=r1")
	expect(t, "spare 2 takes rank 1", tr.onReport(role(2, 1, 2)), "relabel:2=r1", "notice:spare process 2 now holds rank 1 (epoch 2)")
	expect(t, "replacement started", tr.respawnStarted(3, "", "r1"), "notice:respawned s3 on this machine for lost r1 (1 of 2)")
	expect(t, "it cannot join", tr.onExit(3, exitInfo{Code: 69}),
		"notice:spare process 3 could not join the running job (exit 69); the job goes on without it")
	if tr.phase != running {
		t.Fatalf("phase %v after a replacement's 69: the job was failed", tr.phase)
	}
	expect(t, "rank 0 done", tr.onExit(0, ok))
	expect(t, "rank 1 done", tr.onExit(2, ok))
	if tr.code != 0 || !tr.done() {
		t.Fatalf("code %d, done %v", tr.code, tr.done())
	}
	// A process of the job's own that exits 69 still fails it.
	tr = respawnTracker(2, 3, 2)
	expect(t, "rank 0 exits 69", tr.onExit(0, exitInfo{Code: 69}), "notice!:job failed", "teardown")
	if tr.code != 69 {
		t.Fatalf("code %d, want 69", tr.code)
	}
}
