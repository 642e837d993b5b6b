package kmtier

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gaspigo/gaspigo/apps/kmeans/kernel"
	"github.com/gaspigo/gaspigo/apps/kmeans/points"
	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
)

// TestFailureFree: the reference run. Checkpoints do not change the
// result (the same bits with --ckpt-every 0), and nothing recovers.
func TestFailureFree(t *testing.T) {
	base := baseline(t, nil)
	if base.iter != maxIter {
		t.Fatalf("iterations=%d, want %d (--tol 0 runs every iteration)", base.iter, maxIter)
	}
	off := slices.Clone(workload)
	off[len(off)-1] = "0" // --ckpt-every 0
	res := run(t, spec{args: off, spares: 1})
	if res.code != 0 {
		t.Fatalf("gaspirun exited %d\n%s", res.code, res.text())
	}
	if got := res.final(t); got != base {
		t.Fatalf("without checkpoints: %+v, with: %+v; checkpointing must not change the result", got, base)
	}
	if res.has("recovery:") {
		t.Fatalf("a recovery in a run without kills (a false positive of the detector?)\n%s", res.text())
	}
	logSlowSpares(t, res)
}

// logSlowSpares reports idle spares that gaspirun had to SIGKILL after
// --grace: they hang up to 5 s in pgas.Init's Close after a SIGTERM (see
// the report on pgas reportFailure).
func logSlowSpares(t *testing.T, res *result) {
	t.Helper()
	if res.has("stopped by gaspirun") && res.has("init (spare waiting for promotion)") {
		t.Logf("known: an idle spare was stopped by gaspirun (it may have needed SIGKILL after --grace %v)", grace)
	}
}

// TestKillRank: one SIGKILL; the spare takes the rank, the last
// committed checkpoint is restored and the result is the failure-free one.
func TestKillRank(t *testing.T) {
	res := run(t, spec{spares: 1, extra: []string{"--inject", "kill:rank=2,iter=12"}})
	checkRecovered(t, res, 1)
	k := res.kills()[0]
	if k.rank != 2 || k.iter != 12 || k.commit {
		t.Fatalf("kill %+v, want rank 2 after iteration 12", k)
	}
	if p, ok := res.promotions()[2]; !ok || p != ranks {
		t.Fatalf("promotions %v, want spare process %d to hold rank 2", res.promotions(), ranks)
	}
	// The checkpoint after iteration 10 was committed during iteration 11.
	if !res.has("checkpoint of iteration 10 restored") {
		t.Fatalf("want the checkpoint of iteration 10 restored\n%s", res.text())
	}
}

// TestKillDuringCommit: the victim dies inside the commit of the
// checkpoint taken after iteration 10 (the commit follows iteration 11's
// step); the survivors' agreement fails and they restore a checkpoint
// every rank still has.
func TestKillDuringCommit(t *testing.T) {
	res := run(t, spec{spares: 1, extra: []string{"--inject", "kill:rank=2,iter=10,phase=commit"}})
	checkRecovered(t, res, 1)
	k := res.kills()[0]
	if !k.commit || k.iter != 10 || k.rank != 2 {
		t.Fatalf("kill %+v, want rank 2 inside the commit after iteration 10", k)
	}
	if !res.has("recovery: iteration 11 failed") {
		t.Fatalf("want iteration 11 (whose step the commit follows) to fail\n%s", res.text())
	}
}

// TestKillBeforeFirstCommit: the victim dies inside the commit of the
// starting checkpoint. Usually no checkpoint is committed then, and every
// rank starts over from the initial centroids; when the survivors' commit
// agreement completed anyway, they restore it. Either way the job ends
// with the failure-free result (before start-over existed, the first case
// failed the job).
func TestKillBeforeFirstCommit(t *testing.T) {
	res := run(t, spec{spares: 1, extra: []string{"--inject", "kill:rank=2,iter=0,phase=commit"}})
	checkRecovered(t, res, 1)
	if !res.has("recovery: the starting checkpoint failed") {
		t.Fatalf("want the starting checkpoint to fail\n%s", res.text())
	}
	if !res.has("every rank starts over from the initial centroids") && !res.has("checkpoint of iteration 0 restored") {
		t.Fatalf("want the ranks to start over or restore the starting checkpoint\n%s", res.text())
	}
}

