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

	"github.com/gaspigo/gaspigo/internal/testkit/hostfault"
	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
	"github.com/gaspigo/gaspigo/internal/testkit/simhost"
)

// launch is gaspirun --hostfile over the hosts' sshds.
func (s *sshHosts) launch(t *testing.T, kmArgs []string) *run {
	t.Helper()
	return gaspirun(t, []string{"-n", "4", "--spares", "2", "--hostfile", s.hostfile,
		"--ssh", "ssh -F " + s.sshConfig, "--timeout", jobWait.String()}, kmArgs)
}

// launcher runs the host scenarios (package hostfault) under gaspirun
// --hostfile over the hosts' sshds: ranks 0 and 1 on node1 (process 0 and
// the rendezvous), ranks 2 and 3 on node2, the spares on node3. Every
// scenario also checks that the job token is in the processes'
// environments and in no argv (at the fault) and no file (after it).
type launcher struct {
	s     *sshHosts
	r     *run
	ref   string
	since time.Time // the job's start, for the files search
	token string
}

// Start runs the job on three new hosts up to the fault's iteration.
func (l *launcher) Start(t *testing.T, sc hostfault.Scenario) *simhost.Cluster {
	t.Helper()
	require(t)
	kmArgs := faulted
	if sc.Heal > 0 {
		// Long enough that the healed host's processes end before the job.
		kmArgs = withMaxIter(workload, 5000)
	}
	l.ref = reference(t, kmArgs)
	l.s = newSSHHosts(t)
	l.since = time.Now().Add(-time.Second)
	l.r = l.s.launch(t, kmArgs)
	l.r.waitLine(t, "the placement", func(line string) bool {
		return strings.HasPrefix(line, "gaspirun: ssh launch, rendezvous "+l.s.c.FrontAddr().String()+":") &&
			strings.HasSuffix(line, "placement: node1: r0-1; node2: r2-3; node3: s4-5")
	})
	l.r.waitIter(t, hostfault.TriggerIter)
	// The token: in the processes' environments, in no argv.
	pid := l.s.kmeansOn(0)
	if pid == 0 {
		t.Fatalf("no kmeans on node1: %v", l.s.jobProcs(0))
	}
	token, ok := proctest.EnvOf(pid, "PGAS_TOKEN")
	if !ok || len(token) < 32 {
		t.Fatalf("kmeans on node1 has no job token (%q)", token)
	}
	if hits := proctest.ArgvsWith(token); len(hits) > 0 {
		t.Errorf("the job token is in argvs:\n%s", strings.Join(hits, "\n"))
	}
	l.token = token
	return l.s.c
}

// Check checks the end: no file holds the token; gaspirun exits 0 with the
// failure-free answer and a promotion for each rank of the struck host; a
// crash's processes reported lost with their ssh sessions, a healed cut's
// ended as fenced before the job; and nothing of the job is left on any
// host.
func (l *launcher) Check(t *testing.T, sc hostfault.Scenario, _ []int) {
	t.Helper()
	roots := []string{l.s.dir, os.TempDir()}
	for _, h := range l.s.c.Hosts() {
		roots = append(roots, h.Dir())
	}
	for _, root := range roots {
		if hits := proctest.FilesWith(root, l.token, l.since, root != os.TempDir()); len(hits) > 0 {
			t.Errorf("the job token is in files: %v", hits)
		}
	}
	host := l.s.c.Host(sc.Host).Name()
	lost := []int{2 * sc.Host, 2*sc.Host + 1} // two slots a host: its ranks
	out := l.s.recovered(t, l.r, l.ref, lost...)
	if sc.Crash {
		for _, p := range lost {
			if !strings.Contains(out, fmt.Sprintf("process %d on %s", p, host)) || !strings.Contains(out, "was lost: ssh to "+host) {
				t.Errorf("no loss of process %d on %s reported:\n%s", p, host, out)
			}
		}
	}
	if sc.Heal > 0 && !strings.Contains(out, "4 exited 0, 2 exited with code 77;") {
		t.Errorf("%s's processes did not end by themselves as fenced before the job's end:\n%s", host, lastLines(out, 4))
	}
	ended := time.Now()
	l.s.waitHostsClean(t)
	t.Logf("gaspirun's last lines:\n%s\nhosts clean %v after gaspirun's exit", lastLines(out, 4), time.Since(ended).Round(time.Millisecond))
}

// Replaced reports whether gaspirun said spares hold the ranks of
// sc's host (hostfault.Replacer).
func (l *launcher) Replaced(sc hostfault.Scenario) bool {
	out := l.r.output()
	for _, rank := range []int{2 * sc.Host, 2*sc.Host + 1} { // two slots a host: its ranks
		if !strings.Contains(out, fmt.Sprintf("now holds rank %d", rank)) {
			return false
		}
	}
	return true
}

// TestSSHHostFaults: the host scenarios of package hostfault under
// gaspirun over ssh. A crash takes the host's sshd too: gaspirun sees both
// ssh sessions end without an exit status and counts the two ranks as
// lost. A cut host's processes are stopped by gaspirun through their
// connections, and nothing of the job outlives their ssh sessions (ended
// by sshd's ClientAlive bound or the remote side's missing pings); healed,
// they learn they were replaced and exit 77, which gaspirun counts as no
// failure.
func TestSSHHostFaults(t *testing.T) {
	hostfault.Run(t, &launcher{}, hostfault.Scenarios)
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
