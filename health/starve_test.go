package health

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gaspigo/gaspigo/transport"
)

var (
	starveN     = flag.Int("sim.starve.n", 64, "processes in TestStarvedHost (512 for the figure in doc.go)")
	starveRamp  = flag.Int("sim.starve.ramp", 0, "steps over which the load builds up in TestStarvedHost (0: at once)")
	starveSeeds = flag.Int("sim.starve.seeds", 3, "seeds TestStarvedHost runs")
	starveQ     = flag.Float64("sim.starve.q", 0.01, "chance per step that a running process stalls in TestStarvedHost")
)

// starveLoad describes a simulated host that starves its processes; see
// starve.
type starveLoad struct {
	n, steps, ramp     int
	q                  float64 // per step and running process: chance of a stall
	minStall, maxStall int
	maxBacklog         int
	wholeStall         int
	kill               bool // SIGKILL one process and crash another half-way
}

// starveReport is what one simulated starved host measured.
type starveReport struct {
	stalls    int     // descheduling episodes injected
	stalled   float64 // fraction of process-ticks spent stopped
	longest   int     // longest single stall, in ticks
	suspicion int     // suspicions raised
	falsePos  int     // confirmation events (nobody failed)
	declared  int     // distinct processes confirmed: each would be a new epoch
	messages  uint64
	killed    int // ticks from the SIGKILL to its first confirmation, -1 if never
	crashed   int // the same for the silent crash
}

func (r starveReport) String() string {
	s := fmt.Sprintf("%d stalls (%.0f%% of process time stopped, longest %d ticks), %d suspicions, %d false confirmations of %d healthy processes, %d messages",
		r.stalls, 100*r.stalled, r.longest, r.suspicion, r.falsePos, r.declared, r.messages)
	if r.killed != 0 || r.crashed != 0 {
		s += fmt.Sprintf("; SIGKILL confirmed after %d ticks, silent crash after %d", r.killed, r.crashed)
	}
	return s
}

// starve runs n healthy processes on a host that cannot run them all: in
// each step a running process is descheduled with probability q, for
// minStall to maxStall ticks (log-uniform: mostly short stalls), and when it runs again its reader is up to maxBacklog
// ticks behind its timer. The load builds up over ramp steps (the longest
// stall grows from minStall to maxStall, as a host's run queue grows when
// its processes start computing) or, with ramp 0, starts at once: then a
// first stall may be as long as maxStall before any process near it has
// seen a sign of the load. Twice the whole host stops for wholeStall ticks
// and the processes run again in turn, over maxStall ticks. Nobody fails:
// every confirmation is a false failure (a new epoch in a real job),
// unless kill is set: then process 1 is SIGKILLed and process n/2 crashes
// silently half-way, and their detection latency is measured.
func starve(t *testing.T, cfg CoreConfig, l starveLoad, seed uint64) starveReport {
	t.Helper()
	n, steps, ramp, q := l.n, l.steps, l.ramp, l.q
	minStall, maxStall, maxBacklog, wholeStall := l.minStall, l.maxStall, l.maxBacklog, l.wholeStall
	victims := map[transport.Proc]bool{}
	s, err := newSimNet(cfg, n, seed)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(seed, 7))
	until := make([]int, n) // step at which a stalled process runs again
	var rep starveReport
	stopped := 0
	resumeDue := func(step int) {
		for i := range n {
			p := transport.Proc(i)
			if s.state[p] == paused && until[i] <= step && !victims[p] {
				s.resume(p, rng.IntN(maxBacklog+1))
			}
		}
	}
	s.run(4 * cfg.SuspectTicks)
	for step := range steps {
		if l.kill && step == steps/2 {
			s.kill(1)
			s.crash(transport.Proc(n / 2))
			victims[1], victims[transport.Proc(n/2)] = true, true
		}
		if step == steps/3 || step == 2*steps/3 {
			for i := range n {
				if s.state[i] == running && !victims[transport.Proc(i)] {
					s.pause(transport.Proc(i))
				}
				until[i] = step + wholeStall + rng.IntN(maxStall+1)
				rep.longest = max(rep.longest, until[i]-step)
			}
			rep.stalls += n
		}
		for i := range n {
			if s.state[i] == running && rng.Float64() < q && !victims[transport.Proc(i)] {
				s.pause(transport.Proc(i))
				// Log-uniform from minStall to maxStall: mostly short
				// stalls, a few as long as maxStall.
				top := maxStall
				if step < ramp {
					top = minStall + (maxStall-minStall)*step/ramp
				}
				d := int(float64(minStall) * math.Pow(float64(top)/float64(minStall), rng.Float64()))
				until[i] = step + d
				rep.longest = max(rep.longest, d)
				rep.stalls++
			}
		}
		s.step()
		for i := range n {
			if s.state[i] == paused {
				stopped++
			}
		}
		resumeDue(step + 1)
	}
	resumeDue(int(^uint(0) >> 1))
	s.run(4 * cfg.SuspectTicks)
	rep.stalled = float64(stopped) / float64(n*steps)
	declared := map[transport.Proc]bool{}
	for _, e := range s.events {
		switch e.ev.Kind {
		case Suspected:
			rep.suspicion++
		case Confirmed:
			if !victims[e.ev.Proc] || e.step < s.faultAt[e.ev.Proc] {
				rep.falsePos++
				declared[e.ev.Proc] = true
			}
		}
	}
	rep.declared = len(declared)
	if l.kill {
		after := func(p transport.Proc) int {
			for _, e := range s.events {
				if e.ev.Kind == Confirmed && e.ev.Proc == p && e.step >= s.faultAt[p] {
					return int(e.step - s.faultAt[p])
				}
			}
			return -1
		}
		rep.killed, rep.crashed = after(1), after(transport.Proc(n/2))
	}
	for _, m := range s.sent {
		rep.messages += m
	}
	return rep
}

// TestStarvedHost: many healthy processes on a host that starves them (the
// 512 processes on 2 cores of the field reports), in fake time with the
// default configuration's ticks. Stalls reach 1.2 times the time a silent
// failure takes to confirm at local health zero, whole-host stalls are
// longer still; no process may be declared failed. Run with -v for the
// figures, -sim.starve.n=512 for the full size.
func TestStarvedHost(t *testing.T) {
	cfg := DefaultConfig().Core()
	for _, kill := range []bool{false, true} {
		for seed := uint64(1); seed <= uint64(*starveSeeds); seed++ {
			rep := starve(t, cfg, starvedHost(cfg, *starveN, kill), seed)
			t.Logf("n=%d seed %d: %v", *starveN, seed, rep)
			if rep.falsePos != 0 {
				t.Errorf("seed %d: %d healthy processes declared failed", seed, rep.declared)
			}
			if kill && (rep.killed < 0 || rep.crashed < 0) {
				t.Errorf("seed %d: a real failure was not confirmed on the starved host", seed)
			}
		}
	}
}

// starvedHost is the load of TestStarvedHost: stalls up to 1.2 times the
// time a silent failure takes to confirm at local health zero, the reader
// up to two intervals behind, whole-host stalls of two suspicion timeouts.
func starvedHost(cfg CoreConfig, n int, kill bool) starveLoad {
	detect := cfg.SuspectTicks + cfg.ProbeTicks
	return starveLoad{
		n: n, steps: 3000, ramp: *starveRamp, q: *starveQ,
		minStall: cfg.IntervalTicks / 2, maxStall: detect * 6 / 5,
		maxBacklog: 2 * cfg.IntervalTicks, wholeStall: 2 * cfg.SuspectTicks, kill: kill,
	}
}
