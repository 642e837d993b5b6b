package chaos

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// HostKind is a fault of the multi-host mode: a real network fault or
// crash of a simulated host (internal/testkit/simhost), not of one process.
type HostKind string

// The multi-host faults. The job runs on three hosts (see HostLayout);
// "loss" means the host's processes must be replaced by spares on other
// hosts, and, where they survive the fault, must end by themselves.
const (
	// HostBlip: the host is cut off silently for Dur, shorter than the
	// failure detector's suspicion timeout, then healed: ridden out (on a
	// starved machine possibly a loss, which is allowed).
	HostBlip HostKind = "host-blip"
	// HostCutHeal: a silent cut for Dur, beyond detection, then healed.
	// A loss; the replaced processes must learn it once healed (exit 77)
	// or give up as cut off.
	HostCutHeal HostKind = "host-cut-heal"
	// HostCutOff: a silent cut for good. A loss; the host's processes
	// must give up as cut off.
	HostCutOff HostKind = "host-cut-off"
	// HostUnplug: the host's own link goes down for Dur (its processes
	// get "network is unreachable" at once), then up. A loss.
	HostUnplug HostKind = "host-unplug"
	// HostCrash: SIGKILL of every process on node2 or node3. A loss.
	HostCrash HostKind = "host-crash"
	// RendezvousHostCrash: SIGKILL of every process on node1: process 0,
	// which served the rendezvous, and rank 1. A loss of two ranks.
	RendezvousHostCrash HostKind = "rendezvous-host-crash"
)

// HostKinds lists every multi-host kind, in the order of the summary.
var HostKinds = []HostKind{HostBlip, HostCutHeal, HostCutOff, HostUnplug, HostCrash, RendezvousHostCrash}

// HostLayout is the host of each process in the multi-host mode: node1
// runs ranks 0 and 1 (process 0 serves the rendezvous), node2 rank 2 and
// spare process 4, node3 rank 3 and spare process 5. Any one host's loss
// is covered by the spares on the other hosts.
var HostLayout = []int{0, 0, 1, 2, 1, 2}

// HostSpares is the number of spares in the multi-host mode.
const HostSpares = 2

// HostFault is one entry of a multi-host schedule.
type HostFault struct {
	Kind HostKind
	Host int           // 0-based: 0 is node1
	At   int           // the K-means iteration it strikes after
	Dur  time.Duration // blips, cuts that heal, unplugs
}

func (f HostFault) String() string {
	s := fmt.Sprintf("%s host=node%d at=%d", f.Kind, f.Host+1, f.At)
	if f.Dur > 0 {
		s += " dur=" + f.Dur.String()
	}
	return s
}

// HostSchedule is one multi-host chaos run, drawn from Seed alone.
type HostSchedule struct {
	Seed   uint64
	Faults []HostFault
}

// DrawHosts makes the multi-host schedule of seed: one loss (any kind
// but the blip, on a host the kind allows), in the middle third of the
// run, and, for one seed in two, a blip on any host before it. lastAt is
// the latest iteration a fault may aim at.
func DrawHosts(seed uint64, lastAt int) HostSchedule {
	rng := rand.New(rand.NewPCG(seed, 0x686f737473))
	s := HostSchedule{Seed: seed}
	third := max(lastAt/3, 6)
	if rng.IntN(2) == 0 {
		s.Faults = append(s.Faults, HostFault{Kind: HostBlip, Host: rng.IntN(3), At: 5 + rng.IntN(third-5),
			Dur: time.Duration(200+rng.IntN(500)) * time.Millisecond})
	}
	losses := HostKinds[1:]
	f := HostFault{Kind: losses[rng.IntN(len(losses))], At: third + rng.IntN(third)}
	switch f.Kind {
	case RendezvousHostCrash:
		f.Host = 0
	case HostCrash:
		f.Host = 1 + rng.IntN(2)
	default:
		f.Host = rng.IntN(3)
	}
	if f.Kind == HostCutHeal || f.Kind == HostUnplug {
		f.Dur = time.Duration(3000+rng.IntN(2000)) * time.Millisecond
	}
	s.Faults = append(s.Faults, f)
	return s
}

// String is the schedule, one fault per line after a header line.
func (s HostSchedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed=%d mode=hosts hosts=3 ranks=%d spares=%d layout=%v", s.Seed, Ranks, HostSpares, HostLayout)
	for i, f := range s.Faults {
		fmt.Fprintf(&b, "\n  fault %d: %s", i+1, f)
	}
	return b.String()
}

// Replay is the one-line command that runs this schedule again.
func (s HostSchedule) Replay() string {
	return fmt.Sprintf("go test ./test/chaos -run 'TestChaosHosts/seed=%d$' -chaos.hostseeds=%d -v", s.Seed, s.Seed)
}

// ProcEnd is how one process of a multi-host job ended.
type ProcEnd struct {
	Proc    int
	Code    int           // exit code, -1 when killed by a signal
	Signal  string        // the signal that killed it, "" if it exited
	Crashed bool          // the harness killed it (a host crash)
	Running bool          // still running EndWait after the job's end
	After   time.Duration // when it ended, after the job's end
}

// HostResult is what a finished multi-host job left behind.
type HostResult struct {
	Lines  []string // every line, "[pN] text", in arrival order
	Answer string   // the final line ("" if none)
	Ends   []ProcEnd
}

// EndWait is how long after the job's end every process must have ended
// by itself.
const EndWait = 30 * time.Second

// HostViolations checks the invariants of one multi-host schedule: the
// answer is the reference (or, when more processes were declared failed
// than there were spares, the survivors end with exit 75 and no answer);
// every process the harness did not kill ended by itself within EndWait
// of the job's end, with exit 0, 75, 77 or ExitCutOff; no two processes
// held one rank in one epoch; no stale frame was applied.
func HostViolations(r HostResult, ref string) []string {
	var v []string
	exhausted := false
	for _, e := range r.Ends {
		exhausted = exhausted || (e.Signal == "" && !e.Running && e.Code == ExitSparesExhausted)
	}
	switch {
	case r.Answer != "" && r.Answer != ref:
		v = append(v, fmt.Sprintf("wrong answer: %q, reference %q", r.Answer, ref))
	case r.Answer == "" && exhausted && DeclaredFailed(r.Lines) > HostSpares:
		// A busy machine starved heartbeats and the pool ran out: the
		// documented end.
	case r.Answer == "":
		v = append(v, "no answer: the job hung or failed: "+lastError(r.Lines))
	}
	for _, e := range r.Ends {
		switch {
		case e.Crashed:
		case e.Running:
			v = append(v, fmt.Sprintf("process %d was still running %v after the job's end", e.Proc, EndWait))
		case e.Signal != "":
			v = append(v, fmt.Sprintf("process %d was killed by %s, not by the harness", e.Proc, e.Signal))
		case e.Code != ExitOK && e.Code != ExitSparesExhausted && e.Code != ExitDeclaredFailed && e.Code != ExitCutOff:
			v = append(v, fmt.Sprintf("process %d exited %d, not a documented code (0, 75, 77, 74 cut off)", e.Proc, e.Code))
		}
	}
	v = append(v, epochViolations(r.Lines)...)
	v = append(v, staleViolations(r.Lines)...)
	return v
}
