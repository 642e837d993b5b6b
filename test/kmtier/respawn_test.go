package kmtier

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"testing"
)

// The refilling pool: with --respawn, gaspirun starts a replacement for
// every process that dies, which joins the running job as a new spare
// with a new process id, so a job with one spare survives any number of
// spaced failures.

// respawnWorkload runs long enough for ten kills three iterations apart.
var respawnWorkload = []string{"--generate", "200000", "--dim", "10", "--k", "20", "--max-iter", "34", "--ckpt-every", "5"}

// respawnedRE is gaspirun's notice for a replacement it started.
var respawnedRE = regexp.MustCompile(`^gaspirun: respawned s(\d+) `)

// spacedKills is n kills three iterations apart from iteration 3, going
// round the ranks.
func spacedKills(n int) []string {
	var out []string
	for i := range n {
		out = append(out, "--inject", fmt.Sprintf("kill:rank=%d,iter=%d", (i+1)%ranks, 3*(i+1)))
	}
	return out
}

// respawns returns the ids of the replacements gaspirun started.
func (r *result) respawns() []int {
	var out []int
	for _, l := range r.lines {
		if m := respawnedRE.FindStringSubmatch(l); m != nil {
			p, _ := strconv.Atoi(m[1])
			out = append(out, p)
		}
	}
	return out
}

// TestRespawnTenKills: one spare, ten SIGKILLs three iterations apart,
// --respawn. Every lost process is replaced by a joiner with a new id;
// the ranks lost while the pool is empty wait for it; the job ends with
// the failure-free result and exit 0, and no process is left behind.
//
// With one mirror, the default: a join into the pool starts no recovery
// (docs/design.md §5.2.1). When every join started a new epoch, the ranks
// restored their checkpoint and re-pushed its mirrors at each one, and a
// kill three iterations (about 20 ms) later, within that rebuild, lost the
// dead rank's only copy in one run of six.
func TestRespawnTenKills(t *testing.T) {
	base := baseline(t, respawnWorkload)
	res := run(t, spec{spares: 1, launcher: []string{"--respawn"}, args: respawnWorkload, extra: spacedKills(10)})
	if res.code != 0 {
		t.Fatalf("gaspirun exited %d, want 0 (every failure recovered)\n%s", res.code, res.text())
	}
	if got := res.final(t); got != base {
		t.Fatalf("final line %+v differs from the failure-free run's %+v\n%s", got, base, res.text())
	}
	if k := res.kills(); len(k) != 10 {
		t.Fatalf("%d inject lines (%v), want 10\n%s", len(k), k, res.text())
	}
	// Ten losses against one spare need nine replacements at least; the
	// last kill's replacement may not be started if the job is already
	// finishing by then.
	ids := res.respawns()
	if len(ids) < 9 {
		t.Fatalf("gaspirun respawned %d processes (%v), want at least 9 for 10 losses and 1 spare\n%s", len(ids), ids, res.text())
	}
	first := ranks + 1 // -n 4 --spares 1: processes 0..4
	for i, id := range ids {
		if id != first+i {
			t.Fatalf("replacement ids %v, want %d, %d, ...: an id is never reused", ids, first, first+1)
		}
	}
	// A joiner must have held a rank: ten kills on a job of five processes.
	joinerHeld := false
	for _, p := range res.promotions() {
		joinerHeld = joinerHeld || p >= first
	}
	if !joinerHeld {
		t.Fatalf("no replacement ever held a rank (promotions %v)\n%s", res.promotions(), res.text())
	}
}

// TestTenKillsWithoutRespawn: the same run without --respawn ends as it
// always did once the one spare is used up: exit 75, the pool exhausted.
func TestTenKillsWithoutRespawn(t *testing.T) {
	res := run(t, spec{spares: 1, args: respawnWorkload, extra: spacedKills(10)})
	if res.code != 75 {
		t.Fatalf("gaspirun exited %d, want 75 (spares exhausted)\n%s", res.code, res.text())
	}
	if ids := res.respawns(); len(ids) != 0 {
		t.Fatalf("gaspirun respawned %v without --respawn", ids)
	}
}

// TestRespawnShrinkWaits: with --shrink and --respawn, a rank lost while
// the pool is empty waits for the replacement instead of going vacant:
// no shard moves, and the result is the failure-free one of the same
// workload.
func TestRespawnShrinkWaits(t *testing.T) {
	args := append(slices.Clone(respawnWorkload), "--shrink")
	base := baseline(t, args)
	res := run(t, spec{spares: 1, launcher: []string{"--respawn"}, args: args, extra: spacedKills(4)})
	if res.code != 0 {
		t.Fatalf("gaspirun exited %d, want 0\n%s", res.code, res.text())
	}
	if got := res.final(t); got != base {
		t.Fatalf("final line %+v differs from the failure-free run's %+v\n%s", got, base, res.text())
	}
	if mv := res.moves(); len(mv) != 0 {
		t.Fatalf("shard moves %+v: a rank went vacant although a replacement was coming\n%s", mv, res.text())
	}
}
