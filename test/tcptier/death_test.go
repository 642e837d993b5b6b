package tcptier

import (
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
)

// maxDetection bounds how long after SIGKILL a blocked operation may take
// to return its *pgas.RankError. The kernel closes a killed process's
// sockets at once, so this is mostly scheduling on a busy host.
const maxDetection = 5 * time.Second

// deathOps are the operations ranks 0 and 1 block in (testprog/semantics,
// faultDeath), each on rank 2.
var deathOps = []string{
	"barrier", "wait_retry", "write_notify_wait", "read_wait",
	"fetch_add", "compare_swap", "passive_send", "notify_barrier",
}

// Rule: a peer whose connection is lost gives a *RankError, promptly, for
// every operation waiting on it; no call blocks forever. Three ranks; rank
// 2 is first stopped (SIGSTOP): operations on it with short deadlines time
// out, without a RankError and without marking it suspect. Then ranks 0
// and 1 block on it in eight ways and it is killed (SIGKILL): all sixteen
// operations end in a RankError naming rank 2 within maxDetection, later
// operations on it fail at once, and the survivors exit 0. With
// --on-death continue and no spare, gaspirun lets the survivors finish,
// then exits 1 because rank 2 was lost; nothing is left behind.
func TestPeerKilledGivesRankError(t *testing.T) {
	gate := t.TempDir()
	j := startJob(t, []string{"-n", "3", "--on-death", "continue", "--grace", "1s"}, "-case", "death", "-gate", gate)
	j.waitLines("READY", nil, 3, jobDeadline/2)
	victim := j.pid(2)
	if err := syscall.Kill(victim, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP rank 2 (pid %d): %v", victim, err)
	}
	// Only once it is stopped: on a busy machine its threads ran on for
	// a while after kill returned, and acknowledged rank 1's write.
	if err := proctest.WaitStopped(victim, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	touch(t, gate, "stopped")
	j.waitLines("BLOCKING", nil, 2*len(deathOps), jobDeadline/2)
	// Give the operations time to reach their waits. What is checked does
	// not depend on it: an operation that starts after the kill must fail
	// with the same error, at once.
	time.Sleep(300 * time.Millisecond)
	killed := time.Now()
	if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL rank 2 (pid %d): %v", victim, err)
	}
	code := j.wait()

	j.requirePass("stopped-timeout", 0, 1)
	got := map[string]bool{}
	var worst time.Duration
	for _, l := range j.all("RANKERR") {
		r, op := l.int("rank"), l.kv["op"]
		at, _ := strconv.ParseInt(l.kv["at"], 10, 64)
		lat := time.Unix(0, at).Sub(killed)
		got[strconv.Itoa(r)+"/"+op] = true
		if l.kv["ok"] != "true" {
			t.Errorf("rank %d %s: %s; want a *pgas.RankError naming rank 2", r, op, l.kv["err"])
			continue
		}
		if lat > maxDetection {
			t.Errorf("rank %d %s: RankError %v after SIGKILL, want under %v", r, op, lat, maxDetection)
		}
		worst = max(worst, lat)
		t.Logf("rank %d %-17s RankError %7.1f ms after SIGKILL: %s", r, op, float64(lat.Microseconds())/1000, l.kv["err"])
	}
	for _, r := range []string{"0", "1"} {
		for _, op := range deathOps {
			if !got[r+"/"+op] {
				t.Errorf("no outcome for rank %s %s", r, op)
			}
		}
	}
	t.Logf("slowest detection: %v (bound %v)", worst, maxDetection)
	j.requirePass("death", 0, 1)
	stderr := j.stderrText()
	for _, want := range []string{
		"rank 2 (process 2) was killed by signal 9 (SIGKILL); the job continues",
		"rank 2 lost its process and no process took over",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("gaspirun's stderr lacks %q", want)
		}
	}
	if code != 1 {
		t.Errorf("gaspirun exited %d, want 1 (a rank lost and not taken over)", code)
	}
	j.checkNoRace()
	j.requireGone()
}

// With --spares 0 and no --on-death, gaspirun's policy is abort: a rank
// killed by a signal tears the job down and gaspirun exits 128+9, naming
// the rank; nothing is left behind. The survivors, blocked in a barrier on
// the dead rank, wait to be stopped.
func TestPeerKilledAbortsJobByDefault(t *testing.T) {
	j := startJob(t, []string{"-n", "3", "--grace", "1s"}, "-case", "death", "-mode", "abort")
	j.waitLines("READY", nil, 3, jobDeadline/2)
	j.waitLines("BLOCKING", nil, 2, jobDeadline/2)
	victim := j.pid(2)
	if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL rank 2 (pid %d): %v", victim, err)
	}
	code := j.wait()
	if code != 128+9 {
		t.Errorf("gaspirun exited %d, want %d", code, 128+9)
	}
	if want := "rank 2 (process 2) was killed by signal 9 (SIGKILL); stopping the other 2 processes"; !strings.Contains(j.stderrText(), want) {
		t.Errorf("gaspirun's stderr lacks %q", want)
	}
	// Whether the survivors print their error before gaspirun stops them
	// is a race; what they print must be a RankError.
	for _, l := range j.all("RANKERR") {
		if l.kv["ok"] != "true" {
			t.Errorf("rank %s barrier: %s; want a RankError naming rank 2", l.kv["rank"], l.kv["err"])
		}
	}
	j.checkNoRace()
	j.requireGone()
}