// TestKillMirrorHolder: after a first recovery (rank 1 now on a spare)
// and the background rebuild of its mirror, the rank that holds rank 1's
// mirror is killed.
func TestKillMirrorHolder(t *testing.T) {
	res := run(t, spec{spares: 2, extra: []string{"--inject", "kill:rank=1,iter=7", "--inject", "kill:mirror-of=1,iter=20"}})
	checkRecovered(t, res, 2)
	ks := res.kills()
	if ks[0].rank != 1 || ks[1].rank == 1 || ks[1].iter != 20 {
		t.Fatalf("kills %+v, want rank 1 after iteration 7, then its mirror holder (another rank) after iteration 20", ks)
	}
	newProc := res.promotions()[1]
	// The promoted process's mirrors were rebuilt (or found intact) before
	// the second kill.
	second := res.index(fmt.Sprintf("inject: SIGKILL rank %d ", ks[1].rank), 0)
	rebuilt := -1
	for i, l := range res.lines[:max(second, 0)] {
		_, s, _ := strings.Cut(l, "] ")
		kv := parseKV(s)
		if (kv["msg"] == "mirror rebuilt" || kv["msg"] == "mirrors intact") && kv["rank"] == "1" && kv["proc"] == strconv.Itoa(newProc) {
			rebuilt = i
		}
	}
	if second < 0 || rebuilt < 0 {
		t.Fatalf("want process %d (rank 1 after the first recovery) to log \"mirror rebuilt\" before the second kill\n%s", newProc, res.text())
	}
	if !res.has("checkpoint of iteration 15 restored") {
		t.Fatalf("want the second recovery to restore the checkpoint of iteration 15 from memory\n%s", res.text())
	}
}

// TestKillLeader: the process that leads the Raft membership is killed; a
// new leader is elected and the recovery completes. Idle spares win
// elections often (3 in 10 jobs with one spare here, 10 in 10 with two);
// such a leader holds no rank, so the job cannot kill it from inside, and
// the injection first moves the leadership onto a rank (kmeans
// Options.MoveLeader).
func TestKillLeader(t *testing.T) {
	res := run(t, spec{spares: 1, extra: []string{"--inject", "kill:leader,iter=10"}})
	if res.has("which holds no rank (an idle spare); nothing killed") {
		t.Fatalf("the Raft leader was an idle spare and the injection did not move the leadership onto a rank\n%s", res.text())
	}
	checkRecovered(t, res, 1)
	victim := res.kills()[0].rank // no earlier failure: process id = rank
	at := res.index("inject: SIGKILL", 0)
	leader, after := -1, -1
	for i, l := range res.lines {
		_, s, _ := strings.Cut(l, "] ")
		if kv := parseKV(s); kv["msg"] == "spares: became raft leader" {
			p, _ := strconv.Atoi(kv["proc"])
			if i < at {
				leader = p
			} else if after < 0 {
				after = p
			}
		}
	}
	if leader != victim {
		t.Fatalf("killed process %d, but the last leader before the kill was %d\n%s", victim, leader, res.text())
	}
	if after < 0 || after == victim {
		t.Fatalf("no new Raft leader after the kill (got %d)\n%s", after, res.text())
	}
	if res.has("the leadership moved to process") {
		t.Logf("the leader was an idle spare; the injection moved the leadership to process %d", victim)
	}
}

