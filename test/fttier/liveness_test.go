package fttier

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/internal/auth"
	"github.com/gaspigo/gaspigo/internal/netfault"
)

// netfaults gives a job a netfault rules directory (PGAS_NETFAULTS) and
// returns a function that replaces its rules.
func netfaults(t *testing.T, o *jobOpts) func(rules string) {
	dir := t.TempDir()
	o.env = append(o.env, netfault.EnvVar+"="+dir)
	return func(rules string) {
		t.Helper()
		tmp := filepath.Join(dir, "rules.tmp")
		if err := os.WriteFile(tmp, []byte(rules), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, netfault.RulesFile)); err != nil {
			t.Fatal(err)
		}
		t.Logf("netfault rules now %q", strings.TrimSpace(rules))
	}
}

// waitExitFile waits up to d for process p's exit file and returns it and
// when it appeared.
func (j *job) waitExitFile(p int, d time.Duration) (string, time.Time) {
	j.t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if s, ok := j.resultFile("exit", p); ok {
			return s, time.Now()
		}
		time.Sleep(20 * time.Millisecond) // real processes: poll with a deadline
	}
	j.fatalf("process %d wrote no exit file within %v", p, d)
	return "", time.Time{}
}

// TestPartitionedForGood: a rank cut off from every other process for good
// (internal/netfault, PGAS_CUTOFF=6s) is replaced by a spare, the job ends with the
// failure-free result and exit 0, and the cut-off process ends by itself
// with exit 74 once it has been without a membership quorum for
// PGAS_CUTOFF.
func TestPartitionedForGood(t *testing.T) {
	const cutOff = 6 * time.Second
	o := jobOpts{steps: 800, env: []string{"PGAS_CUTOFF=" + cutOff.String()}}
	setRules := netfaults(t, &o)
	j := startJob(t, o)
	leader := j.running()
	j.waitProgress(20, 1)
	victim := nonLeaderRanks(leader)[0]
	setRules(fmt.Sprintf("proc=%d partition\n", victim))
	at := time.Now()
	holder := j.waitHolder(victim)
	exit, when := j.waitExitFile(victim, stepWait)
	t.Logf("process %d ended %v after the partition: %s", victim, when.Sub(at).Round(time.Millisecond), exit)
	if !strings.HasPrefix(exit, "code=74 ") || !strings.Contains(exit, "cut off from the membership") {
		j.fatalf("process %d exit file %q, want code=74 and a message saying it was cut off", victim, exit)
	}
	if d := when.Sub(at); d < cutOff || d > cutOff+20*time.Second {
		j.fatalf("process %d ended %v after the partition, want soon after PGAS_CUTOFF=%v", victim, d, cutOff)
	}
	code := j.wait()
	if code != 0 {
		j.fatalf("gaspirun exit %d, want 0 (a recovered job)", code)
	}
	if e := j.checkResults(); e != 2 {
		j.fatalf("results in epoch %d, want 2", e)
	}
	if holder < ranks {
		j.fatalf("rank %d taken over by process %d, want a spare", victim, holder)
	}
	j.checkFailures(victim)
}

