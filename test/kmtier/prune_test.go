package kmtier

import (
	"slices"
	"testing"
)

// TestPrunedKillRank: --algo hamerly with a SIGKILL and a spare ends with
// the brute-force failure-free line, bit for bit (the promoted spare's
// kernel starts its bounds afresh; the survivors keep theirs).
func TestPrunedKillRank(t *testing.T) {
	res := run(t, spec{spares: 1, extra: []string{"--algo", "hamerly", "--inject", "kill:rank=2,iter=12"}})
	checkRecovered(t, res, 1)
}

// TestYinyangKillTwoRanks: --algo yinyang with k = 64 (four groups of
// centroids) and two kills gives the brute-force failure-free line.
func TestYinyangKillTwoRanks(t *testing.T) {
	args := slices.Clone(workload)
	args[slices.Index(args, "--k")+1] = "64"
	base := baseline(t, args)
	res := run(t, spec{spares: 2, args: args, extra: []string{"--algo", "yinyang", "--inject", "kill:rank=1,iter=7", "--inject", "kill:rank=3,iter=17"}})
	if res.code != 0 || len(res.kills()) != 2 {
		t.Fatalf("gaspirun exited %d with %d kills, want 0 and 2\n%s", res.code, len(res.kills()), res.text())
	}
	if got := res.final(t); got != base {
		t.Fatalf("yinyang with kills: %+v, brute force failure-free: %+v\n%s", got, base, res.text())
	}
}

// TestShardsAnyRanks: with --shards 12 the job prints one line on 2, 3
// and 4 ranks; a disk checkpoint of a 4-rank run killed without a spare
// resumes on 3 ranks (pruned, to boot) and ends with that line.
func TestShardsAnyRanks(t *testing.T) {
	args := append(slices.Clone(workload), "--shards", "12")
	base := baseline(t, args)
	for _, n := range []int{2, 3} {
		res := run(t, spec{n: n, args: args})
		if res.code != 0 {
			t.Fatalf("%d ranks: gaspirun exited %d\n%s", n, res.code, res.text())
		}
		if got := res.final(t); got != base {
			t.Fatalf("%d ranks: %+v, 4 ranks: %+v", n, got, base)
		}
	}
	dir := t.TempDir()
	disk := []string{"--ckpt-dir", dir}
	res := run(t, spec{args: args, extra: append(slices.Clone(disk), "--inject", "kill:rank=1,iter=17")})
	if res.code != 128+9 {
		t.Fatalf("gaspirun exited %d, want 137 (a rank SIGKILLed, no spare)\n%s", res.code, res.text())
	}
	again := run(t, spec{n: 3, args: args, launcher: []string{"--resume", dir}, extra: []string{"--algo", "hamerly", "--ckpt-dir", t.TempDir()}})
	if again.code != 0 || !again.has("written by 4 ranks, this job has 3") {
		t.Fatalf("resume on 3 ranks: exit %d\n%s", again.code, again.text())
	}
	if again.index("] iter    1 ", 0) >= 0 || again.index("] iter   16 ", 0) < 0 {
		t.Fatalf("the resumed job did not continue from its checkpoint\n%s", again.text())
	}
	if got := again.final(t); got != base {
		t.Fatalf("resumed on 3 ranks: %+v, failure-free on 4: %+v\n%s", got, base, again.text())
	}
}
