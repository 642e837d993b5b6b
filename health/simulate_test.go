package health

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/gaspigo/gaspigo/transport"
)

var simSeeds = flag.Int("sim.seeds", 6, "number of seeds TestSimulation runs")

// simReport is what one simulated job measured.
type simReport struct {
	seed      uint64
	failures  int
	detected  int
	latencies []int // ticks from fault to first confirmation, per detected failure
	strong    []int // the same for SIGKILLs (PeerDown), a subset
	late      int   // detections beyond the configured bound (at local health zero)
	tooLate   int   // detections beyond the bound with every timeout stretched to MaxLocalHealth
	falsePos  []simEvent
	messages  uint64
}

func (r simReport) String() string {
	l := slices.Clone(r.latencies)
	slices.Sort(l)
	pct := func(q float64) int {
		if len(l) == 0 {
			return -1
		}
		return l[min(len(l)-1, int(q*float64(len(l))))]
	}
	silent := len(l) - len(r.strong)
	return fmt.Sprintf("seed %d: %d/%d failures detected (%d with PeerDown: max %d ticks), latency p50 %d max %d ticks, %d late, %d false positives, %d messages",
		r.seed, r.detected, r.failures, len(r.strong), slices.Max(append([]int{-1}, r.strong...)), pct(0.5), pct(1), r.late, len(r.falsePos), r.messages) +
		fmt.Sprintf(" (%d silent)", silent)
}

// simulate runs n Cores on a network with delays of 1..maxDelay ticks and
// the given loss rate, and injects failures (SIGKILL, silent crash, long
// SIGSTOP) at random times on random processes, never three in a row on
// the ring (so every victim keeps a live monitor). It measures detection
// latency against the configured bound, and false positives: confirmations
// of processes that never failed.
func simulate(t *testing.T, cfg CoreConfig, n, maxDelay int, drop float64, failures int, seed uint64) simReport {
	t.Helper()
	s, err := newSimNet(cfg, n, seed)
	if err != nil {
		t.Fatal(err)
	}
	s.maxDelay, s.dropRate = maxDelay, drop
	rng := rand.New(rand.NewPCG(seed, 99))
	rep := simReport{seed: seed}
	kinds := map[transport.Proc]string{}
	var victims []transport.Proc // in injection order, for a deterministic report
	failed := func(p transport.Proc) bool { _, ok := kinds[p]; return ok }
	s.run(4 * cfg.SuspectTicks)
	for range failures {
		var v transport.Proc
		for {
			v = transport.Proc(rng.IntN(n))
			prev1, prev2 := transport.Proc((int(v)+n-1)%n), transport.Proc((int(v)+n-2)%n)
			next1, next2 := transport.Proc((int(v)+1)%n), transport.Proc((int(v)+2)%n)
			if !failed(v) && !(failed(prev1) && failed(prev2)) && !(failed(prev1) && failed(next1)) && !(failed(next1) && failed(next2)) {
				break
			}
		}
		kind := []string{"kill", "crash", "pause"}[rng.IntN(3)]
		kinds[v] = kind
		victims = append(victims, v)
		map[string]func(transport.Proc){"kill": s.kill, "crash": s.crash, "pause": s.pause}[kind](v)
		rep.failures++
		s.run(rng.IntN(3 * cfg.SuspectTicks))
	}
	s.run(3 * cfg.DetectionBound(maxDelay, false))
	for _, p := range victims {
		kind := kinds[p]
		e, ok := s.firstConfirmation(p, transport.NoProc)
		if !ok {
			continue
		}
		rep.detected++
		lat := int(e.step - s.faultAt[p])
		rep.latencies = append(rep.latencies, lat)
		if kind == "kill" {
			rep.strong = append(rep.strong, lat)
		}
		if lat > cfg.DetectionBound(maxDelay, kind == "kill") {
			rep.late++
		}
		if lat > stretchedBound(cfg, maxDelay, kind == "kill") {
			rep.tooLate++
		}
	}
	for _, e := range s.events {
		if e.ev.Kind == Confirmed && !failed(e.ev.Proc) {
			rep.falsePos = append(rep.falsePos, e)
		}
	}
	for _, m := range s.sent {
		rep.messages += m
	}
	return rep
}

