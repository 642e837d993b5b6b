package kmtier

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"testing"
)

// shrinkWorkload is the workload with --shrink on every rank: the
// membership leaves a lost rank vacant when no spare is left, and the
// partials are combined per shard, so its reference is its own
// failure-free run (not TestFailureFree's).
var shrinkWorkload = append(slices.Clone(workload), "--shrink")

var (
	finalAnyRE = regexp.MustCompile(`^\[r(\d+)\] centroids sha256=([0-9a-f]{64}) sse=(\S+) iterations=(\d+)$`)
	vacantRE   = regexp.MustCompile(`^\[r\d+\] recovery: rank (\d+) is vacant: shard (\d+) \(points \[(\d+), (\d+)\)\) goes to rank (\d+); (\d+) of 4 ranks live$`)
)

// finalOf returns the final line and the rank that printed it (the
// lowest live rank); it fails the test unless there is exactly one.
func (r *result) finalOf(t *testing.T) (final, int) {
	t.Helper()
	var out []final
	var by []int
	for _, l := range r.lines {
		if m := finalAnyRE.FindStringSubmatch(l); m != nil {
			rk, _ := strconv.Atoi(m[1])
			it, _ := strconv.Atoi(m[4])
			out = append(out, final{sum: m[2], sse: m[3], iter: it})
			by = append(by, rk)
		}
	}
	if len(out) != 1 {
		t.Fatalf("want exactly one final line, got %d (exit %d)\n%s", len(out), r.code, r.text())
	}
	return out[0], by[0]
}

// move is one "recovery: rank R is vacant: shard S ... goes to rank T" line.
type move struct{ vacant, shard, lo, hi, to, live int }

func (r *result) moves() []move {
	var out []move
	for _, l := range r.lines {
		if m := vacantRE.FindStringSubmatch(l); m != nil {
			var v [6]int
			for i := range v {
				v[i], _ = strconv.Atoi(m[i+1])
			}
			out = append(out, move{v[0], v[1], v[2], v[3], v[4], v[5]})
		}
	}
	return out
}

// checkShrunk checks a --shrink job that lost ranks with no spare left:
// gaspirun exits 0 (the vacant ranks were reported to it, so they count
// as done), the survivors finished with the failure-free --shrink result,
// printed by rank reporter, and every process but the kill victims
// exited 0.
func checkShrunk(t *testing.T, res *result, kills, reporter int, vacant []int) {
	t.Helper()
	base := baseline(t, shrinkWorkload)
	if res.code != 0 {
		t.Fatalf("gaspirun exited %d, want 0\n%s", res.code, res.text())
	}
	for _, r := range vacant {
		if !res.has(fmt.Sprintf("gaspirun: rank %d is vacant (epoch ", r)) {
			t.Fatalf("gaspirun does not say that rank %d is vacant\n%s", r, res.text())
		}
	}
	got, by := res.finalOf(t)
	if got != base || by != reporter {
		t.Fatalf("final line %+v from rank %d, want the failure-free --shrink run's %+v from rank %d\n%s", got, by, base, reporter, res.text())
	}
	if k := res.kills(); len(k) != kills {
		t.Fatalf("%d inject lines (%v), want %d\n%s", len(k), k, kills, res.text())
	}
	summary := fmt.Sprintf("%d exited 0, %d killed by signal 9 (SIGKILL)", ranks+len(res.promotions())-kills, kills)
	if !res.has(summary) {
		t.Fatalf("gaspirun's summary does not say %q\n%s", summary, res.text())
	}
}

// TestShrinkFailureFree: the --shrink reference runs every iteration
// without a recovery, and its result differs from the default run's only
// in rounding (the partials are added per shard instead of per rank).
func TestShrinkFailureFree(t *testing.T) {
	base := baseline(t, shrinkWorkload)
	if base.iter != maxIter {
		t.Fatalf("iterations=%d, want %d", base.iter, maxIter)
	}
	def := baseline(t, nil)
	b, _ := strconv.ParseFloat(base.sse, 64)
	d, _ := strconv.ParseFloat(def.sse, 64)
	if diff := b - d; diff > 1e-9*d || diff < -1e-9*d {
		t.Fatalf("--shrink sse %v, default sse %v: more than rounding apart", b, d)
	}
	t.Logf("--shrink: sha256=%s sse=%s; default: sha256=%s sse=%s", base.sum, base.sse, def.sum, def.sse)
}

