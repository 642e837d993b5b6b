package sshtier

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
	"github.com/gaspigo/gaspigo/internal/testkit/simhost"
)

// launch is gaspirun --hostfile over the hosts' sshds.
func (s *sshHosts) launch(t *testing.T, kmArgs []string) *run {
	t.Helper()
	return gaspirun(t, []string{"-n", "4", "--spares", "2", "--hostfile", s.hostfile,
		"--ssh", "ssh -F " + s.sshConfig, "--timeout", jobWait.String()}, kmArgs)
}

// TestSSHHostCrash: node2 (ranks 2 and 3, and its sshd) is SIGKILLed after
// iteration 10; the spares on node3 take over and the job ends with exit
// 0 and the failure-free answer, leaving nothing behind anywhere.
func TestSSHHostCrash(t *testing.T) {
	require(t)
	ref := reference(t, faulted)
	s := newSSHHosts(t)
	since := time.Now().Add(-time.Second)
	r := s.launch(t, faulted)
	r.waitLine(t, "the placement", func(l string) bool {
		return strings.HasPrefix(l, "gaspirun: ssh launch, rendezvous "+s.c.FrontAddr().String()+":") &&
			strings.HasSuffix(l, "placement: node1: r0-1; node2: r2-3; node3: s4-5")
	})
	r.waitIter(t, 10)

	// The token: in the processes' environments, in no argv and no file.
	pid := s.kmeansOn(0)
	if pid == 0 {
		t.Fatalf("no kmeans on node1: %v", s.jobProcs(0))
	}
	token, ok := proctest.EnvOf(pid, "PGAS_TOKEN")
	if !ok || len(token) < 32 {
		t.Fatalf("kmeans on node1 has no job token (%q)", token)
	}
	if hits := proctest.ArgvsWith(token); len(hits) > 0 {
		t.Errorf("the job token is in argvs:\n%s", strings.Join(hits, "\n"))
	}
	// Crash node2 at once (the job runs for well under a second more);
	// the files are searched for the token afterwards.
	killed, err := s.c.Crash(s.c.Host(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("crashed node2: killed %d processes", len(killed))
	roots := []string{s.dir, os.TempDir()}
	for _, h := range s.c.Hosts() {
		roots = append(roots, h.Dir())
	}
	for _, root := range roots {
		if hits := proctest.FilesWith(root, token, since, root != os.TempDir()); len(hits) > 0 {
			t.Errorf("the job token is in files: %v", hits)
		}
	}

	out := s.recovered(t, r, ref, 2, 3)
	for _, rank := range []int{2, 3} {
		lost := fmt.Sprintf("process %d on node2", rank)
		if !strings.Contains(out, lost) || !strings.Contains(out, "was lost: ssh to node2") {
			t.Errorf("no loss of %s reported:\n%s", lost, out)
		}
	}
	s.waitHostsClean(t)
}

// TestSSHHostCutOff: node2 (ranks 2 and 3) drops off the network for good
// after iteration 10, silently. The spares take over and the job ends with
// exit 0 and the failure-free answer; gaspirun stops node2's unreachable
// processes through their connections, and on node2 nothing of the job
// outlives its ssh sessions (ended by sshd's ClientAlive bound or the
// remote side's missing pings).
func TestSSHHostCutOff(t *testing.T) {
	require(t)
	ref := reference(t, faulted)
	s := newSSHHosts(t)
	r := s.launch(t, faulted)
	r.waitIter(t, 10)
	if err := s.c.Cut(s.c.Host(1), simhost.Silent); err != nil {
		t.Fatal(err)
	}
	out := s.recovered(t, r, ref, 2, 3)
	ended := time.Now()
	s.waitHostsClean(t)
	t.Logf("gaspirun's last lines:\n%s\nnode2 clean %v after gaspirun's exit", lastLines(out, 4), time.Since(ended).Round(time.Millisecond))
}

// TestSSHRendezvousHostCrash: node1, which runs process 0 (rank 0) and
// rank 1, is SIGKILLed with its sshd after iteration 10. The spares on
// node3 take ranks 0 and 1, the new rank 0 prints the answer, and the job
// ends with exit 0 and the failure-free answer, nothing left anywhere.
func TestSSHRendezvousHostCrash(t *testing.T) {
	require(t)
	ref := reference(t, faulted)
	s := newSSHHosts(t)
	r := s.launch(t, faulted)
	r.waitIter(t, 10)
	if _, err := s.c.Crash(s.c.Host(0)); err != nil {
		t.Fatal(err)
	}
	out := s.recovered(t, r, ref, 0, 1)
	for _, p := range []int{0, 1} {
		if lost := fmt.Sprintf("process %d on node1", p); !strings.Contains(out, lost) {
			t.Errorf("no loss of %s reported:\n%s", lost, out)
		}
	}
	s.waitHostsClean(t)
}

// TestSSHHostCutAndHealed: node2 (ranks 2 and 3) drops off the network
// silently for 4 s after iteration 10, then comes back. The spares took
// its ranks meanwhile; on healing node2's processes learn it and end by
// themselves as fenced (77) or cut off (74), which gaspirun counts as no
// failure: the job exits 0 with the failure-free answer.
func TestSSHHostCutAndHealed(t *testing.T) {
	require(t)
	// Long enough that node2's processes end before the job does.
	long := withMaxIter(workload, 5000)
	ref := reference(t, long)
	s := newSSHHosts(t)
	r := s.launch(t, long)
	r.waitIter(t, 10)
	node2 := s.c.Host(1)
	if err := s.c.Cut(node2, simhost.Silent); err != nil {
		t.Fatal(err)
	}
	time.Sleep(4 * time.Second) // the scenario: a partition this long
	if err := s.c.Heal(node2); err != nil {
		t.Fatal(err)
	}
	out := s.recovered(t, r, ref, 2, 3)
	if !strings.Contains(out, "4 exited 0, 2 exited with code 77;") {
		t.Errorf("node2's processes did not end by themselves as fenced before the job's end:\n%s", lastLines(out, 4))
	}
	ended := time.Now()
	s.waitHostsClean(t)
	t.Logf("gaspirun's last lines:\n%s\nnode2 clean %v after gaspirun's exit", lastLines(r.output(), 4), time.Since(ended).Round(time.Millisecond))
}

// recovered waits for gaspirun and checks a recovered job's end: exit 0,
// the failure-free answer ref, and a promotion for each of ranks. It
// returns gaspirun's output.
func (s *sshHosts) recovered(t *testing.T, r *run, ref string, ranks ...int) string {
	t.Helper()
	code := r.wait(t)
	out := r.output()
	if code != 0 {
		t.Fatalf("gaspirun exited %d, want 0:\n%s", code, out)
	}
	if got := r.final(); got != ref {
		t.Fatalf("answer %q, want the failure-free %q:\n%s", got, ref, out)
	}
	for _, rank := range ranks {
		if !strings.Contains(out, fmt.Sprintf("now holds rank %d", rank)) {
			t.Errorf("no promotion to rank %d reported:\n%s", rank, out)
		}
	}
	return out
}

// faulted is the workload of the jobs a fault strikes after iteration 10:
// long enough (a few seconds of iterations on a quiet machine) that the fault
// finds the job still running, however late the test sees iteration 10.
var faulted = withMaxIter(workload, 1000)

// withMaxIter is kmArgs with --max-iter n.
func withMaxIter(kmArgs []string, n int) []string {
	out := slices.Clone(kmArgs)
	i := slices.Index(out, "--max-iter")
	out[i+1] = strconv.Itoa(n)
	return out
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	return strings.Join(l[max(0, len(l)-n):], "\n")
}

// TestSSHDroppedConnectionAndInterrupt: the ssh clients of node2's two
// ranks are SIGKILLed: the sshd ends their sessions, the remote sides kill
// the ranks, and the spares take over. Then SIGINT to gaspirun tears the
// job down on every host.
func TestSSHDroppedConnectionAndInterrupt(t *testing.T) {
	require(t)
	s := newSSHHosts(t)
	r := s.launch(t, withMaxIter(workload, 1000000))
	r.waitIter(t, 5)
	victims := sshClientsTo(r.cmd.Process.Pid, "node2")
	if len(victims) != 2 {
		t.Fatalf("ssh clients to node2: %v, want 2", victims)
	}
	for _, pid := range victims {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	r.waitLine(t, "the promotions", func(l string) bool {
		return strings.Contains(l, "now holds rank 3") || strings.Contains(l, "now holds rank 2")
	})
	r.waitLine(t, "the recovery", func(l string) bool { return strings.HasPrefix(l, "[r0] recovery: epoch ") })
	if left := s.jobProcs(1); len(left) > 0 {
		// The sessions end within sshd's ClientAliveInterval at worst.
		deadline := time.Now().Add(endWait)
		for len(left) > 0 && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond) // real processes: poll with a deadline
			left = s.jobProcs(1)
		}
		if len(left) > 0 {
			t.Fatalf("node2 still runs after its connections dropped:\n%s", strings.Join(left, "\n"))
		}
	}
	r.cmd.Process.Signal(syscall.SIGINT)
	if code := r.wait(t); code != 130 {
		t.Fatalf("gaspirun exited %d after SIGINT, want 130:\n%s", code, r.output())
	}
	if out := r.output(); !strings.Contains(out, "interrupted by SIGINT") {
		t.Errorf("no interruption reported:\n%s", out)
	}
	s.waitHostsClean(t)
}

// sshClientsTo lists gaspirun's ssh children whose host is host.
func sshClientsTo(parent int, host string) []int {
	return proctest.Find(func(_, ppid int, argv []string) bool {
		return ppid == parent && filepath.Base(argv[0]) == "ssh" && len(argv) >= 2 && argv[len(argv)-2] == host
	})
}