// TestSimulation runs many Cores against each other over a few seeds and
// reports detection latency and false positives. The figures are logged
// (go test -v -run TestSimulation); more seeds with -sim.seeds.
func TestSimulation(t *testing.T) {
	cfg := scriptConfig()
	for _, tc := range []struct {
		name     string
		n        int
		maxDelay int
		drop     float64
		failures int
	}{
		{"n32-lan", 32, 1, 0, 4},
		{"n64-jitter", 64, 3, 0, 6},
		{"n48-lossy", 48, 2, 0.02, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for seed := uint64(1); seed <= uint64(*simSeeds); seed++ {
				rep := simulate(t, cfg, tc.n, tc.maxDelay, tc.drop, tc.failures, seed)
				t.Log(rep)
				if rep.detected != rep.failures {
					t.Errorf("seed %d: %d of %d failures detected", seed, rep.detected, rep.failures)
				}
				// On a lossy network wrong suspicions raise local health
				// scores, which stretch timeouts: the bound at score zero
				// holds only where nothing is lost.
				if rep.late != 0 && tc.drop == 0 {
					t.Errorf("seed %d: %d detections beyond the bound", seed, rep.late)
				}
				if rep.tooLate != 0 {
					t.Errorf("seed %d: %d detections beyond the stretched bound", seed, rep.tooLate)
				}
				for _, e := range rep.falsePos {
					t.Errorf("seed %d: false positive %v", seed, e)
				}
			}
		})
	}
}

// stretchedBound is DetectionBound with the suspicion and probe timeouts
// stretched by the largest local health score.
func stretchedBound(cfg CoreConfig, hop int, strong bool) int {
	k := 1 + cfg.MaxLocalHealth
	cfg.SuspectTicks *= k
	cfg.ProbeTicks *= k
	return cfg.DetectionBound(hop, strong)
}

// TestSimulationDeterministic: the same seed gives the same run.
func TestSimulationDeterministic(t *testing.T) {
	cfg := scriptConfig()
	a := simulate(t, cfg, 24, 3, 0.01, 3, 42)
	b := simulate(t, cfg, 24, 3, 0.01, 3, 42)
	if a.String() != b.String() || !slices.Equal(a.latencies, b.latencies) {
		t.Fatalf("same seed, different runs:\n%v\n%v", a, b)
	}
}

// TestQuietDetectionLatency sums up detection latency on a quiet network
// (no jitter, no loss) over many seeds, split by kind of failure: the
// figure that local health awareness must not worsen when nothing is
// starved. Run with -v to see it.
func TestQuietDetectionLatency(t *testing.T) {
	cfg := scriptConfig()
	var strong, silent []int
	for seed := uint64(1); seed <= 20; seed++ {
		rep := simulate(t, cfg, 64, 1, 0, 6, seed)
		if rep.detected != rep.failures || rep.late != 0 || len(rep.falsePos) != 0 {
			t.Errorf("seed %d: %v", seed, rep)
		}
		strong = append(strong, rep.strong...)
		silent = append(silent, nonStrong(rep)...)
	}
	for _, s := range []struct {
		name string
		lat  []int
	}{{"kill (PeerDown)", strong}, {"silent (crash, pause)", silent}} {
		l := slices.Clone(s.lat)
		slices.Sort(l)
		sum := 0
		for _, x := range l {
			sum += x
		}
		t.Logf("%s: %d failures, latency min %d p50 %d mean %.1f max %d ticks (bound %d)", s.name, len(l),
			l[0], l[len(l)/2], float64(sum)/float64(len(l)), l[len(l)-1], cfg.DetectionBound(1, s.name[0] == 'k'))
	}
}

// nonStrong returns the latencies of the failures that were not SIGKILLs.
func nonStrong(r simReport) []int {
	rest := slices.Clone(r.latencies)
	for _, s := range r.strong {
		if i := slices.Index(rest, s); i >= 0 {
			rest = slices.Delete(rest, i, i+1)
		}
	}
	return rest
}
