package fttier

import (
	"bufio"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"
)

// ringMark is how a ring of transport/shm shows in /proc/PID/maps: a
// memfd mapping (the name is the memfd's, not a file's).
const ringMark = "memfd:gaspigo-ring"

// rings returns the inodes of the shared-memory rings pid maps: the same
// inode in two processes is a ring between them.
func rings(pid int) (map[string]bool, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if !strings.Contains(sc.Text(), ringMark) {
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
	rs, err := rings(pid)
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
// ranks and two spares of one host on shared memory (PGAS_SHM=1), which
// it checks: before the SIGSTOP, the victim maps rings that every other
// rank maps too (their frames go through them). Once the survivors are in
// the new epoch, and before the SIGCONT, no other process maps any ring
// the victim maps: whatever the resumed process writes lands in memory
// that nobody reads. Then, as over TCP: it exits 77, no stale frame is
// applied, the result is the failure-free one. Nothing is left in
// /dev/shm.
func TestStoppedRankIsFencedShm(t *testing.T) {
	before := shmLeftovers(t)
	stoppedRankIsFenced(t, jobOpts{steps: 500, env: []string{"PGAS_SHM=1"}}, fenceHooks{
		running: func(j *job, victim int) {
			vr, err := rings(j.pidOf(victim))
			if err != nil {
				j.fatalf("rings of process %d: %v", victim, err)
			}
			for r := 0; r < ranks; r++ {
				if r == victim {
					continue
				}
				both, err := shared(vr, j.pidOf(r))
				if err != nil {
					j.fatalf("rings of process %d: %v", r, err)
				}
				if len(both) == 0 {
					j.fatalf("processes %d and %d of one host share no shared-memory ring: the job is not on shared memory", victim, r)
				}
			}
			t.Logf("process %d maps %d rings before SIGSTOP", victim, len(vr))
		},
		stopped: func(j *job, victim int) {
			vr, err := rings(j.pidOf(victim))
			if err != nil {
				j.fatalf("rings of the stopped process %d: %v", victim, err)
			}
			// The survivors unmap the victim's rings once the view that
			// replaced it is applied and its connections are cut; allow
			// the cut a moment on a busy machine.
			deadline := time.Now().Add(stepWait)
			for {
				var still []string
				for _, p := range others(victim) {
					both, err := shared(vr, j.pidOf(p))
					if err != nil {
						continue // a spare that exited
					}
					if len(both) > 0 {
						still = append(still, fmt.Sprintf("process %d maps %v", p, both))
					}
				}
				if len(still) == 0 {
					break
				}
				if time.Now().After(deadline) {
					j.fatalf("in the new epoch, survivors still map rings of the stopped process %d: %s", victim, strings.Join(still, "; "))
				}
				time.Sleep(50 * time.Millisecond)
			}
			t.Logf("the stopped process %d maps %d rings, none of them mapped by a survivor", victim, len(vr))
		},
	})
	if after := shmLeftovers(t); len(after) > len(before) {
		t.Errorf("left in /dev/shm: %v (before the job: %v)", after, before)
	}
}
