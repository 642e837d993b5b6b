package chaos

import (
	"reflect"
	"strings"
	"testing"
)

// Rule: a seed alone decides the schedule.
func TestDrawDeterministic(t *testing.T) {
	for seed := uint64(1); seed <= 200; seed++ {
		a, b := ScheduleOf(seed), ScheduleOf(seed)
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("seed %d drew two schedules:\n%s\n%s", seed, a, b)
		}
	}
}

// Rule: every schedule is one the harness can run: targets in range,
// trigger points within the workload, durations where the kind needs one,
// spares that cover the losses unless the schedule expects exhaustion, a
// kill-store-wake last (it fires at At or later, even much later).
func TestDrawValid(t *testing.T) {
	km := kmWorkload().lastAt()
	for seed := uint64(1); seed <= 2000; seed++ {
		s := ScheduleOf(seed)
		last := km
		if s.Workload == TeraSort {
			last = tsLastAt()
		}
		if most := map[bool]int{false: 3, true: respawnMaxKills}[s.Respawn]; len(s.Faults) == 0 || len(s.Faults) > most {
			t.Fatalf("seed %d: %d faults", seed, len(s.Faults))
		}
		losses, net := 0, false
		for i, f := range s.Faults {
			if f.Rank < 0 || f.Rank >= Ranks || f.At < 0 || f.At > last {
				t.Errorf("seed %d: fault out of range: %s (last %d)", seed, f, last)
			}
			if needs := f.Kind == PauseShort || f.Kind == PauseLong || f.Kind.netFault(); needs != (f.Dur > 0) {
				t.Errorf("seed %d: %s: duration %v", seed, f, f.Dur)
			}
			if f.Kind == PauseShort && f.Dur >= shortPause*2 {
				t.Errorf("seed %d: a short pause of %v may reach detection", seed, f.Dur)
			}
			if s.Workload == TeraSort && (f.Kind == KillCommit || f.Kind == KillMirror || f.Kind == DiskCorrupt) {
				t.Errorf("seed %d: TeraSort cannot run %s", seed, f.Kind)
			}
			if f.Kind == HostLoss && s.RanksPerHost != 2 {
				t.Errorf("seed %d: host loss without host labels", seed)
			}
			if f.Kind == KillStoreWake && i != len(s.Faults)-1 {
				t.Errorf("seed %d: %s is followed by another fault, which its open-ended timing may make coincide with it", seed, f)
			}
			losses += f.Kind.losses()
			net = net || f.Kind.netFault() || f.Kind == PauseShort
		}
		switch s.Expect {
		case Succeed:
			if s.Spares < losses && !s.Respawn {
				t.Errorf("seed %d: %d spares for %d losses, expecting success", seed, s.Spares, losses)
			}
		case Exhaust:
			if s.Spares >= losses || net {
				t.Errorf("seed %d: expects exhaustion with %d spares for %d losses (net faults: %v)", seed, s.Spares, losses, net)
			}
		case ResumeOrRefuse:
			if len(s.Faults) != 1 || s.Faults[0].Kind != DiskCorrupt {
				t.Errorf("seed %d: disk schedule %s", seed, s)
			}
		}
		if !strings.Contains(s.Replay(), "-chaos.seeds=") {
			t.Errorf("seed %d: replay %q", seed, s.Replay())
		}
	}
}

// Rule: the CI sample covers every fault kind, both workloads and an
// exhaustion.
func TestSampleCoversEveryKind(t *testing.T) {
	seen := map[Kind]bool{}
	work := map[Workload]bool{}
	exhaust := false
	for _, seed := range sampleSeeds {
		s := ScheduleOf(seed)
		work[s.Workload] = true
		exhaust = exhaust || s.Expect == Exhaust
		for _, f := range s.Faults {
			seen[f.Kind] = true
		}
	}
	for _, k := range Kinds {
		if !seen[k] {
			t.Errorf("no sample seed injects %s", k)
		}
	}
	if !work[KMeans] || !work[TeraSort] || !exhaust {
		t.Errorf("sample workloads %v, exhaustion %v: want both workloads and an exhaustion", work, exhaust)
	}
}

// The scale mode's CI sample holds a SIGKILLed rank, and its schedules
// aim at ranks of the whole job.
func TestScaleSampleKills(t *testing.T) {
	for _, seed := range scaleSampleSeeds {
		s := DrawScale(seed, 128, kmWorkloadFor(128).lastAt())
		if s.Faults[0].Kind != KillRank && s.Faults[0].Kind != KillInRecovery {
			t.Errorf("scale sample seed %d draws %s first, want a SIGKILL of a rank:\n%s", seed, s.Faults[0].Kind, s)
		}
	}
	for seed := uint64(1); seed <= 200; seed++ {
		s := DrawScale(seed, 128, 40)
		for _, f := range s.Faults {
			if f.Rank < 0 || f.Rank >= 128 || f.At < 0 {
				t.Fatalf("seed %d: fault %s outside the job", seed, f)
			}
		}
		if s.Spares < 0 || (s.Expect == Succeed && s.Spares <= 0) {
			t.Fatalf("seed %d: %d spares for %s", seed, s.Spares, s)
		}
	}
}

// Rule: TeraSort's logical progress is rank 0's sending for the first
// half and its writing for the second, capped at the whole job; a drawn
// point (a quarter to three quarters) is reached while the job runs.
func TestTSProgress(t *testing.T) {
	for _, c := range []struct {
		sent, wrote, n int64
		want           int
	}{
		{0, 0, 500000, 0},
		{50000, 0, 500000, 50},
		{250000, 0, 500000, 250},
		{500000, 0, 500000, 500},
		{500000, 250000, 500000, 750},
		{500000, 500000, 500000, 1000},
		{500000, 502433, 500000, 1000}, // a part a little larger than the input
		{10, 0, 0, 0},
	} {
		if got := tsProgress(c.sent, c.wrote, c.n); got != c.want {
			t.Errorf("tsProgress(%d, %d, %d) = %d, want %d", c.sent, c.wrote, c.n, got, c.want)
		}
	}
	for seed := uint64(3); seed <= 2000; seed += 4 {
		for _, f := range ScheduleOf(seed).Faults {
			if f.At < tsLastAt()/4 || f.At >= tsLastAt()*3/4 {
				t.Errorf("seed %d: TeraSort fault %s outside a quarter to three quarters of the job", seed, f)
			}
		}
	}
}
