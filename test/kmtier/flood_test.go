package kmtier

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/internal/admit"
	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
)

// floodConfig: per listening port, 250 new connections a second, up to
// 250 held open and idle, one in four closed at once. With the 16 ports of
// a 4-rank, 1-spare job (3 per process and the rendezvous) that is about
// 4,000 connections a second and 4,000 held: more than the admission gate
// of any process admits (internal/admit: 512), so it sheds all the time.
var floodConfig = proctest.FloodConfig{PerTarget: 250, Hold: 250, ChurnEvery: 4}

// floodWorkload is the K-means job of the scenario: the default workload
// with a disk level, and the Raft leader killed after iteration 15.
func floodWorkload(dir string) []string {
	// Three times the points of the workload (the later flag wins): the
	// flood needs a second or so to mean anything, and the workload's job
	// takes less than that.
	return append(append([]string(nil), workload...), "--generate", "600000", "--ckpt-dir", dir, "--inject", "kill:leader,iter=15")
}

// finalCkptID is the id of the last checkpoint of the workload: the
// checkpoint after iteration i has id i+1, and the job commits a final one
// after iteration maxIter.
const finalCkptID = maxIter + 1

// floodBound is the least bound on the flooded recovery: a fast unflooded
// recovery makes 3x + 3 s tighter than the flood's CPU cost on a busy
// machine, and 10 s is still two thirds of the recovery without the
// gate (15-18 s).
const floodBound = 10 * time.Second

// gateRefusalRE is a refusal logged by an admission gate ("tcp: connection
// refused", "raft: connection refused", ...); the dial errors of the
// survivors' Raft to the killed leader also say "connection refused" and
// grow with the recovery's length, not with the flood.
var gateRefusalRE = regexp.MustCompile(`msg="[a-z -]+: connection refused"`)

// TestFloodKillLeader: denial of service without the token. While the
// test floods every listening port of every process of the job (data
// plane, Raft, control RPC, and gaspirun's rendezvous) with thousands of
// unauthenticated connections, held and churned, a K-means job with a
// disk level loses its Raft leader. It must finish with the answer of the
// same job without the flood, lose no disk checkpoint (the job verifies
// its disk level before it exits 0, and the final checkpoint's manifest
// exists), recover in time comparable to the same job without the flood,
// and log refusals in bounded lines. Before the admission gate, held
// connections exhausted a rank's descriptors (and lost disk checkpoints
// silently), and the Raft and control listeners refused the peers' own
// dials: recovery took 15-18 s instead of 0.4 s.
//
// The recovery time is from the kill (its inject line) to the last
// "checkpoint restored" record. The CI bound is loose, flooded < 3x
// unflooded + 3 s, and never below floodBound: on a 2-core machine shared
// with other work the flood's own CPU cost slows the Raft leader election
// more than the gate does (Raft's local timeouts are 100 ms; one CI run at
// load 15 took 6.45 s against 1.61 s unflooded, above the 2x + 3 s bound
// of before; one at load 10 took 4.96 s against 0.62 s, above 3x + 3 s;
// on a quiet machine 2.1-2.5 s against 0.7-0.8). It still fails for the
// code before the gate under a heavier flood (15-18 s against 0.4 s); the
// ratio is printed, and bench/flood measures it over repetitions
// (bench/RESULTS.md).
func TestFloodKillLeader(t *testing.T) {
	quiet, quietRes := killLeaderRun(t, nil)
	t.Logf("without the flood: recovery %v", quiet.Round(time.Millisecond))

	var flood *proctest.Flood
	loud, loudRes := killLeaderRun(t, func(pids *proctest.Procs, launcher int) func() {
		flood = proctest.NewFlood(floodConfig)
		return flood.Follow(func() []int { return append(pids.PIDs(), launcher) }, 20*time.Millisecond)
	})
	if os.Getenv("FLOOD_DEBUG") != "" { // the flooded job's whole output, Raft's included
		t.Log(loudRes.out)
	}
	st := flood.Stats()
	t.Logf("flood: %v", st)
	t.Logf("with the flood: recovery %v; ratio %.2f (unflooded %v)", loud.Round(time.Millisecond), loud.Seconds()/quiet.Seconds(), quiet.Round(time.Millisecond))

	if got, want := loudRes.final(t), quietRes.final(t); got != want {
		t.Fatalf("flooded run's final line %+v differs from the unflooded run's %+v\n%s", got, want, loudRes.text())
	}
	kill := loudRes.killTime(t)
	if st.Began.IsZero() || !st.Began.Before(kill) {
		t.Fatalf("the flood began at %v, not before the kill at %v: the scenario did not test recovery under the flood", st.Began, kill)
	}
	// Every rank's process listens on 3 ports (data plane, Raft, control
	// RPC) from before the flood begins; the spare's and the rendezvous's
	// are found too when the flood's scan reaches them before the job
	// moves on, which on a loaded machine it does not always (13 of 16 seen
	// in one CI run), so they are not required.
	if st.Targets < 3*ranks || st.Dialed < 1000 {
		t.Fatalf("flood too small to mean anything: %v (want every port of the %d ranks' processes, thousands of connections)", st, ranks)
	}
	if loud > max(3*quiet+3*time.Second, floodBound) {
		t.Errorf("recovery under the flood took %v, more than 3x the unflooded %v + 3 s and more than %v: real peers are kept out", loud, quiet, floodBound)
	}
	// Refusals are counted and summarised, never logged one by one: each
	// flooded door (every target) logs at most its burst, and the first
	// refusal of a source, per summary interval, so the bound grows with
	// how long the flood lasted, not with how many connections it made.
	// (A fixed bound of 100 failed a CI run at load 15 where the job
	// took 31 s: 140 lines for 21,995 connections.)
	log := admit.DefaultLogConfig()
	windows := int(st.Last.Sub(st.Began)/log.Interval) + 2 // a window begins at the first refusal
	maxLines := st.Targets * windows * (log.Burst + 1)
	refusalLines, summaries := 0, 0
	for _, l := range loudRes.lines {
		if gateRefusalRE.MatchString(l) { // not Raft's dials to the killed leader
			refusalLines++
		}
		if strings.Contains(l, "unauthenticated ones from") {
			summaries++
		}
	}
	t.Logf("%d refusal lines and %d summary lines for %d connections", refusalLines, summaries, st.Dialed)
	if refusalLines > maxLines || uint64(refusalLines)*20 > st.Dialed {
		t.Errorf("%d refusal lines for %d connections to %d doors over %d summary intervals (at most %d, and 1 in 20 connections): refusals must be summarised", refusalLines, st.Dialed, st.Targets, windows, maxLines)
	}
	if summaries == 0 {
		t.Errorf("no summary line of refused and shed connections after a flood of %d", st.Dialed)
	}
}

