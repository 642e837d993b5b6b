package pagerank

import (
	"slices"
	"strings"
	"testing"
)

// A cycle keeps the uniform ranks; a star's centre collects the mass.
func TestReference(t *testing.T) {
	cycle, err := ReadEdges(strings.NewReader("0 1\n1 2 # comment\n\n2 3\n3 0\n"))
	if err != nil {
		t.Fatal(err)
	}
	// (Integer divisions lose a few units of Mass per iteration.)
	for _, r := range Reference(cycle, 7) {
		if r > Initial(4) || r < Initial(4)-100 || r != Reference(cycle, 7)[0] {
			t.Fatalf("cycle ranks %v, want %d each, give or take rounding", Reference(cycle, 7), Initial(4))
		}
	}
	star, err := ReadEdges(strings.NewReader("1 0\n2 0\n3 0\n"))
	if err != nil {
		t.Fatal(err)
	}
	// Iteration 1: vertex 0 dangles (D = Mass/4), 1..3 send Mass/4 each.
	r := Reference(star, 1)
	t0 := Teleport(4, Mass/4)
	if want := []uint64{t0 + Damp(3*(Mass/4)), t0, t0, t0}; !slices.Equal(r, want) {
		t.Fatalf("star after one iteration %v, want %v", r, want)
	}
}

func TestReadEdgesErrors(t *testing.T) {
	for _, in := range []string{"", "# only a comment\n", "1\n", "1 2 3\n", "1 x\n", "-1 2\n", "0 99999999999\n"} {
		if _, err := ReadEdges(strings.NewReader(in)); err == nil {
			t.Errorf("ReadEdges(%q) accepted", in)
		}
	}
}

func TestGenerated(t *testing.T) {
	g := Generated{N: 1000, Degree: 4, Seed: 3}
	var dangling int
	for v := range g.N {
		a, b := g.Out(v, nil), g.Out(v, nil)
		if !slices.Equal(a, b) {
			t.Fatalf("vertex %d: out-edges differ between calls", v)
		}
		if len(a) == 0 {
			dangling++
		}
		for _, u := range a {
			if u < 0 || u >= g.N {
				t.Fatalf("vertex %d: edge to %d", v, u)
			}
		}
	}
	if dangling == 0 || dangling > 300 {
		t.Fatalf("%d dangling vertices of 1000, want some (about 1 in 8)", dangling)
	}
}