// TestPartitionHealedAfterReplacement: a rank and an idle spare cut off
// until both were declared failed and the rank taken over, then healed.
// Both learn that they were replaced and exit 77 promptly, well before the
// cut-off bound (or, when the failure took as long as that bound to
// commit on a starved machine, had given up as cut off, 74, before the
// heal); the job ends with the failure-free result and exit 0. The spare
// cut off must not lead (the membership would then elect another leader
// first, a different scenario), and idle spares often win the first
// election: ftstep -leader-on-rank moves the leadership onto a rank.
func TestPartitionHealedAfterReplacement(t *testing.T) {
	o := jobOpts{steps: 500, extra: []string{"-leader-on-rank"}}
	setRules := netfaults(t, &o)
	j := startJob(t, o)
	j.running()
	j.waitFor("rank 0 to put the Raft leadership on a rank", stepWait, func(recs []rec) bool {
		for _, x := range recs {
			if strings.Contains(x.raw, "leader-on-rank proc=") {
				return true
			}
		}
		return false
	})
	j.waitProgress(20, 1)
	recs := j.snapshot()
	leader := leaderAfter(recs, time.Time{})
	if first := slices.IndexFunc(recs, func(x rec) bool { return x.kind == "leader" }); first >= 0 && recs[first].proc() >= ranks {
		t.Logf("the idle spare %d won the first election; -leader-on-rank moved the leadership to process %d", recs[first].proc(), leader)
	}
	victim := nonLeaderRanks(leader)[0]
	spare := ranks + spares - 1 // the pool's last: the first spare takes the rank
	if leader < 0 || leader >= ranks {
		j.fatalf("process %d leads Raft after -leader-on-rank moved the leadership onto a rank (an election since?)", leader)
	}
	setRules(fmt.Sprintf("proc=%d partition\nproc=%d partition\n", victim, spare))
	holder := j.waitHolder(victim)
	j.waitFor(fmt.Sprintf("spare process %d to be declared failed", spare), stepWait, func(recs []rec) bool {
		for _, x := range recs {
			if x.kind == "log" && x.msg == "view applied" && strings.Contains(x.kv["failed"], fmt.Sprint(spare)) && x.proc() == holder {
				return true
			}
		}
		return false
	})
	setRules("")
	healed := time.Now()
	for _, p := range []int{victim, spare} {
		exit, when := j.waitExitFile(p, stepWait)
		t.Logf("process %d ended %v after the heal: %s", p, when.Sub(healed).Round(time.Millisecond), exit)
		if when.Before(healed) && strings.HasPrefix(exit, "code=74 ") {
			// On a starved machine the failure took as long to commit as
			// the cut-off bound: the process gave up by itself (cut off)
			// before anyone could tell it, which ends it as well.
			continue
		}
		if !strings.HasPrefix(exit, "code=77 ") {
			j.fatalf("process %d exit file %q, want code=77 (fenced), or 74 (cut off) before the heal", p, exit)
		}
		if d := when.Sub(healed); d > 8*time.Second {
			j.fatalf("process %d learnt it was replaced %v after the heal, want promptly (before the 10s cut-off)", p, d)
		}
	}
	code := j.wait()
	if code != 0 {
		j.fatalf("gaspirun exit %d, want 0 (a recovered job)", code)
	}
	if e := j.checkResults(); e < 2 {
		j.fatalf("results in epoch %d, want at least 2", e)
	}
	j.checkFailures(victim, spare)
}

// TestNobodyServesRendezvous: a process started by hand with PGAS_PROC set
// and nobody serving the rendezvous says so and exits 69 after
// PGAS_RENDEZVOUS_TIMEOUT, instead of retrying forever.
func TestNobodyServesRendezvous(t *testing.T) {
	if bins.err != nil {
		t.Skip(bins.err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(bins.prog, "-steps", "1")
	cmd.Env = append(os.Environ(), "PGAS_PROC=1", "PGAS_NPROCS=2", "PGAS_RENDEZVOUS="+addr,
		"PGAS_TOKEN="+auth.FormatToken(auth.NewToken()), "PGAS_RENDEZVOUS_TIMEOUT=2s")
	start := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	code := cmd.ProcessState.ExitCode()
	t.Logf("exit %d after %v", code, took.Round(time.Millisecond))
	if code != 69 {
		t.Fatalf("exit %d (%v), want 69; output:\n%s", code, err, out)
	}
	if took > 30*time.Second {
		t.Fatalf("gave up after %v, want soon after PGAS_RENDEZVOUS_TIMEOUT=2s", took)
	}
	for _, w := range []string{"PGAS_RENDEZVOUS_TIMEOUT", "PGAS_SERVE_RENDEZVOUS=1", addr} {
		if !strings.Contains(string(out), w) {
			t.Errorf("output does not mention %q:\n%s", w, out)
		}
	}
}
