package chaos

import (
	"reflect"
	"strings"
	"testing"
)

// Rule: a seed alone decides a multi-host schedule.
func TestDrawHostsDeterministic(t *testing.T) {
	for seed := uint64(1); seed <= 50; seed++ {
		if a, b := DrawHosts(seed, 140), DrawHosts(seed, 140); !reflect.DeepEqual(a, b) {
			t.Fatalf("seed %d drew %v and %v", seed, a, b)
		}
	}
}

// Rule: every multi-host schedule has exactly one loss, last, on a host
// its kind allows, after any blip, within the run; any one host's loss is
// covered by the spares on the others.
func TestDrawHostsValid(t *testing.T) {
	const lastAt = 140
	for seed := uint64(1); seed <= 500; seed++ {
		s := DrawHosts(seed, lastAt)
		n := len(s.Faults)
		if n < 1 || n > 2 {
			t.Fatalf("seed %d: %d faults", seed, n)
		}
		loss := s.Faults[n-1]
		if loss.Kind == HostBlip || (n == 2 && s.Faults[0].Kind != HostBlip) {
			t.Fatalf("seed %d: want an optional blip then one loss: %s", seed, s)
		}
		if n == 2 && s.Faults[0].At >= loss.At {
			t.Fatalf("seed %d: the blip does not come first: %s", seed, s)
		}
		for _, f := range s.Faults {
			if f.At < 5 || f.At > lastAt || f.Host < 0 || f.Host > 2 {
				t.Fatalf("seed %d: fault out of range: %s", seed, f)
			}
			heals := f.Kind == HostBlip || f.Kind == HostCutHeal || f.Kind == HostUnplug
			if heals != (f.Dur > 0) {
				t.Fatalf("seed %d: duration %v for %s", seed, f.Dur, f.Kind)
			}
		}
		if (loss.Kind == RendezvousHostCrash) != (loss.Host == 0 && loss.Kind != HostCutHeal && loss.Kind != HostCutOff && loss.Kind != HostUnplug) {
			t.Fatalf("seed %d: crash of node1 must be the rendezvous-host kind: %s", seed, s)
		}
		if !strings.Contains(s.Replay(), "-chaos.hostseeds=") {
			t.Fatalf("seed %d: replay %q", seed, s.Replay())
		}
	}
	ranks := map[int]int{}
	for _, h := range HostLayout[:Ranks] {
		ranks[h]++
	}
	for h := range 3 {
		spares := 0
		for _, sh := range HostLayout[Ranks:] {
			if sh != h {
				spares++
			}
		}
		if ranks[h] > spares {
			t.Errorf("the loss of node%d takes %d ranks, and only %d spares are elsewhere", h+1, ranks[h], spares)
		}
	}
}

// Rule: the CI sample covers every multi-host kind.
func TestHostSampleCoversEveryKind(t *testing.T) {
	seen := map[HostKind]bool{}
	for _, seed := range hostSampleSeeds {
		for _, f := range DrawHosts(seed, kmWorkload().lastAt()).Faults {
			seen[f.Kind] = true
		}
	}
	for _, k := range HostKinds {
		if !seen[k] {
			t.Errorf("no multi-host sample seed injects %s", k)
		}
	}
}
