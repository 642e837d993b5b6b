package fttier

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// ringMark is how a ring of transport/shm shows in /proc/PID/maps: a
// memfd mapping (the name is the memfd's, not a file's); segMark is a
// segment in shared memory (PGAS_SHM_SEGMENTS=1).
const (
	ringMark = "memfd:gaspigo-ring"
	segMark  = "memfd:gaspigo-seg"
)

// rings returns the inodes of the shared-memory rings pid maps: the same
// inode in two processes is a ring between them.
func rings(pid int) (map[string]bool, error) { return memfds(pid, ringMark) }

// segs returns the inodes of the shared segments pid maps.
func segs(pid int) (map[string]bool, error) { return memfds(pid, segMark) }

// memfds returns the inodes of the memfds named mark that pid maps.
func memfds(pid int, mark string) (map[string]bool, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if !strings.Contains(sc.Text(), mark) {
			continue
		}
		if fs := strings.Fields(sc.Text()); len(fs) >= 6 {
			out[fs[4]] = true
		}
	}
	return out, sc.Err()
}

// shared lists the rings that pid maps among those of victim.
func shared(victimRings map[string]bool, pid int) ([]string, error) {
	return sharedOf(rings, victimRings, pid)
}

// sharedOf lists the memfds (of the kind list finds) that pid maps among
// those of victim.
func sharedOf(list func(int) (map[string]bool, error), victimRings map[string]bool, pid int) ([]string, error) {
	rs, err := list(pid)
	if err != nil {
		return nil, err
	}
	var both []string
	for r := range rs {
		if victimRings[r] {
			both = append(both, r)
		}
	}
	sort.Strings(both)
	return both, nil
}

// shmLeftovers lists what this job's processes could have left in
// /dev/shm: the shared-memory transport makes memfds, never files, so any
// gaspigo entry there is a leak.
func shmLeftovers(t *testing.T) []string {
	t.Helper()
	es, err := os.ReadDir("/dev/shm")
	if err != nil {
		return nil // no /dev/shm: nothing can be left there
	}
	var out []string
	for _, e := range es {
		if strings.Contains(e.Name(), "gaspigo") {
			out = append(out, e.Name())
		}
	}
	return out
}

// TestStoppedRankIsFencedShm is TestStoppedRankIsFenced with the four
// ranks and two spares of one host on shared memory (PGAS_SHM=1), their
// segments too (PGAS_SHM_SEGMENTS=1), and every rank writing a record
// into its neighbour's segment every few milliseconds besides the steps
// (ftstep -writes: a direct copy plus a doorbell frame), which it checks:
// before the SIGSTOP, the victim maps rings that every other rank maps
// too, and segments that the ranks it writes to or that write to it map. Once the survivors are in the new epoch, and before the
// SIGCONT, no other process maps any ring or segment the victim maps:
// whatever the resumed process copies lands in memory that nobody reads.
// Then, as over TCP: it exits 77, no stale frame is applied, and every
// rank found no record of an older epoch changed in its segment after it
// entered the new one (ftstep fails the run otherwise), the result is the
// failure-free one, and the survivors wrote directly. Nothing is left in
// /dev/shm.
func TestStoppedRankIsFencedShm(t *testing.T) {
	before := shmLeftovers(t)
	kinds := []struct {
		name string
		list func(int) (map[string]bool, error)
	}{{"rings", rings}, {"segments", segs}}
	var j0 *job
	victim0 := -1
	stoppedRankIsFenced(t, jobOpts{steps: 500, env: []string{"PGAS_SHM=1", "PGAS_SHM_SEGMENTS=1"}, extra: []string{"-writes", "5ms"}}, fenceHooks{
		running: func(j *job, victim int) {
			j0, victim0 = j, victim
			for _, k := range kinds {
				vr, err := k.list(j.pidOf(victim))
				if err != nil {
					j.fatalf("%s of process %d: %v", k.name, victim, err)
				}
				// Every pair shares rings (the test's writes reach every
				// rank); a segment is mapped on a process's first direct
				// write to it, so the victim shares segments with those it
				// writes to or that write to it, at least one.
				sharing := 0
				for r := 0; r < ranks; r++ {
					if r == victim {
						continue
					}
					both, err := sharedOf(k.list, vr, j.pidOf(r))
					if err != nil {
						j.fatalf("%s of process %d: %v", k.name, r, err)
					}
					if len(both) > 0 {
						sharing++
					} else if k.name == "rings" {
						j.fatalf("processes %d and %d of one host share no %s: the job is not on shared memory", victim, r, k.name)
					}
				}
				if sharing == 0 {
					j.fatalf("process %d shares no %s with any process of its host: the job is not on shared memory", victim, k.name)
				}
				t.Logf("process %d maps %d %s before SIGSTOP", victim, len(vr), k.name)
			}
		},
		stopped: func(j *job, victim int) {
			for _, k := range kinds {
				vr, err := k.list(j.pidOf(victim))
				if err != nil {
					j.fatalf("%s of the stopped process %d: %v", k.name, victim, err)
				}
				// The survivors unmap the victim's rings once the view that
				// replaced it is applied and its connections are cut, and
				// move their segments at Recover; allow the cut a moment on
				// a busy machine.
				deadline := time.Now().Add(stepWait)
				for {
					var still []string
					for _, p := range others(victim) {
						both, err := sharedOf(k.list, vr, j.pidOf(p))
						if err != nil {
							// Nothing ends before the SIGCONT: a check of
							// a process that ended would prove nothing.
							still = append(still, fmt.Sprintf("process %d: %v", p, err))
							continue
						}
						if len(both) > 0 {
							still = append(still, fmt.Sprintf("process %d maps %v", p, both))
						}
					}
					if len(still) == 0 {
						break
					}
					if time.Now().After(deadline) {
						j.fatalf("in the new epoch, survivors still map %s of the stopped process %d: %s", k.name, victim, strings.Join(still, "; "))
					}
					time.Sleep(50 * time.Millisecond)
				}
				t.Logf("the stopped process %d maps %d %s, none of them mapped by a survivor", victim, len(vr), k.name)
			}
		},
	})
	if directWrites(j0) == 0 {
		j0.fatalf("no rank wrote directly into a neighbour's segment: the test proves nothing about direct writes")
	}
	for _, x := range j0.snapshot() {
		if strings.Contains(x.raw, fmt.Sprintf("writer proc=%d: a direct copy's doorbell was refused", victim0)) {
			t.Logf("the resumed process copied into memory no survivor uses: %s", x.raw)
		}
	}
	if after := shmLeftovers(t); len(after) > len(before) {
		t.Errorf("left in /dev/shm: %v (before the job: %v)", after, before)
	}
}

