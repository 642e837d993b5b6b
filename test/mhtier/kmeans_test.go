package mhtier

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gaspigo/gaspigo/internal/testkit/hostfault"
	"github.com/gaspigo/gaspigo/internal/testkit/mhjob"
	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
	"github.com/gaspigo/gaspigo/internal/testkit/simhost"
)

// TestNoFailure (a): the failure-free job over three hosts; its answer is
// the reference of the other scenarios. Every process, the idle spares
// too, exits 0 by itself.
func TestNoFailure(t *testing.T) {
	reference(t)
}

// launcher runs the host scenarios (package hostfault) with the bare
// PGAS_* contract on the layout of the package doc: tune, if set, adjusts
// the job's configuration, and before, if set, runs just before the
// fault strikes.
type launcher struct {
	tune   func(*mhjob.Config)
	before func(*testing.T, *mhjob.Job)
	job    *mhjob.Job
	ref    string
}

// Start runs the job on three new hosts up to the fault's iteration.
func (l *launcher) Start(t *testing.T, s hostfault.Scenario) *simhost.Cluster {
	t.Helper()
	args := workload
	if s.Heal > 0 {
		// Long enough that the healed host's processes, the idle spare
		// too, are declared failed and end before the job does.
		args = withMaxIter(workload, 600)
	}
	l.ref = referenceOf(t, args)
	c := newCluster(t)
	l.job = start(t, c, func(cfg *mhjob.Config) {
		cfg.Args = args
		if l.tune != nil {
			l.tune(cfg)
		}
	})
	waitIter(t, l.job, hostfault.TriggerIter)
	if l.before != nil {
		l.before(t, l.job)
	}
	return c
}

// Check checks the end (see finish): the processes of the struck host
// SIGKILLed by a crash, which kills both of them, or, cut off, ended by
// themselves as cut off or fenced; every other process exit 0.
func (l *launcher) Check(t *testing.T, s hostfault.Scenario, killed []int) {
	t.Helper()
	want := map[int]end{}
	for p, h := range layout {
		switch {
		case h != s.Host:
		case s.Crash:
			want[p] = killedBy9
		case s.Heal > 0 && p >= len(layout)-nspares:
			// An idle spare of a healed host that nobody declared failed
			// (the cut lasts until the host's ranks are taken over, which
			// a loaded machine may do before it gets to the spare) is a
			// spare in good standing again: it ends with the job. One
			// declared failed, even after the heal, is fenced.
			want[p] = healedSpare
		default:
			want[p] = cutOff
		}
	}
	if s.Crash && len(killed) != len(want) {
		t.Fatalf("the crash of node%d killed %v, want its %d processes", s.Host+1, killed, len(want))
	}
	finish(t, l.job, want, l.ref)
}

// declaredFailed reports whether the membership committed process p's
// failure, as some process logged it.
func declaredFailed(j *mhjob.Job, p int) bool {
	want := fmt.Sprintf("failed_proc=%d ", p)
	return slices.ContainsFunc(j.Lines(), func(x proctest.Line) bool {
		return strings.Contains(x.Text, `msg="spares: failure committed"`) && strings.Contains(x.Text+" ", want)
	})
}

// Replaced reports whether a spare took each rank that s's host held
// (hostfault.Replacer): a "spare promoted" record naming it.
func (l *launcher) Replaced(s hostfault.Scenario) bool {
	lines := l.job.Lines()
	for p, h := range layout {
		if h != s.Host || p >= len(layout)-nspares {
			continue // another host's, or a spare
		}
		want := fmt.Sprintf("rank=%d ", p)
		if !slices.ContainsFunc(lines, func(x proctest.Line) bool {
			return strings.Contains(x.Text, `msg="spare promoted"`) && strings.Contains(x.Text+" ", want)
		}) {
			return false
		}
	}
	return true
}

// TestHostFaults (b to e): the host scenarios of package hostfault. A
// crash of node2 kills rank 2 and the idle spare process 4, and node3's
// spare takes rank 2; a crash of node1 takes process 0 with the
// rendezvous, and rank 1, and the spares take ranks 0 and 1. node2 cut
// off for good, or for 4 s and then healed: the others replace rank 2 and
// finish, and node2's processes (the replaced rank and an idle spare) must
// give up by themselves as cut off, or, healed, learn they were replaced
// and exit 77.
func TestHostFaults(t *testing.T) {
	hostfault.Run(t, &launcher{}, hostfault.Scenarios)
}

// TestHostnameRendezvous (f): PGAS_RENDEZVOUS=node1:29400, and node1
// resolves its own name to 127.0.1.1 (Debian's /etc/hosts). node1's
// processes must still advertise an address the other hosts reach:
// process 0, which serves the rendezvous, logs (at debug level) the
// address every process registers with, and none may be loopback. Then
// node2 is crashed, and the recovery needs node1's membership listeners.
func TestHostnameRendezvous(t *testing.T) {
	tune := func(cfg *mhjob.Config) {
		cfg.Rendezvous = fmt.Sprintf("node1:%d", mhjob.RendezvousPort)
		cfg.EnvOf = func(p int) []string {
			if p == 0 {
				return []string{"PGAS_LOG=debug"}
			}
			return nil
		}
	}
	hostfault.Run(t, &launcher{tune: tune, before: checkAdvertised}, []hostfault.Scenario{hostfault.HostCrash})
}

// checkAdvertised fails the test for every registration (logged by
// process 0) with a loopback address, and when none of a node1 process
// was logged.
func checkAdvertised(t *testing.T, j *mhjob.Job) {
	t.Helper()
	seen := 0
	for _, l := range j.Lines() {
		if l.Proc != 0 || !strings.Contains(l.Text, `msg="rendezvous: registered"`) {
			continue
		}
		kv := map[string]string{}
		proctest.ParseKV(l.Text, kv)
		ap, err := netip.ParseAddrPort(kv["addr"])
		if err != nil || ap.Addr().IsLoopback() {
			t.Errorf("a process on %s registered address %q: the other hosts cannot reach it", kv["host"], kv["addr"])
		}
		if kv["host"] == "node1" {
			seen++
		}
	}
	if seen == 0 {
		t.Errorf("process 0 logged no registration of a node1 process: the advertised addresses were not checked\n%s", output(j))
	}
}

// withMaxIter is args with --max-iter n.
func withMaxIter(args []string, n int) []string {
	out := slices.Clone(args)
	i := slices.Index(out, "--max-iter")
	out[i+1] = strconv.Itoa(n)
	return out
}
