package chaos

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
)

// coverage counts what a sweep did with each fault kind: how many faults
// of the kind its schedules drew, how many were applied, and how many
// were not, by reason. A sweep that did not apply a kind it drew has not
// tested it, and says so by failing (check).
type coverage[K ~string] struct {
	mu      sync.Mutex
	kinds   []K // the table's order
	drawn   map[K]int
	applied map[K]int
	skipped map[K]map[string]int // by reason
}

func newCoverage[K ~string](kinds []K) *coverage[K] {
	return &coverage[K]{kinds: kinds, drawn: map[K]int{}, applied: map[K]int{}, skipped: map[K]map[string]int{}}
}

// add counts one drawn fault of kind k: applied, or not, for why.
func (c *coverage[K]) add(k K, applied bool, why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.drawn[k]++
	if applied {
		c.applied[k]++
		return
	}
	if c.skipped[k] == nil {
		c.skipped[k] = map[string]int{}
	}
	c.skipped[k][why]++
}

// reasons lists kind k's reasons for not applying, most frequent first:
// "no raft leader known ×2; the job ended first ×1".
func (c *coverage[K]) reasons(k K) string {
	type r struct {
		why string
		n   int
	}
	var rs []r
	for why, n := range c.skipped[k] {
		rs = append(rs, r{why, n})
	}
	slices.SortFunc(rs, func(a, b r) int {
		if a.n != b.n {
			return b.n - a.n
		}
		return strings.Compare(a.why, b.why)
	})
	var parts []string
	for _, x := range rs {
		parts = append(parts, fmt.Sprintf("%s ×%d", x.why, x.n))
	}
	return strings.Join(parts, "; ")
}

// table is the per-kind table: drawn, applied, not applied and why.
func (c *coverage[K]) table() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "| fault kind | drawn | applied | not applied | why not applied |\n|---|---|---|---|---|\n")
	var drawn, applied int
	for _, k := range c.kinds {
		skipped := c.drawn[k] - c.applied[k]
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %s |\n", k, c.drawn[k], c.applied[k], skipped, c.reasons(k))
		drawn += c.drawn[k]
		applied += c.applied[k]
	}
	fmt.Fprintf(&b, "| all | %d | %d | %d | |\n", drawn, applied, drawn-applied)
	return b.String()
}

// never returns a sentence for every kind the sweep drew but never
// applied.
func (c *coverage[K]) never() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, k := range c.kinds {
		if c.drawn[k] > 0 && c.applied[k] == 0 {
			out = append(out, fmt.Sprintf("fault kind %s was drawn %d times and applied 0 times: this sweep did not test it (not applied: %s)",
				k, c.drawn[k], c.reasons(k)))
		}
	}
	return out
}

// check fails the sweep for every kind it drew but never applied. A kind
// that could not apply in some of its schedules (a kill due after the job
// ended) is fine as long as it applied in another.
func (c *coverage[K]) check(t *testing.T) {
	t.Helper()
	for _, s := range c.never() {
		t.Error(s)
	}
}

// Rule: a sweep fails for a kind it drew and never applied, naming the
// kind and why; a kind applied at least once passes, whatever its other
// schedules did.
func TestCoverageNever(t *testing.T) {
	c := newCoverage(Kinds)
	c.add(KillLeader, false, whyNoLeader)
	c.add(KillLeader, false, whyNoLeader)
	c.add(KillLeader, false, whyEnded)
	c.add(KillRank, false, whyEnded)
	c.add(KillRank, true, "")
	never := c.never()
	if len(never) != 1 {
		t.Fatalf("never = %q, want one sentence for kill-leader", never)
	}
	for _, want := range []string{"kill-leader", "drawn 3 times", "applied 0 times", whyNoLeader + " ×2", whyEnded + " ×1"} {
		if !strings.Contains(never[0], want) {
			t.Errorf("never = %q, want it to say %q", never[0], want)
		}
	}
	tab := c.table()
	for _, want := range []string{"| kill-leader | 3 | 0 | 3 |", "| kill-rank | 2 | 1 | 1 | " + whyEnded + " ×1 |", "| all | 5 | 1 | 4 |"} {
		if !strings.Contains(tab, want) {
			t.Errorf("table lacks %q:\n%s", want, tab)
		}
	}
}

// Rule: a fault that lasts ends at the next fault's point at the latest
// (K-means; a kill-commit's point is its checkpoint), and the last fault,
// or one of TeraSort, has no such bound.
func TestNextAt(t *testing.T) {
	w := kmWorkload()
	s := Schedule{Workload: KMeans, Ranks: Ranks, Faults: []Fault{
		{Kind: LossyLink, At: 17}, {Kind: KillCommit, At: 66}, {Kind: Partition, At: 99}, {Kind: PauseLong, At: 120}}}
	want := []int{w.commitAt(s.Faults[1]), 99, 120, 0}
	for i := range s.Faults {
		if got := s.nextAt(i); got != want[i] {
			t.Errorf("nextAt(%d) = %d, want %d", i, got, want[i])
		}
	}
	s.Workload = TeraSort
	if got := s.nextAt(0); got != 0 {
		t.Errorf("TeraSort: nextAt(0) = %d, want 0", got)
	}
}
