// Package hostfault is the one table of the host faults a job across
// simulated hosts (package simhost) must survive, whatever launched it:
// test/mhtier runs it with the bare PGAS_* contract (package mhjob),
// test/sshtier with gaspirun over ssh. A scenario is written here once;
// each tier supplies its Launcher, which starts the job and knows its
// layout (which processes the struck host runs) and how its launcher
// reports the end.
//
//	func TestHostFaults(t *testing.T) { hostfault.Run(t, myLauncher{}, hostfault.Scenarios) }
//
// Every scenario runs as a subtest on hosts of its own: Start, once the
// job has reported iteration TriggerIter; Strike; Check.
package hostfault

import (
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/internal/testkit/simhost"
)

// TriggerIter is the K-means iteration after which a scenario's fault
// strikes: Launcher.Start returns once the job has reported it.
const TriggerIter = 10

// Scenario is one host fault.
type Scenario struct {
	Name  string        // the subtest's name
	Host  int           // the host struck (0 is node1, whose process 0 serves the rendezvous)
	Crash bool          // SIGKILL of everything on the host; else a silent cut (simhost.Silent)
	Heal  time.Duration // a cut healed after this long; 0: cut off for good
}

// The scenarios. In each, the struck host's processes are lost to the job:
// spares on the other hosts take their ranks, and the job ends with the
// failure-free answer. Those that survive the fault (a cut) must end by
// themselves: cut off (a cut for good), or fenced once healed.
var (
	// HostCrash: everything on node2 is SIGKILLed.
	HostCrash = Scenario{Name: "HostCrash", Host: 1, Crash: true}
	// RendezvousHostCrash: node1 is lost, with process 0, which served
	// the rendezvous; the new rank 0 prints the answer.
	RendezvousHostCrash = Scenario{Name: "RendezvousHostCrash", Host: 0, Crash: true}
	// HostCutOff: node2 is cut off for good, silently (a partition nobody
	// is told about).
	HostCutOff = Scenario{Name: "HostCutOff", Host: 1}
	// HostCutAndHealed: node2 is cut off silently for 4 s, then healed;
	// its replaced processes must learn it and end. (Held longer when the
	// launcher says its ranks were not taken over yet: see Replacer.)
	HostCutAndHealed = Scenario{Name: "HostCutAndHealed", Host: 1, Heal: 4 * time.Second}
)

// Scenarios is the table every multi-host launcher's tier runs.
var Scenarios = []Scenario{HostCrash, RendezvousHostCrash, HostCutOff, HostCutAndHealed}

// Strike applies the fault to c: for a crash it returns the pids it
// killed; a cut that heals returns once healed. replaced, when not nil,
// says whether the struck host's ranks were taken over: a cut that heals
// lasts s.Heal, and then until they were (at most healBound), since the
// scenario is a host cut off long enough to be declared failed.
func (s Scenario) Strike(c *simhost.Cluster, replaced func() bool) (killed []int, err error) {
	h := c.Host(s.Host)
	if s.Crash {
		return c.Crash(h)
	}
	if err := c.Cut(h, simhost.Silent); err != nil || s.Heal == 0 {
		return nil, err
	}
	time.Sleep(s.Heal) // the scenario: a partition this long
	for end := time.Now().Add(healBound); replaced != nil && !replaced() && time.Now().Before(end); {
		time.Sleep(50 * time.Millisecond)
	}
	return nil, c.Heal(h)
}

// healBound is how much longer than Heal a cut is held for its ranks to
// be taken over. On a busy machine the failure detector stretches its
// timeouts up to fourfold (its local health, health/localhealth.go), so
// 4 s was at a load of 26 too short to be declared failed at all; the
// cut-off (PGAS_CUTOFF, 10 s) bounds what a cut process waits.
const healBound = 5 * time.Second

// Replacer is a Launcher that can tell whether the ranks of a struck
// host were taken over by spares (Strike holds a healing cut until then).
type Replacer interface {
	Replaced(s Scenario) bool
}

// Launcher runs the job of a scenario under one launcher.
type Launcher interface {
	// Start builds the hosts, starts the job on them and returns the
	// hosts once the job has reported iteration TriggerIter.
	Start(t *testing.T, s Scenario) *simhost.Cluster
	// Check waits for the job's end and checks it against s (the
	// processes of s.Host lost, the answer the failure-free one, every
	// process ended); killed is what Strike killed.
	Check(t *testing.T, s Scenario, killed []int)
}

// Run runs each of list as a subtest of t under l.
func Run(t *testing.T, l Launcher, list []Scenario) {
	for _, s := range list {
		t.Run(s.Name, func(t *testing.T) {
			c := l.Start(t, s)
			var replaced func() bool
			if r, ok := l.(Replacer); ok {
				replaced = func() bool { return r.Replaced(s) }
			}
			killed, err := s.Strike(c, replaced)
			if err != nil {
				t.Fatalf("%s of %s: %v", s.Name, c.Host(s.Host).Name(), err)
			}
			l.Check(t, s, killed)
		})
	}
}
