package tcptier

import (
	"strings"
	"testing"
	"time"
)

// gaspirun: a process that exits with a non-zero code fails the job;
// gaspirun names the rank and the code, stops the others, exits with that
// code, and leaves nothing behind. Rank 1 exits 3 after a barrier; ranks 0
// and 2 wait on a local notification until they are stopped.
func TestExitCodeNamesRank(t *testing.T) {
	j := startJob(t, []string{"-n", "3", "--grace", "1s"}, "-case", "exit")
	code := j.wait()
	if code != 3 {
		t.Errorf("gaspirun exited %d, want 3", code)
	}
	stderr := j.stderrText()
	for _, want := range []string{
		"rank 1 (process 1) exited with code 3; stopping the other 2 processes",
		"job failed: rank 1 (process 1) exited with code 3",
		"exit 3;",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("gaspirun's stderr lacks %q", want)
		}
	}
	if len(j.all("EXITING")) != 1 {
		t.Errorf("rank 1 did not reach its exit")
	}
	j.checkNoRace()
	j.requireGone()
}

// gaspirun --timeout: a job that hangs is torn down at the timeout with
// exit 124: SIGTERM to every process group, SIGKILL after --grace for a
// process that ignores SIGTERM (rank 1 here), and a child that rank 0
// started goes with its group. No process is left.
func TestTimeoutTearsDownHangingJob(t *testing.T) {
	const timeout, grace = 3 * time.Second, time.Second
	j := startJob(t, []string{"-n", "3", "--timeout", timeout.String(), "--grace", grace.String()}, "-case", "hang", "-mode", "stubborn")
	j.waitLines("READY", nil, 3, timeout)
	j.waitLines("SLEEPER", nil, 1, timeout)
	code := j.wait()
	if code != 124 {
		t.Errorf("gaspirun exited %d, want 124", code)
	}
	if j.wall < timeout || j.wall > timeout+grace+10*time.Second {
		t.Errorf("the job ended after %v; want about --timeout %v plus at most --grace %v", j.wall, timeout, grace)
	}
	if want := "timeout: the job ran longer than --timeout 3s"; !strings.Contains(j.stderrText(), want) {
		t.Errorf("gaspirun's stderr lacks %q", want)
	}
	if n := len(j.allPids()); n != 3+1 { // the ranks and rank 0's child
		t.Errorf("%d pids reported, want 4", n)
	}
	t.Logf("torn down after %v", j.wall.Round(time.Millisecond))
	j.checkNoRace()
	j.requireGone()
}