// TestKillHost: gaspirun --ranks-per-host 2 puts ranks 0,1 on host0,
// ranks 2,3 on host1 and the two spares on host2. Killing host1 loses two
// ranks at once; each one's mirror is on another host, so both come back
// from memory. TestKillTwoNeighboursOneHost is the control.
func TestKillHost(t *testing.T) {
	res := run(t, spec{spares: 2, launcher: []string{"--ranks-per-host", "2"}, extra: []string{"--inject", "kill:host=host1,iter=12"}})
	checkRecovered(t, res, 2)
	var killed []int
	for _, k := range res.kills() {
		killed = append(killed, k.rank)
	}
	slices.Sort(killed)
	if !slices.Equal(killed, []int{2, 3}) {
		t.Fatalf("killed ranks %v, want 2 and 3 (host1)", killed)
	}
	pr := res.promotions()
	if len(pr) != 2 || pr[2] < ranks || pr[3] < ranks {
		t.Fatalf("promotions %v, want ranks 2 and 3 on the spares (host2)", pr)
	}
	for _, rec := range res.logRecords("checkpoint restored") {
		if (rec["rank"] == "2" || rec["rank"] == "3") && rec["from"] != "holder" {
			t.Fatalf("rank %s restored from %q, want from a holder on another host: %v", rec["rank"], rec["from"], rec)
		}
	}
	if !res.has("checkpoint of iteration 10 restored") {
		t.Fatalf("want the in-memory checkpoint of iteration 10 restored\n%s", res.text())
	}
}

// TestKillTwoNeighboursOneHost is the control for TestKillHost: without
// host labels the mirror of rank 2 is on rank 3, so losing both at once
// is beyond the in-memory redundancy and, without a disk level, the job
// fails and says why.
func TestKillTwoNeighboursOneHost(t *testing.T) {
	res := run(t, spec{spares: 2, extra: []string{"--inject", "kill:rank=2,iter=12", "--inject", "kill:rank=3,iter=12"}})
	if res.code == 0 {
		t.Fatalf("the job survived losing rank 2 and its only mirror (rank 3) without a disk level\n%s", res.text())
	}
	if !res.has("no restorable checkpoint") {
		t.Fatalf("exit %d without naming the lost checkpoint\n%s", res.code, res.text())
	}
}

// TestBeyondRedundancy: a rank and the holder of its only mirror die in
// the same iteration. The disk level (--ckpt-dir) holds the committed
// checkpoints: either the job falls back to it in-run, or it fails and
// gaspirun --resume continues it. Either way the result is the
// failure-free one.
func TestBeyondRedundancy(t *testing.T) {
	dir := t.TempDir()
	disk := []string{"--mirrors", "1", "--ckpt-dir", dir}
	res := run(t, spec{spares: 2, extra: append(slices.Clone(disk), "--inject", "kill:rank=1,iter=12", "--inject", "kill:mirror-of=1,iter=12")})
	if ks := res.kills(); len(ks) != 2 || ks[0].rank == ks[1].rank {
		t.Fatalf("kills %+v, want rank 1 and its mirror holder\n%s", ks, res.text())
	}
	if res.code == 0 {
		if !res.has("no in-memory copy survived") {
			t.Fatalf("recovered without the disk level: the scenario did not go beyond the in-memory redundancy\n%s", res.text())
		}
		t.Logf("recovered in-run from the disk level")
		checkRecovered(t, res, 2)
		return
	}
	t.Logf("the job failed (exit %d); resuming from %s", res.code, dir)
	again := run(t, spec{spares: 2, launcher: []string{"--resume", dir}, extra: disk})
	checkResumed(t, again)
}