// killLeaderRun runs the flood workload with a fresh disk level, the Raft
// leader killed from inside the job (an idle spare that leads has the
// leadership moved onto a rank first: kmeans Options.MoveLeader), checks
// that it recovered with every disk checkpoint, and returns its recovery
// time.
func killLeaderRun(t *testing.T, during func(*proctest.Procs, int) func()) (time.Duration, *result) {
	t.Helper()
	dir := t.TempDir()
	// -v: the admission gates' summaries of connections closed before
	// their hello are information below a flood's rate.
	res := run(t, spec{spares: 1, launcher: []string{"-v"}, args: floodWorkload(dir), during: during})
	if res.has("which holds no rank (an idle spare); nothing killed") {
		t.Fatalf("the Raft leader was an idle spare and the injection did not move the leadership onto a rank\n%s", res.text())
	}
	if res.code != 0 {
		t.Fatalf("gaspirun exited %d, want 0\n%s", res.code, res.text())
	}
	if len(res.kills()) != 1 {
		t.Fatalf("want one kill\n%s", res.text())
	}
	if res.has("disk checkpoint LOST") {
		t.Fatalf("a disk checkpoint was lost\n%s", res.text())
	}
	if _, err := os.Stat(filepath.Join(dir, "ckpt-"+strconv.Itoa(finalCkptID), "manifest.json")); err != nil {
		t.Fatalf("the final disk checkpoint is not complete: %v\n%s", err, res.text())
	}
	return res.recoveryTime(t), res
}

// killTime is the time of the (single) kill, from its inject line.
func (r *result) killTime(t *testing.T) time.Time {
	t.Helper()
	kill, _, err := proctest.KillToRestore(r.lines)
	if kill.IsZero() {
		t.Fatalf("%v\n%s", err, r.text())
	}
	return kill
}

// recoveryTime is from the kill to the last "checkpoint restored" record
// after it.
func (r *result) recoveryTime(t *testing.T) time.Duration {
	t.Helper()
	_, d, err := proctest.KillToRestore(r.lines)
	if err != nil {
		t.Fatalf("%v\n%s", err, r.text())
	}
	return d
}
