package ckpt

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
)

func TestPlaceTable(t *testing.T) {
	cases := []struct {
		name  string
		hosts []string
		k     int
		want  [][]int
	}{
		{"one rank", []string{""}, 1, [][]int{{}}},
		{"two ranks", []string{"", ""}, 3, [][]int{{1}, {0}}},
		{"ring k=1", []string{"", "", "", ""}, 1, [][]int{{1}, {2}, {3}, {0}}},
		{"ring k=2", []string{"", "", "", ""}, 2, [][]int{{1, 2}, {2, 3}, {3, 0}, {0, 1}}},
		{"round robin hosts", []string{"a", "b", "a", "b"}, 1, [][]int{{1}, {2}, {3}, {0}}},
		// Blocks per host interleave to 0,2,1,3: every rank holds one.
		{"blocks", []string{"a", "a", "b", "b"}, 1, [][]int{{2}, {3}, {1}, {0}}},
		{"blocks k=2", []string{"a", "a", "b", "b"}, 2, [][]int{{2, 3}, {3, 2}, {1, 0}, {0, 1}}},
		{"blocks of 4", []string{"a", "a", "a", "a", "b", "b", "b", "b"}, 1, [][]int{{4}, {5}, {6}, {7}, {1}, {2}, {3}, {0}}},
		// Three hosts, k=2: two other hosts each.
		{"three hosts", []string{"a", "a", "b", "b", "c", "c"}, 2, [][]int{{2, 4}, {3, 5}, {4, 1}, {5, 0}, {1, 3}, {0, 2}}},
		// One rank alone on b must take everybody's mirror.
		{"lopsided", []string{"b", "a", "b", "b"}, 1, [][]int{{1}, {2}, {1}, {1}}},
		// Fewer ranks on other hosts than k: the rest from the own host.
		{"short of hosts", []string{"a", "a", "a", "b"}, 2, [][]int{{3, 1}, {3, 2}, {3, 0}, {1, 2}}}, // ring 0,3,1,2
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Place(c.hosts, c.k)
			if fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Fatalf("Place(%q, %d) = %v, want %v", c.hosts, c.k, got, c.want)
			}
		})
	}
}

// naivePlace is the reference: sort ranks into the interleaved ring by
// (index within host, host's first rank), then for each rank scan the
// rotated ring twice, other hosts first.
func naivePlace(hosts []string, k int) [][]int {
	n := len(hosts)
	first := map[string]int{}
	idx := make([]int, n)
	count := map[string]int{}
	for r, h := range hosts {
		if _, ok := first[h]; !ok {
			first[h] = r
		}
		idx[r] = count[h]
		count[h]++
	}
	ring := make([]int, n)
	for i := range ring {
		ring[i] = i
	}
	sort.Slice(ring, func(a, b int) bool {
		ra, rb := ring[a], ring[b]
		if idx[ra] != idx[rb] {
			return idx[ra] < idx[rb]
		}
		return first[hosts[ra]] < first[hosts[rb]]
	})
	out := make([][]int, n)
	for r := 0; r < n; r++ {
		p := slices.Index(ring, r)
		rot := append(slices.Clone(ring[p+1:]), ring[:p]...)
		var other, same []int
		for _, x := range rot {
			if hosts[x] != hosts[r] {
				other = append(other, x)
			} else {
				same = append(same, x)
			}
		}
		all := append(other, same...)
		out[r] = all[:min(k, len(all))]
	}
	return out
}

// Place agrees with the reference on random jobs, and its properties hold:
// k distinct holders other than the rank, other hosts first, and balanced
// load when hosts are balanced.
func TestPlaceDifferential(t *testing.T) {
	seed := uint64(20260521)
	rng := rand.New(rand.NewPCG(seed, 1))
	for trial := 0; trial < 1500; trial++ {
		n := 1 + rng.IntN(40)
		nh := 1 + rng.IntN(6)
		hosts := make([]string, n)
		for r := range hosts {
			hosts[r] = fmt.Sprintf("h%d", rng.IntN(nh))
		}
		if rng.IntN(3) == 0 { // blocks: the layout launchers produce
			per := max(1, n/nh)
			for r := range hosts {
				hosts[r] = fmt.Sprintf("h%d", r/per)
			}
		}
		k := 1 + rng.IntN(4)
		got, want := Place(hosts, k), naivePlace(hosts, k)
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("seed %d trial %d: Place(%q, %d) = %v, reference %v", seed, trial, hosts, k, got, want)
		}
		others := func(r int) int {
			c := 0
			for _, h := range hosts {
				if h != hosts[r] {
					c++
				}
			}
			return c
		}
		load := make([]int, n)
		for r, hs := range got {
			if len(hs) != min(k, n-1) {
				t.Fatalf("seed %d trial %d: rank %d has %d holders, want %d", seed, trial, r, len(hs), min(k, n-1))
			}
			seen := map[int]bool{}
			for i, h := range hs {
				if h == r || seen[h] {
					t.Fatalf("seed %d trial %d: rank %d holders %v", seed, trial, r, hs)
				}
				seen[h] = true
				load[h]++
				if hosts[h] == hosts[r] && i < others(r) {
					t.Fatalf("seed %d trial %d: rank %d uses its own host before other hosts: %v", seed, trial, r, hs)
				}
			}
		}
		// Equal-sized hosts: every rank holds exactly min(k, n-1).
		sizes := map[string]int{}
		for _, h := range hosts {
			sizes[h]++
		}
		balanced := true
		for _, c := range sizes {
			balanced = balanced && c == sizes[hosts[0]]
		}
		if balanced && (len(sizes) == 1 || k <= n-sizes[hosts[0]]) {
			for h, l := range load {
				if l != min(k, n-1) {
					t.Fatalf("seed %d trial %d: balanced hosts %q k=%d: rank %d holds %d", seed, trial, hosts, k, h, l)
				}
			}
		}
	}
}

func TestLayoutPositions(t *testing.T) {
	l := newLayout([]string{"b", "a", "b", "b"}, 1, []int{0, 1, 2, 3})
	if l.capacity(1) != 3 || l.capacity(0) != 0 {
		t.Fatalf("capacities %d %d", l.capacity(1), l.capacity(0))
	}
	for i, src := range []int{0, 2, 3} {
		if p := l.position(1, src); p != i {
			t.Fatalf("position of %d at 1: %d, want %d", src, p, i)
		}
	}
	if l.position(1, 1) != -1 {
		t.Fatal("a rank has a position at itself")
	}
}