// TestShrinkKillRank: no spares, and a rank is SIGKILLed after iteration
// 12. The membership leaves rank 2 vacant, rank 3 (the next live rank)
// regenerates shard 2, the survivors restore the checkpoint of iteration
// 10, and the job ends on three ranks with the failure-free --shrink
// result. gaspirun is given no --on-death: told by the processes that the
// job shrinks (bootstrap.KindShrink), it does not end the job at the death
// as it would without spares.
func TestShrinkKillRank(t *testing.T) {
	res := run(t, spec{args: shrinkWorkload, extra: []string{"--inject", "kill:rank=2,iter=12"}})
	checkShrunk(t, res, 1, 0, []int{2})
	if !res.has("gaspirun: the job shrinks when a rank is lost: a death does not end it") {
		t.Fatalf("gaspirun did not say it keeps the job going\n%s", res.text())
	}
	want := []move{{vacant: 2, shard: 2, lo: 100000, hi: 150000, to: 3, live: 3}}
	if got := res.moves(); !slices.Equal(got, want) {
		t.Fatalf("shard moves %+v, want %+v\n%s", got, want, res.text())
	}
	if !res.has("checkpoint of iteration 10 restored") {
		t.Fatalf("want the checkpoint of iteration 10 restored\n%s", res.text())
	}
	if len(res.promotions()) != 0 {
		t.Fatalf("promotions %v in a job without spares", res.promotions())
	}
}

// TestShrinkRefusedUnderAbort: --shrink under gaspirun --on-death abort,
// which would end the job at the first death, is refused at start with
// the fix, exit 2, instead of promised and broken.
func TestShrinkRefusedUnderAbort(t *testing.T) {
	res := run(t, spec{launcher: []string{"--on-death", "abort"}, args: shrinkWorkload, extra: []string{"--inject", "kill:rank=2,iter=12"}, refused: true})
	if res.code != 2 || !res.has("drop --on-death abort, or do not shrink") || res.has("centroids sha256") {
		t.Fatalf("exit %d, want 2 with the refusal before any iteration\n%s", res.code, res.text())
	}
}

// TestShrinkAfterSpares: one spare and two kills. The first kill (rank 1
// after iteration 7) takes the spare; the second (rank 0, the reporting
// rank, after iteration 17) finds the pool empty, and with --shrink rank
// 0 becomes vacant instead of the job failing with exit 75: rank 1, now
// the spare's process, takes shard 0 and prints the result.
func TestShrinkAfterSpares(t *testing.T) {
	res := run(t, spec{spares: 1, args: shrinkWorkload, extra: []string{"--inject", "kill:rank=1,iter=7", "--inject", "kill:rank=0,iter=17"}})
	checkShrunk(t, res, 2, 1, []int{0})
	if p, ok := res.promotions()[1]; !ok || p != ranks {
		t.Fatalf("promotions %v, want spare process %d to hold rank 1", res.promotions(), ranks)
	}
	want := []move{{vacant: 0, shard: 0, lo: 0, hi: 50000, to: 1, live: 3}}
	if got := res.moves(); !slices.Equal(got, want) {
		t.Fatalf("shard moves %+v, want %+v\n%s", got, want, res.text())
	}
	for _, w := range []string{"checkpoint of iteration 5 restored", "checkpoint of iteration 15 restored"} {
		if !res.has(w) {
			t.Fatalf("want %q\n%s", w, res.text())
		}
	}
	if res.has("spare pool exhausted") {
		t.Fatalf("the job reports an exhausted pool although it shrinks\n%s", res.text())
	}
}
