package tcptier

import (
	"context"
	"crypto/sha256"
	"fmt"
	"github.com/gaspigo/gaspigo/test/tcptier/testprog/reduceinput"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/pgas"
	"github.com/gaspigo/gaspigo/pgas/pgastest"
	"github.com/gaspigo/gaspigo/transport/mem"
)

// semanticCases are the cases "-case all" runs, in order (see
// testprog/semantics). Each must report PASS on every rank.
var semanticCases = []string{
	"ordering", "notify", "queuefull", "timeout", "bounds", "remotebounds",
	"read", "atomics", "bcast", "allgather", "allreduce", "passive",
}

// The in-memory tier's rules, re-checked with real processes over TCP.
// The last run labels the processes as two hosts of two (gaspirun
// --ranks-per-host 2), so the collectives run in two levels.
func TestSemantics(t *testing.T) {
	for _, c := range []struct {
		n      int
		launch []string
	}{{2, nil}, {3, nil}, {4, nil}, {4, []string{"--ranks-per-host", "2"}}} {
		n := c.n
		name := fmt.Sprintf("ranks=%d", n)
		if c.launch != nil {
			name += "/two-per-host"
		}
		t.Run(name, func(t *testing.T) {
			j := startJob(t, append([]string{"-n", strconv.Itoa(n), "--quiet"}, c.launch...), "-case", "all", "-depth", "64")
			code := j.wait()
			ranks := make([]int, n)
			for r := range ranks {
				ranks[r] = r
			}
			for _, c := range semanticCases {
				j.requirePass(c, ranks...)
			}
			if code != 0 {
				t.Errorf("gaspirun exited %d, want 0", code)
			}
			j.checkNoRace()
			j.requireGone()
			t.Logf("%d ranks: %d cases passed on every rank in %v", n, len(semanticCases), j.wall.Round(1e6))
		})
	}
}

// Rule: Allreduce gives the same bits on every rank and in every run,
// whatever the order in which the processes start, the pauses before each
// call, and the placement of ranks on hosts (two-level collectives). Runs:
// natural start order, reversed start order, random per-rank pauses with
// two seeds, two placements on labelled hosts, and one on racks; each run repeats the
// allreduce three times (the program checks those agree). The bits of the float64 sums are
// printed as hex and compared here.
func TestAllreduceBitsAcrossRuns(t *testing.T) {
	runs := []struct {
		name   string
		args   []string
		launch []string // gaspirun flags: host labels, so the collectives run in two levels
	}{
		{"natural", nil, nil},
		{"reversed", []string{"-stagger", "reverse"}, nil},
		{"jitter-seed-1", []string{"-jitter", "40ms", "-seed", "1"}, nil},
		{"jitter-seed-2", []string{"-jitter", "40ms", "-seed", "2"}, nil},
		{"two-per-host", nil, []string{"--ranks-per-host", "2"}},
		{"hosts-b-a", []string{"-jitter", "40ms", "-seed", "3"}, []string{"--host-labels", "b,a"}},
		// A host each, hosts two to a rack: the rack level (PGAS_RACKS).
		{"racks", []string{"-jitter", "40ms", "-seed", "4"}, []string{"--ranks-per-host", "1", "--racks", "r0=host0,host1;r1=host2,host3"}},
	}
	for _, n := range []int{3, 4} {
		t.Run(fmt.Sprintf("ranks=%d", n), func(t *testing.T) {
			ref, refRun := "", ""
			for _, run := range runs {
				args := append([]string{"-case", "allreduce"}, run.args...)
				j := startJob(t, append([]string{"-n", strconv.Itoa(n), "--quiet"}, run.launch...), args...)
				code := j.wait()
				ranks := make([]int, n)
				for r := range ranks {
					ranks[r] = r
				}
				j.requirePass("allreduce", ranks...)
				if code != 0 {
					t.Fatalf("run %s: gaspirun exited %d", run.name, code)
				}
				bits := map[int]string{}
				for _, l := range j.all("DATA") {
					if l.kv["case"] == "allreduce" && l.kv["key"] == "sum" {
						bits[l.int("rank")] = l.kv["hex"]
					}
				}
				if len(bits) != n {
					t.Fatalf("run %s: sums from %d ranks, want %d", run.name, len(bits), n)
				}
				for r := 1; r < n; r++ {
					if bits[r] != bits[0] {
						t.Fatalf("run %s: rank %d's sum differs from rank 0's at hex digit %d", run.name, r, firstDiff(bits[r], bits[0]))
					}
				}
				if len(bits[0]) != 257*16 {
					t.Fatalf("run %s: %d hex digits, want %d", run.name, len(bits[0]), 257*16)
				}
				if ref == "" {
					// The first run is compared with the in-memory transport
					// too: the bits depend on the group size only.
					if mem := memAllreduceHex(t, n); bits[0] != mem {
						t.Fatalf("run %s: the sum's bits over TCP differ from transport/mem's at hex digit %d", run.name, firstDiff(bits[0], mem))
					}
					ref, refRun = bits[0], run.name
				} else if bits[0] != ref {
					t.Fatalf("run %s: the sum's bits differ from run %s's at hex digit %d", run.name, refRun, firstDiff(bits[0], ref))
				}
				t.Logf("run %-13s start order %v: sha256(bits) %x, first element %s, same on all %d ranks",
					run.name, startOrder(j), sha256.Sum256([]byte(bits[0])), bits[0][:16], n)
				j.checkNoRace()
				j.requireGone()
			}
		})
	}
}

// memAllreduceHex runs the program's allreduce over transport/mem with n
// ranks and returns the bits of rank 0's result as the program prints
// them.
func memAllreduceHex(t *testing.T, n int) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rts, _ := pgastest.NewJob(t, n, mem.LocalConfig(), nil)
	out := make([][]float64, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, rt := range rts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = reduceinput.Vector(i)
			errs[i] = pgas.Allreduce(ctx, rt, nil, out[i], pgas.OpSum)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("in-memory allreduce, rank %d: %v", i, err)
		}
	}
	return reduceinput.Hex(out[0])
}

func firstDiff(a, b string) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// startOrder lists the process ids by the time they called Init.
func startOrder(j *job) []int {
	starts := j.all("START")
	sort.Slice(starts, func(a, b int) bool {
		x, _ := strconv.ParseInt(starts[a].kv["at"], 10, 64)
		y, _ := strconv.ParseInt(starts[b].kv["at"], 10, 64)
		return x < y
	})
	var out []int
	for _, l := range starts {
		out = append(out, l.int("proc"))
	}
	return out
}