// TestDirectWritesWithoutTracing: segment memory travels over the
// shared-memory transport's socket, so direct writes need no right to
// trace a peer (pidfd_getfd needs one; Yama's ptrace_scope 1, Ubuntu's
// default, refuses it between sibling processes). The job runs as user
// nobody from binaries that user may execute but not read, which makes
// every process non-dumpable: none may trace another. The test first
// shows that premise with two helper processes made the same way (one
// cannot take a descriptor of the other with pidfd_getfd), then that the
// job's ranks still write into each other's segments directly and get
// the failure-free result.
func TestDirectWritesWithoutTracing(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the job runs as user nobody from binaries it cannot read")
	}
	if bins.err != nil {
		t.Skip(bins.err)
	}
	tmp, err := os.MkdirTemp("", "fttier-notrace-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	if err := os.Chmod(tmp, 0o777); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	as := &runAs{cred: &syscall.Credential{Uid: 65534, Gid: 65534}, tmp: tmp,
		gaspirun: filepath.Join(tmp, "gaspirun"), prog: filepath.Join(tmp, "ftstep")}
	probe := filepath.Join(tmp, "probe")
	for _, c := range []struct {
		from, to string
		mode     os.FileMode
	}{{bins.gaspirun, as.gaspirun, 0o755}, {bins.prog, as.prog, 0o711}, {self, probe, 0o711}} {
		if err := copyFile(c.from, c.to, c.mode); err != nil {
			t.Fatal(err)
		}
	}
	// The premise: a process made so cannot take another's descriptor.
	target := exec.Command(probe)
	target.Env = append(os.Environ(), "FTTIER_TRACE_PROBE=wait")
	target.SysProcAttr = &syscall.SysProcAttr{Credential: as.cred}
	hold, err := target.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := target.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		hold.Close()
		target.Wait()
	}()
	try := exec.Command(probe)
	try.Env = append(os.Environ(), "FTTIER_TRACE_PROBE="+strconv.Itoa(target.Process.Pid))
	try.SysProcAttr = &syscall.SysProcAttr{Credential: as.cred}
	out, err := try.CombinedOutput()
	if code := try.ProcessState.ExitCode(); code != probeRefused {
		t.Fatalf("premise: a process of user nobody running an unreadable binary took a descriptor of another with pidfd_getfd (exit %d, %v: %s); the test cannot show anything here", code, err, out)
	}
	j := startJob(t, jobOpts{steps: 200, env: []string{"PGAS_SHM=1", "PGAS_SHM_SEGMENTS=1"}, extra: []string{"-writes", "5ms"}, as: as})
	code := j.wait()
	j.checkFailures()
	if code != 0 {
		j.fatalf("gaspirun exit %d, want 0", code)
	}
	j.checkResults()
	direct := directWrites(j)
	if direct == 0 {
		j.fatalf("no rank wrote directly into a neighbour's segment without the right to trace")
	}
	for _, x := range j.snapshot() {
		if strings.Contains(x.raw, "could not be mapped") {
			j.fatalf("a segment was not mapped: %s", x.raw)
		}
	}
	t.Logf("%d direct writes by processes that cannot trace each other", direct)
}

// directWrites sums the direct writes the ranks of j reported.
func directWrites(j *job) int {
	n := 0
	for _, s := range statsOf(j.snapshot()) {
		n += max(0, s.int("direct_writes"))
	}
	return n
}

// probeRefused is traceProbe's exit code when pidfd_getfd was refused.
const probeRefused = 3

// traceProbe is TestDirectWritesWithoutTracing's helper process: "wait"
// waits for its stdin to close; a PID tries to take that process's
// descriptor 0 (exit 0 if it could, probeRefused if refused).
func traceProbe(arg string) int {
	if arg == "wait" {
		io.Copy(io.Discard, os.Stdin)
		return 0
	}
	pid, err := strconv.Atoi(arg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	pfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pidfd_open:", err)
		return 4
	}
	fd, err := unix.PidfdGetfd(pfd, 0, 0)
	if errors.Is(err, unix.EPERM) {
		return probeRefused
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "pidfd_getfd:", err)
		return 4
	}
	unix.Close(fd)
	return 0
}

// copyFile copies from to to with mode.
func copyFile(from, to string, mode os.FileMode) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	if err := os.WriteFile(to, b, mode); err != nil {
		return err
	}
	return os.Chmod(to, mode)
}