// TestResume: without spares a kill fails the job (gaspirun exits 137);
// gaspirun --resume DIR continues from the newest complete checkpoint on
// disk. Resumed again, the finished run's final checkpoint prints the
// same final line, SSE included; a --max-iter below its iteration is
// refused before any work.
func TestResume(t *testing.T) {
	dir := t.TempDir()
	disk := []string{"--ckpt-dir", dir}
	res := run(t, spec{spares: 0, extra: append(slices.Clone(disk), "--inject", "kill:rank=1,iter=17")})
	if res.code != 128+9 {
		t.Fatalf("gaspirun exited %d, want 137 (a rank SIGKILLed, no spare)\n%s", res.code, res.text())
	}
	again := run(t, spec{spares: 0, launcher: []string{"--resume", dir}, extra: disk})
	checkResumed(t, again)
	if !again.has("resume: the checkpointed run had --max-iter 25: continuing to --max-iter 25") && !again.has("resume: continuing to --max-iter 25") {
		t.Fatalf("the resumed job does not say how far it goes\n%s", again.text())
	}

	final := run(t, spec{spares: 0, launcher: []string{"--resume", dir}, extra: disk})
	checkResumed(t, final)
	if !final.has("resume: the checkpoint is the final one of a finished run (25 iterations, --max-iter 25)") {
		t.Fatalf("resuming a finished run does not say so\n%s", final.text())
	}
	if final.index("] iter ", 0) >= 0 {
		t.Fatalf("a finished run iterated again\n%s", final.text())
	}

	short := run(t, spec{spares: 0, launcher: []string{"--resume", dir}, extra: append(slices.Clone(disk), "--max-iter", "20")})
	if short.code != 2 || !short.has("--max-iter 20 is below the 25 iterations the checkpoint already holds") {
		t.Fatalf("--max-iter 20 on a checkpoint of iteration 25: exit %d, want it refused\n%s", short.code, short.text())
	}
}

// checkResumed checks a gaspirun --resume run: it says where it resumed
// from (not from the start) and ends with the failure-free result.
func checkResumed(t *testing.T, res *result) {
	t.Helper()
	if res.code != 0 {
		t.Fatalf("the resumed job exited %d\n%s", res.code, res.text())
	}
	var id, after int
	i := res.index("resumed from checkpoint ", 0)
	if i < 0 {
		t.Fatalf("no \"resumed from checkpoint\" line\n%s", res.text())
	}
	_, s, _ := strings.Cut(res.lines[i], "] ")
	if n, _ := fmt.Sscanf(s, "resumed from checkpoint %d", &id); n != 1 || id < 1+ckptStep {
		t.Fatalf("resumed from checkpoint %d, want a periodic one (id > %d): %s", id, ckptStep, s)
	}
	_, tail, _ := strings.Cut(s, " at iteration ")
	after, _ = strconv.Atoi(tail)
	if after != id-1 {
		t.Fatalf("checkpoint %d resumed after iteration %d, want %d (ids are iteration+1): %s", id, after, id-1, s)
	}
	if got, want := res.final(t), baseline(t, nil); got != want {
		t.Fatalf("resumed: %+v, failure-free: %+v\n%s", got, want, res.text())
	}
}

