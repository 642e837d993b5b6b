package health

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/gaspigo/gaspigo/transport"
)

func procRange(n int) []transport.Proc {
	out := make([]transport.Proc, n)
	for i := range out {
		out[i] = transport.Proc(i)
	}
	return out
}

func newTestCore(t *testing.T, cfg CoreConfig, self transport.Proc, n int) *Core {
	t.Helper()
	c, err := NewCore(cfg, self, procRange(n))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// sentOf returns the messages of one kind in out.
func sentOf(out []Outgoing, k Kind) []Outgoing {
	var r []Outgoing
	for _, o := range out {
		if o.Msg.Kind == k {
			r = append(r, o)
		}
	}
	return r
}

func eventsOf(evs []Event, k EventKind) []Event {
	var r []Event
	for _, e := range evs {
		if e.Kind == k {
			r = append(r, e)
		}
	}
	return r
}

func TestNewCoreRejects(t *testing.T) {
	bad := scriptConfig()
	bad.Confirmations = 9
	if _, err := NewCore(bad, 0, procRange(4)); !errors.Is(err, ErrConfig) {
		t.Errorf("bad config: %v", err)
	}
	if _, err := NewCore(scriptConfig(), transport.NoProc, procRange(4)); !errors.Is(err, ErrBadMembers) {
		t.Errorf("NoProc self: %v", err)
	}
	if _, err := NewCore(scriptConfig(), 0, ps(0, 1, 2, 1)); !errors.Is(err, ErrBadMembers) {
		t.Errorf("duplicate: %v", err)
	}
	if _, err := NewCore(scriptConfig(), 0, []transport.Proc{0, transport.NoProc}); !errors.Is(err, ErrBadMembers) {
		t.Errorf("NoProc member: %v", err)
	}
	c := newTestCore(t, scriptConfig(), 0, 4)
	if err := c.SetMembers(ps(0, 1, 1)); !errors.Is(err, ErrBadMembers) {
		t.Errorf("SetMembers duplicate: %v", err)
	}
	if got := c.Members(); !slices.Equal(got, procRange(4)) {
		t.Errorf("a rejected view changed the members to %v", got)
	}
}

// detect runs a simNet of n processes, injects fault on victim after a
// warm-up, and returns the ticks from the fault to the first confirmation
// (or -1), and the number of confirmations of other processes.
func detect(t *testing.T, cfg CoreConfig, n, hop int, fault string, victim transport.Proc, seed uint64) (latency int, falsePos int) {
	t.Helper()
	s, err := newSimNet(cfg, n, seed)
	if err != nil {
		t.Fatal(err)
	}
	s.minDelay, s.maxDelay = hop, hop
	s.run(3 * cfg.SuspectTicks)
	// DetectionBound holds at local health zero. A tight configuration
	// (a suspicion timeout close to the round trip) may suspect, and so
	// raise scores, at the start; on a quiet network they must fall back.
	for calm := 0; !allHealthy(s); calm++ {
		if calm > 10*cfg.SuspectTicks*(1+cfg.MaxLocalHealth) {
			t.Fatalf("local health scores still up after warm-up on a quiet network")
		}
		s.run(1)
	}
	map[string]func(transport.Proc){"crash": s.crash, "kill": s.kill, "pause": s.pause}[fault](victim)
	s.run(4 * cfg.DetectionBound(hop, false))
	latency = -1
	if e, ok := s.firstConfirmation(victim, transport.NoProc); ok {
		latency = int(e.step - s.faultAt[victim])
	}
	for _, e := range s.events {
		if e.ev.Kind == Confirmed && e.ev.Proc != victim {
			falsePos++
		}
	}
	return latency, falsePos
}

func allHealthy(s *simNet) bool {
	for _, c := range s.cores {
		if c.LocalHealth() != 0 {
			return false
		}
	}
	return true
}

// TestDetectionTiming checks detection after the configured timeouts: never
// sooner than the timeouts allow, never later than DetectionBound.
func TestDetectionTiming(t *testing.T) {
	configs := []CoreConfig{
		scriptConfig(),
		{IntervalTicks: 2, SuspectTicks: 5, ProbeTicks: 3, RoundTicks: 7, Successors: 2, Helpers: 3, Confirmations: 2, MaxLocalHealth: 3, MaxPendingProbes: 64},
		{IntervalTicks: 10, SuspectTicks: 35, ProbeTicks: 20, RoundTicks: 40, Successors: 3, Helpers: 4, Confirmations: 3, MaxLocalHealth: 2, MaxPendingProbes: 64},
		{IntervalTicks: 4, SuspectTicks: 9, ProbeTicks: 4, RoundTicks: 12, Successors: 1, Helpers: 1, Confirmations: 1, MaxLocalHealth: 0, MaxPendingProbes: 64},
	}
	for ci, cfg := range configs {
		for _, hop := range []int{1, 3} {
			for _, fault := range []string{"crash", "pause", "kill"} {
				t.Run(fmt.Sprintf("cfg%d/hop%d/%s", ci, hop, fault), func(t *testing.T) {
					strong := fault == "kill"
					bound := cfg.DetectionBound(hop, strong)
					for seed := uint64(1); seed <= 3; seed++ {
						lat, fp := detect(t, cfg, 10, hop, fault, 5, seed)
						if lat < 0 {
							t.Fatalf("seed %d: never confirmed", seed)
						}
						if lat > bound {
							t.Errorf("seed %d: confirmed after %d ticks, bound %d", seed, lat, bound)
						}
						if low := cfg.SuspectTicks + cfg.ProbeTicks - cfg.IntervalTicks; !strong && lat < low {
							t.Errorf("seed %d: confirmed after %d ticks, sooner than the timeouts allow (%d)", seed, lat, low)
						}
						if fp != 0 {
							t.Errorf("seed %d: %d false positives", seed, fp)
						}
					}
				})
			}
		}
	}
}

// PeerDown (a SIGKILL closing the connections) is detected faster than the
// same failure without it.
func TestPeerDownSpeedsDetection(t *testing.T) {
	cfg := scriptConfig()
	for seed := uint64(1); seed <= 5; seed++ {
		silent, _ := detect(t, cfg, 16, 1, "crash", 7, seed)
		strong, _ := detect(t, cfg, 16, 1, "kill", 7, seed)
		if strong < 0 || silent < 0 || strong >= silent-cfg.SuspectTicks/2 {
			t.Errorf("seed %d: kill detected after %d ticks, crash after %d: want kill much faster", seed, strong, silent)
		}
	}
}

// A heartbeat that is late (a link that loses messages for a while) never
// leads to a confirmation while helpers reach the process.
func TestLateHeartbeatNoFalsePositive(t *testing.T) {
	cfg := scriptConfig()
	for _, cut := range []int{cfg.IntervalTicks - 1, cfg.SuspectTicks + 2, 3 * cfg.SuspectTicks} {
		t.Run(fmt.Sprintf("cut%d", cut), func(t *testing.T) {
			s, err := newSimNet(cfg, 8, 1)
			if err != nil {
				t.Fatal(err)
			}
			s.run(30)
			s.cutLink(0, 1)
			s.run(cut)
			s.heal()
			s.run(100)
			var sus, ref int
			for _, e := range s.events {
				switch e.ev.Kind {
				case Confirmed:
					t.Fatalf("false positive: %v", e)
				case Suspected:
					sus++
				case Refuted:
					ref++
				}
			}
			if cut < cfg.IntervalTicks && sus != 0 {
				t.Errorf("one lost heartbeat raised %d suspicions", sus)
			}
			if cut > cfg.SuspectTicks && (sus == 0 || ref != sus) {
				t.Errorf("cut of %d ticks: %d suspicions, %d refutations; want every suspicion refuted", cut, sus, ref)
			}
			if st, _ := s.cores[0].Status(1); st != StatusAlive {
				t.Errorf("0 sees 1 as %v after the cut healed", st)
			}
		})
	}
}

// An observer that hears from nobody condemns nobody, whatever evidence it
// gets: silence, PeerDown for everyone, and hints every tick. It lowers its
// own confidence instead. (The two-process fallback is the documented
// exception; see two_procs_kill.script.)
func TestIsolatedObserverNeverConfirms(t *testing.T) {
	for _, n := range []int{3, 4, 8, 64} {
		t.Run(fmt.Sprint("n", n), func(t *testing.T) {
			cfg := scriptConfig()
			c := newTestCore(t, cfg, 0, n)
			for tick := 0; tick < 2000; tick++ {
				c.Tick()
				for p := 1; p < n; p++ {
					c.Hint(transport.Proc(p))
					if tick%50 == 0 {
						c.PeerDown(transport.Proc(p))
					}
				}
				_, evs := c.Ready()
				if cf := eventsOf(evs, Confirmed); len(cf) > 0 {
					t.Fatalf("tick %d: isolated observer confirmed %v", tick, cf)
				}
			}
			if h := c.LocalHealth(); h != cfg.MaxLocalHealth {
				t.Errorf("local health %d, want %d (the observer should doubt itself)", h, cfg.MaxLocalHealth)
			}
			if len(c.Suspects()) == 0 {
				t.Error("isolated observer suspects nobody")
			}
		})
	}
}

// Hints alone never confirm, and on a healthy network they raise nothing.
func TestHintAloneNeverConfirms(t *testing.T) {
	cfg := scriptConfig()
	s, err := newSimNet(cfg, 12, 3)
	if err != nil {
		t.Fatal(err)
	}
	s.maxDelay = 2
	for range 400 {
		for i := range s.cores {
			s.cores[i].Hint(transport.Proc((i + 5) % 12))
			s.cores[i].Hint(transport.Proc((i + 7) % 12))
		}
		s.collect()
		s.step()
	}
	if len(s.events) != 0 {
		t.Fatalf("hints on a healthy network raised events: %v", s.events[0])
	}
}

// Two failures in the same interval are both confirmed, wherever they are
// in the ring.
func TestTwoFailuresSameInterval(t *testing.T) {
	cfg := scriptConfig()
	for _, pair := range [][2]transport.Proc{{3, 4}, {3, 5}, {3, 9}, {0, 11}} {
		for _, fault := range []string{"crash", "kill"} {
			t.Run(fmt.Sprintf("%v/%s", pair, fault), func(t *testing.T) {
				s, err := newSimNet(cfg, 12, 1)
				if err != nil {
					t.Fatal(err)
				}
				s.run(50)
				f := map[string]func(transport.Proc){"crash": s.crash, "kill": s.kill}[fault]
				f(pair[0])
				f(pair[1])
				s.run(100)
				bound := uint64(cfg.DetectionBound(1, fault == "kill"))
				for _, p := range pair {
					e, ok := s.firstConfirmation(p, transport.NoProc)
					if !ok {
						t.Fatalf("%d never confirmed", p)
					}
					if e.step-s.faultAt[p] > bound {
						t.Errorf("%d confirmed after %d ticks, bound %d", p, e.step-s.faultAt[p], bound)
					}
				}
				for _, e := range s.events {
					if e.ev.Kind == Confirmed && e.ev.Proc != pair[0] && e.ev.Proc != pair[1] {
						t.Errorf("false positive %v", e)
					}
				}
			})
		}
	}
}

// Every process sends O(R) messages per interval, independent of N: in
// steady state exactly R pings and R acks; while failures are detected, a
// bound that depends on R and P only.
func TestMessagesPerInterval(t *testing.T) {
	cfg := scriptConfig()
	I := cfg.IntervalTicks
	steadyMax := func(n int) uint64 {
		s, err := newSimNet(cfg, n, 1)
		if err != nil {
			t.Fatal(err)
		}
		s.run(5 * I)
		before := slices.Clone(s.sent)
		const intervals = 20
		s.run(intervals * I)
		var worst uint64
		for i := range s.sent {
			if d := s.sent[i] - before[i]; d > worst {
				worst = d
			}
		}
		return worst / intervals
	}
	busyMax := func(n int) uint64 {
		s, err := newSimNet(cfg, n, 1)
		if err != nil {
			t.Fatal(err)
		}
		s.run(5 * I)
		s.crash(3)
		s.crash(4)
		s.kill(transport.Proc(n / 2))
		var worst uint64
		for range 20 {
			before := slices.Clone(s.sent)
			s.run(I)
			for i := range s.sent {
				if d := s.sent[i] - before[i]; d > worst {
					worst = d
				}
			}
		}
		return worst
	}
	R, P := uint64(cfg.Successors), uint64(cfg.Helpers)
	for _, n := range []int{8, 16, 64} {
		if got := steadyMax(n); got != 2*R {
			t.Errorf("n=%d: steady state %d messages per process per interval, want 2R = %d", n, got, 2*R)
		}
		// Pings and acks (2R), PingReqs for up to R suspects (R·P), and
		// helper work: probe pings and an answer per request, for at
		// most R observers per suspect and R suspects.
		got, bound := busyMax(n), 2*R+R*P+2*R*R*2
		t.Logf("n=%d: worst per-process messages in one interval during failures: %d (bound %d)", n, got, bound)
		if got > bound {
			t.Errorf("n=%d: %d messages by one process in one interval during failures, bound %d", n, got, bound)
		}
	}
	if a, b := busyMax(16), busyMax(64); a != b {
		t.Errorf("worst per-interval load depends on N: %d at n=16, %d at n=64", a, b)
	}
}