// TestMatchesReference: on a small data set in a file, with starting
// centroids from --init, the distributed result (read back from
// --output) matches kernel.Reference, the plain single-process
// algorithm, within rounding (the ranks add their partial sums in another
// order). With a kill on the way it is the same bits as without.
func TestMatchesReference(t *testing.T) {
	const n, d, k, iters = 3001, 4, 5, 30 // 3001 points: uneven shards
	g := kernel.GenConfig{Seed: 7, N: n, D: d, Blobs: 3 * k, Spread: 10, Sigma: 3}
	pts := make([]float64, n*d)
	if err := kernel.Generate(g, 0, n, pts); err != nil {
		t.Fatal(err)
	}
	// Start from k points of the data (the kmeans default choice, made
	// here and passed with --init). With three overlapping blobs per
	// cluster Lloyd needs about two dozen iterations to converge; the
	// checks below allow for the rounding differences of partial sums, not
	// for near-ties.
	idx, err := kernel.InitIndices(3, n, k)
	if err != nil {
		t.Fatal(err)
	}
	init := make([]float64, 0, k*d)
	for _, i := range idx {
		init = append(init, pts[i*d:(i+1)*d]...)
	}
	ref, err := kernel.Reference(pts, d, init, iters, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The reference stops once nothing moves; kmeans --tol 0 runs every
	// iteration, which changes nothing after that point.
	t.Logf("reference: %d iterations, converged %v, sse %v", ref.Iterations, ref.Converged, ref.SSE)
	if ref.Iterations < 12 {
		t.Fatalf("the reference converged after %d iterations: too easy a data set for this test", ref.Iterations)
	}
	dir := t.TempDir()
	initPath := filepath.Join(dir, "init.csv")
	f, err := os.Create(initPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := points.WriteCentroidsCSV(f, init, k, d); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	var first final
	for _, c := range []struct {
		name   string
		format points.Format
		inject []string
	}{
		{"csv", points.FormatCSV, nil},
		{"binary", points.FormatBinary, nil},
		{"binary+kill", points.FormatBinary, []string{"--inject", "kill:rank=3,iter=13"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := filepath.Join(dir, "points."+map[points.Format]string{points.FormatCSV: "csv", points.FormatBinary: "bin"}[c.format])
			if err := points.WriteFile(in, c.format, pts, d); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(dir, c.name+".out.csv")
			args := []string{"--input", in, "--init", initPath, "--k", strconv.Itoa(k), "--max-iter", strconv.Itoa(iters),
				"--ckpt-every", "4", "--output", out}
			res := run(t, spec{spares: 1, args: append(args, c.inject...)})
			if res.code != 0 {
				t.Fatalf("gaspirun exited %d\n%s", res.code, res.text())
			}
			fin := res.final(t)
			if len(c.inject) > 0 && len(res.kills()) != 1 {
				t.Fatalf("want one kill\n%s", res.text())
			}
			got, err := points.ReadCentroidsCSV(out, k, d)
			if err != nil {
				t.Fatalf("--output: %v", err)
			}
			if sum := kernel.Checksum(got); sum != fin.sum {
				t.Fatalf("--output's checksum %s, final line's %s", sum, fin.sum)
			}
			for i := range got {
				if diff := math.Abs(got[i] - ref.Centroids[i]); diff > 1e-9*max(1, math.Abs(ref.Centroids[i])) {
					t.Fatalf("centroid %d dim %d: %v, reference %v (diff %g)", i/d, i%d, got[i], ref.Centroids[i], diff)
				}
			}
			sse, _ := strconv.ParseFloat(fin.sse, 64)
			if math.Abs(sse-ref.SSE) > 1e-9*ref.SSE || fin.iter != iters {
				t.Fatalf("sse=%v iterations=%d, want the reference's sse=%v after %d iterations", sse, fin.iter, ref.SSE, iters)
			}
			// Any file format and any failure: the same bits.
			if first == (final{}) {
				first = fin
			} else if fin != first {
				t.Fatalf("%s: %+v, csv run: %+v", c.name, fin, first)
			}
		})
	}
}

// TestInjectMissingRank: an injection naming a rank the job does not have
// is refused by every rank before any work, as a bad flag is (exit 2).
func TestInjectMissingRank(t *testing.T) {
	res := run(t, spec{spares: 1, extra: []string{"--inject", "kill:rank=4,iter=3"}})
	if res.code != 2 || !res.has("--inject kill:rank=4,iter=3: the job has ranks 0..3") {
		t.Fatalf("gaspirun exited %d, want 2 with the injection refused\n%s", res.code, res.text())
	}
	if res.index("] iter ", 0) >= 0 {
		t.Fatalf("the job iterated before refusing the injection\n%s", res.text())
	}
}

// TestFilesOwnerOnly: nothing a job writes is readable by other users:
// the state directory (Raft logs) gaspirun creates, the disk checkpoints
// and --output, after a run with a kill and a promoted spare.
func TestFilesOwnerOnly(t *testing.T) {
	dir := t.TempDir()
	state, disk, out := filepath.Join(dir, "state"), filepath.Join(dir, "ckpt"), filepath.Join(dir, "centroids.csv")
	res := run(t, spec{spares: 1, launcher: []string{"--state-dir", state},
		extra: []string{"--ckpt-dir", disk, "--output", out, "--inject", "kill:rank=2,iter=12"}})
	checkRecovered(t, res, 1)
	if ents, _ := os.ReadDir(state); len(ents) == 0 {
		t.Fatalf("nothing in the state directory %s", state)
	}
	loose, err := proctest.LoosePerms(state, disk, out)
	if err != nil || len(loose) > 0 {
		t.Fatalf("files readable by other users (%v):\n%s", err, strings.Join(loose, "\n"))
	}
}
