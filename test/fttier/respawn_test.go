package fttier

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
)

// The refilling pool under the key-value applications: TeraSort and
// WordCount under gaspirun -n 4 --spares 1 --respawn, and five SIGKILLs
// from outside, each of the process that holds a rank at that moment
// (ranks 1, 2, 3, 1, 2: never rank 0, whose process 0 shows the
// progress). The kills are spaced by the job's progress: the next comes
// once the last one's rank was taken over, rank 0 has recovered into the
// epoch of the takeover, and the job has checkpointed since: TeraSort's
// rank 0 says so (sort -v: "sent N of M records; checkpoint N started",
// waited for line by line, since its shuffle runs through all its
// checkpoints within a second), WordCount, which prints nothing while it
// maps, through process 0's gaspigo_checkpoints_committed_total in
// gaspirun --metrics. One spare cannot cover five losses: the first is
// taken by the job's spare, each later one by a replacement gaspirun
// started for an earlier loss, joined already or waited for.

const (
	// appDeadline is gaspirun's --timeout: five recoveries and five
	// replacements on a busy 2-core machine.
	appDeadline = 5 * time.Minute
	// appStep bounds one step between kills (a takeover, a recovery, a
	// checkpoint).
	appStep = 90 * time.Second
	// appSpares is the job's spare pool as started: one.
	appSpares = 1
)

// killRanks are the ranks whose holders the test kills, in turn.
var killRanks = []int{1, 2, 3, 1, 2}

var (
	metricsRE   = regexp.MustCompile(`^gaspirun: metrics of the whole job at (http://\S+/metrics)$`)
	takeoverRE  = regexp.MustCompile(`^gaspirun: spare process (\d+) now holds rank (\d+) \(epoch (\d+)\)$`)
	rankZeroRE  = regexp.MustCompile(`^\[r0\] recovery: epoch (\d+) in force`)
	respawnRE   = regexp.MustCompile(`^gaspirun: respawned s(\d+) on this machine for lost \S+ \(\d+ of \d+\)$`)
	summaryRE   = regexp.MustCompile(`^gaspirun: (\d+) processes \(4 ranks \+ 1 spare \+ (\d+) joined\): (.*); (\d+) replacements? started`)
	committedRE = regexp.MustCompile(`^gaspigo_checkpoints_committed_total\{proc="0"\} (\d+)$`)
)

// appJob is a gaspirun job of an application whose processes the test
// kills: its output parsed as the tier's jobs', its processes found in
// /proc by their PGAS_JOB_ID.
type appJob struct {
	*job
	id       string
	launcher int
	procs    *proctest.Procs
	stop     func() // stops the /proc watch; idempotent
	metrics  string // gaspirun's --metrics URL, once read
	// progress waits until the job has checkpointed after record from
	// (its index in the output).
	progress func(from int)
	// result is rank 0's result line (without its prefix): no kill once
	// it is printed.
	result *regexp.Regexp
}

// startApp starts gaspirun -n 4 --spares 1 [--respawn] --metrics on
// loopback -- prog args, with PGAS_LOG=info and --collapse 0: every line
// names its process (the goroutine dumps of a stuck job too, whose lines
// the processes share).
func startApp(t *testing.T, respawn bool, prog string, args ...string) *appJob {
	t.Helper()
	if bins.err != nil {
		t.Skip(bins.err)
	}
	id := fmt.Sprintf("fttier-%d-%x", os.Getpid(), rand.Uint64())
	launch := []string{"-n", strconv.Itoa(ranks), "--spares", strconv.Itoa(appSpares), "--timeout", appDeadline.String(),
		"--grace", "1s", "--job-id", id, "--metrics", "127.0.0.1:0", "--collapse", "0"}
	if respawn {
		launch = append(launch, "--respawn")
	}
	cmd := exec.Command(bins.gaspirun, append(append(launch, "--", prog), args...)...)
	cmd.Env = append(os.Environ(), "PGAS_LOG=info")
	t.Logf("gaspirun %s", strings.Join(cmd.Args[1:], " "))
	j := &job{t: t, resultDir: t.TempDir(), pids: map[int]int{}}
	run, err := proctest.Start(proctest.JobConfig{OnLine: j.read, Bound: appDeadline + 30*time.Second}, cmd)
	if err != nil {
		t.Fatalf("start gaspirun: %v", err)
	}
	j.run = run
	a := &appJob{job: j, id: id, launcher: cmd.Process.Pid, procs: proctest.NewProcs()}
	a.stop = sync.OnceFunc(a.procs.Watch(id, a.launcher, 20*time.Millisecond))
	// A test that failed half-way stops gaspirun, which tears the job
	// down (SIGKILL would leave a local job's processes running), and
	// kills what is left.
	t.Cleanup(func() {
		run.Stop(30 * time.Second)
		a.stop()
		for _, pid := range a.procs.Leftovers(15 * time.Second) {
			t.Errorf("process pid %d of job %s still ran 15s after gaspirun was stopped; killed it", pid, id)
		}
	})
	return a
}

// after waits up to appStep for a record at or after index from that
// match accepts and returns its index.
func (a *appJob) after(what string, from int, match func(rec) bool) int {
	a.t.Helper()
	at := -1
	if !a.poll(appStep, func(recs []rec) bool {
		for i := from; i < len(recs); i++ {
			if match(recs[i]) {
				at = i
				return true
			}
		}
		return false
	}) {
		a.stuck(fmt.Sprintf("no %s within %v", what, appStep))
	}
	return at
}

// stuck fails the test for a job that stopped making progress: if it
// still runs, every live process of it is first asked for its goroutines
// (SIGQUIT: the Go runtime prints them and exits 2), so that the output
// shows where each one waits.
func (a *appJob) stuck(why string) {
	a.t.Helper()
	if a.run.Ended() {
		a.fatalf("%s: gaspirun exited %d", why, a.run.ExitCode())
	}
	a.procs.Scan(a.id, a.launcher)
	var dumped []int
	for p := range ranks + appSpares + 16 { // the job's processes and gaspirun's default budget of replacements
		if _, ok := a.procs.Signal(p, syscall.SIGQUIT); ok {
			dumped = append(dumped, p)
		}
	}
	a.run.WaitEnd(30 * time.Second) // the processes exit 2 and gaspirun ends the job
	a.fatalf("%s; the job is stuck: the goroutines of processes %v follow in the output", why, dumped)
}

// committed returns the checkpoints process 0 has committed, from
// gaspirun's metrics of the whole job; an error until process 0 is
// listed there (the job formed and the process scraped).
func (a *appJob) committed() (int, error) {
	if a.metrics == "" {
		i := a.after("gaspirun's metrics address", 0, func(x rec) bool { return metricsRE.MatchString(x.raw) })
		a.metrics = metricsRE.FindStringSubmatch(a.snapshot()[i].raw)[1]
	}
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(a.metrics)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 16<<20))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if m := committedRE.FindStringSubmatch(sc.Text()); m != nil {
			return strconv.Atoi(m[1])
		}
	}
	return 0, fmt.Errorf("no checkpoint count of process 0 at %s (%v)", a.metrics, sc.Err())
}

// waitCheckpoints waits until process 0 has committed at least n
// checkpoints and returns how many it has.
func (a *appJob) waitCheckpoints(n int) int {
	a.t.Helper()
	deadline := time.Now().Add(appStep)
	for {
		got, err := a.committed()
		if err == nil && got >= n {
			return got
		}
		if a.run.Ended() || time.Now().After(deadline) {
			a.stuck(fmt.Sprintf("process 0 did not commit %d checkpoints within %v (last reading %d, %v)", n, appStep, got, err))
		}
		time.Sleep(100 * time.Millisecond) // real processes: poll with a deadline
	}
}

// appKill is one kill of the test.
type appKill struct {
	rank, proc, pid int
	at              int // the number of records when it was sent
	takenBy         int // the process that took the rank over
}

// killSpaced SIGKILLs the holders of killRanks in turn, each once the
// job has recovered from the one before and progressed (see the file's
// comment), and returns the kills with the processes that took the ranks
// over.
func (a *appJob) killSpaced() []appKill {
	a.t.Helper()
	var kills []appKill
	// settle waits for k's takeover and rank 0's recovery, and returns
	// the index of the later of the two records.
	settle := func(k *appKill) int {
		var epoch int
		i := a.after(fmt.Sprintf("a spare to take rank %d over", k.rank), k.at, func(x rec) bool {
			m := takeoverRE.FindStringSubmatch(x.raw)
			if m == nil || m[2] != strconv.Itoa(k.rank) {
				return false
			}
			k.takenBy, _ = strconv.Atoi(m[1])
			epoch, _ = strconv.Atoi(m[3])
			return true
		})
		j := a.after(fmt.Sprintf("rank 0's recovery into epoch %d", epoch), k.at, func(x rec) bool {
			m := rankZeroRE.FindStringSubmatch(x.raw)
			if m == nil {
				return false
			}
			e, _ := strconv.Atoi(m[1])
			return e >= epoch
		})
		a.t.Logf("%v: rank %d taken over by process %d (epoch %d), rank 0 recovered", a.elapsed(), k.rank, k.takenBy, epoch)
		return max(i, j)
	}
	from := 0
	for n, r := range killRanks {
		if n > 0 {
			from = settle(&kills[n-1])
		}
		a.progress(from)
		if line, done := a.finished(); done {
			a.fatalf("the job printed its result (%s) before kill %d of %d: the workload is too short for this machine", line, n+1, len(killRanks))
		}
		p := holderOf(r, takeoversIn(a.run.Texts()))
		a.procs.Scan(a.id, a.launcher)
		at := len(a.snapshot())
		pid, sent := a.procs.Signal(p, syscall.SIGKILL)
		if !sent {
			a.fatalf("kill %d: could not SIGKILL process %d, the holder of rank %d (pid %d; 0: never seen)", n+1, p, r, pid)
		}
		a.t.Logf("%v: kill %d: SIGKILL of process %d (pid %d), the holder of rank %d", a.elapsed(), n+1, p, pid, r)
		kills = append(kills, appKill{rank: r, proc: p, pid: pid, at: at})
	}
	settle(&kills[len(kills)-1])
	return kills
}

// takeover is one of gaspirun's notices that a spare took a rank over:
// after a kill of the test's, or after a false failure on a busy machine.
type takeover struct{ proc, rank int }

// takeoversIn returns the takeover notices among lines, in order.
func takeoversIn(lines []string) []takeover {
	var out []takeover
	for _, l := range lines {
		if m := takeoverRE.FindStringSubmatch(l); m != nil {
			p, _ := strconv.Atoi(m[1])
			r, _ := strconv.Atoi(m[2])
			out = append(out, takeover{proc: p, rank: r})
		}
	}
	return out
}

// holderOf is the process that holds rank r after takeovers: the last
// that took it over, else process r, which held it at the start.
func holderOf(r int, takeovers []takeover) int {
	p := r
	for _, o := range takeovers {
		if o.rank == r {
			p = o.proc
		}
	}
	return p
}

// finished returns rank 0's result line if it was printed.
func (a *appJob) finished() (string, bool) {
	for _, x := range a.snapshot() {
		if s, ok := strings.CutPrefix(x.raw, "[r0] "); ok && a.result.MatchString(s) {
			return s, true
		}
	}
	return "", false
}

// checkpointedSince is WordCount's progress: process 0 committed a
// checkpoint after the call, or, at the start, one past the job's
// starting checkpoint.
func (a *appJob) checkpointedSince(int) {
	a.t.Helper()
	a.waitCheckpoints(max(2, a.waitCheckpoints(0)+1))
}

// sortSentRE is TeraSort's rank 0 starting a checkpoint (sort -v).
var sortSentRE = regexp.MustCompile(`^\[r0\] sort: sent \d+ of \d+ records; checkpoint \d+ started$`)

// sortSent is TeraSort's progress: rank 0 started a checkpoint after
// record from, having committed the one before.
func (a *appJob) sortSent(from int) {
	a.t.Helper()
	a.after("rank 0's next checkpoint", from+1, func(x rec) bool { return sortSentRE.MatchString(x.raw) })
}

func (a *appJob) elapsed() time.Duration { return time.Since(a.run.Begin()).Round(time.Millisecond) }

// finish waits for gaspirun (bounded) and for every process of the job
// to be gone, and returns gaspirun's exit code.
func (a *appJob) finish() int {
	a.t.Helper()
	if !a.run.WaitEnd(appDeadline + 30*time.Second) {
		a.fatalf("gaspirun still running %v after its start", appDeadline+30*time.Second)
	}
	a.stop()
	a.procs.Scan(a.id, a.launcher)
	code := a.run.ExitCode()
	a.t.Logf("gaspirun exited %d after %v (load average %s)", code, a.elapsed(), proctest.LoadAvg())
	for _, pid := range a.procs.Leftovers(15 * time.Second) {
		a.errorf("process pid %d of job %s was still running 15s after gaspirun ended; killed it", pid, a.id)
	}
	if seen := len(a.procs.PIDs()); seen < ranks+appSpares {
		a.errorf("saw only %d processes of job %s: the check that none is left cannot be trusted", seen, a.id)
	}
	return code
}

// rankZero returns rank 0's one result line (without its prefix).
func (a *appJob) rankZero() string {
	a.t.Helper()
	var out []string
	for _, x := range a.snapshot() {
		if s, ok := strings.CutPrefix(x.raw, "[r0] "); ok && a.result.MatchString(s) {
			out = append(out, s)
		}
	}
	if len(out) != 1 {
		a.fatalf("rank 0 printed %d result lines %q, want one", len(out), out)
	}
	return out[0]
}

// checkRefilled checks the end of a job killed by killSpaced: exit 0;
// one replacement or more per kill, with new ids, from 5 up in turn; the
// spare the job started with took the first rank lost, and a different
// replacement each later one; gaspirun's summary counts the five kills,
// and every other process exited 0.
func (a *appJob) checkRefilled(code int, kills []appKill) {
	a.t.Helper()
	if code != 0 {
		a.fatalf("gaspirun exited %d, want 0 (every loss recovered)", code)
	}
	var ids []int
	summary := ""
	for _, x := range a.snapshot() {
		if m := respawnRE.FindStringSubmatch(x.raw); m != nil {
			id, _ := strconv.Atoi(m[1])
			ids = append(ids, id)
		}
		if summaryRE.MatchString(x.raw) {
			summary = x.raw
		}
	}
	first := ranks + appSpares
	if len(ids) < len(kills) {
		a.fatalf("gaspirun started %d replacements %v, want one per kill (%d)", len(ids), ids, len(kills))
	}
	for i, id := range ids {
		if id != first+i {
			a.fatalf("replacement ids %v, want %d, %d, ... in turn: an id is never reused", ids, first, first+1)
		}
	}
	// The job's spare is the pool at the first loss; after it, only
	// replacements are, each taking one rank (whichever joined first).
	// The losses are the kills and any false failure (checked below).
	var took []int
	for _, o := range takeoversIn(a.run.Texts()) {
		took = append(took, o.proc)
	}
	if len(took) < len(kills) {
		a.fatalf("gaspirun noticed %d takeovers %v, want one per kill (%d) at least", len(took), took, len(kills))
	}
	later := slices.Clone(took[1:])
	slices.Sort(later)
	distinct := slices.Compact(later)
	if took[0] != ranks || distinct[0] < first || len(distinct) != len(took)-1 {
		a.errorf("the lost ranks were taken over by processes %v, want the job's spare (%d) first, then a different replacement (from %d up) each time", took, ranks, first)
	}
	m := summaryRE.FindStringSubmatch(summary)
	if m == nil {
		a.fatalf("no summary line from gaspirun")
	}
	// The killed processes; every other one exited 0, or, an idle spare
	// that had not ended a --grace after the ranks, was stopped by
	// gaspirun (as in test/kmtier, logged: known to happen).
	total, _ := strconv.Atoi(m[1])
	counted, killed := 0, 0
	for _, part := range strings.Split(m[3], ", ") {
		n, how, _ := strings.Cut(part, " ")
		c, err := strconv.Atoi(n)
		switch {
		case err != nil:
			a.errorf("gaspirun's summary %q: cannot read %q", summary, part)
		case how == "killed by signal 9 (SIGKILL)":
			killed = c
		case how == "stopped by gaspirun":
			a.t.Logf("known: %d idle spares were stopped by gaspirun after --grace", c)
		case how == "exited with code 77":
			a.checkFalseFailures(c)
		case how != "exited 0":
			a.errorf("gaspirun's summary %q: %d processes %s; want every process not killed by the test to end with exit 0", summary, c, how)
			a.logVerdicts()
		}
		counted += c
	}
	if killed != len(kills) || counted != total {
		a.errorf("gaspirun's summary %q: want %d killed by SIGKILL, the test's kills, among %d processes", summary, len(kills), total)
	}
	a.t.Logf("%s", summary)
}

// TeraSort's input: 120,000 records per rank, a checkpoint every 2,500
// (48 per rank: each kill costs the job one or two of them).
const (
	refillRecords = 480000
	refillCkpt    = 2500
)

// teraSortInput generates the input into a directory of the test and
// returns it with its summary line (terasort sum).
func teraSortInput(t *testing.T) (dir, sum string) {
	t.Helper()
	dir = t.TempDir()
	if out, err := exec.Command(bins.terasort, "gen", "--records", strconv.Itoa(refillRecords), "--parts", strconv.Itoa(ranks), "--out", dir, "--quiet").CombinedOutput(); err != nil {
		t.Fatalf("terasort gen: %v\n%s", err, out)
	}
	out, err := exec.Command(bins.terasort, "sum", dir).Output()
	if err != nil {
		t.Fatalf("terasort sum: %v", err)
	}
	return dir, proctest.LastLine(string(out))
}

// TestRespawnTeraSortFiveKills: TeraSort with --respawn and five spaced
// kills ends with exit 0, rank 0's summary line equal to the input's, and
// an output that terasort validate finds in order with the input's
// checksum.
func TestRespawnTeraSortFiveKills(t *testing.T) {
	if bins.err != nil {
		t.Skip(bins.err)
	}
	in, sum := teraSortInput(t)
	out := filepath.Join(t.TempDir(), "sorted")
	a := startApp(t, true, bins.terasort, "sort", "--in", in, "--out", out, "--ckpt-records", strconv.Itoa(refillCkpt), "-v")
	a.progress, a.result = a.sortSent, regexp.MustCompile(`^records=\d+ checksum=[0-9a-f]{16}$`)
	kills := a.killSpaced()
	a.checkRefilled(a.finish(), kills)
	if got := a.rankZero(); got != sum {
		a.fatalf("rank 0's summary %q, want the input's %q", got, sum)
	}
	v, err := exec.Command(bins.terasort, "validate", out).Output()
	if err != nil || proctest.LastLine(string(v)) != sum {
		t.Fatalf("terasort validate %s: %v; last line %q, want %q\n%s", out, err, proctest.LastLine(string(v)), sum, v)
	}
}

// wordCountArgs is WordCount on 400,000 generated lines, 24 checkpoints
// during each rank's share, into out.
func wordCountArgs(out string) []string {
	return []string{"run", "--generate", "400000", "--ckpts", "24", "--out", out}
}

var wordCountResultRE = regexp.MustCompile(`^words=\d+ total=\d+ digest=[0-9a-f]{16}$`)

// TestRespawnWordCountFiveKills: WordCount with --respawn and five spaced
// kills ends with exit 0 and the counts of the same job run without a
// failure: the same result line, and part files holding the same words
// with the same counts.
func TestRespawnWordCountFiveKills(t *testing.T) {
	if bins.err != nil {
		t.Skip(bins.err)
	}
	refOut := filepath.Join(t.TempDir(), "ref")
	ref := startApp(t, false, bins.wordcount, wordCountArgs(refOut)...)
	ref.result = wordCountResultRE
	if code := ref.finish(); code != 0 {
		ref.fatalf("the failure-free job exited %d", code)
	}
	want := ref.rankZero()
	t.Logf("failure-free: %s", want)

	out := filepath.Join(t.TempDir(), "out")
	a := startApp(t, true, bins.wordcount, wordCountArgs(out)...)
	a.progress, a.result = a.checkpointedSince, wordCountResultRE
	kills := a.killSpaced()
	a.checkRefilled(a.finish(), kills)
	if got := a.rankZero(); got != want {
		a.fatalf("result %q, want the failure-free %q", got, want)
	}
	gotCounts, wantCounts := wordCounts(t, out), wordCounts(t, refOut)
	if !slices.Equal(gotCounts, wantCounts) {
		i := firstDiff(gotCounts, wantCounts)
		t.Fatalf("the part files hold %d word counts, the failure-free job's %d; the first difference, in sorted order, is %q against %q",
			len(gotCounts), len(wantCounts), lineAt(gotCounts, i), lineAt(wantCounts, i))
	}
}

// lineAt is s[i], or "(none)" past its end.
func lineAt(s []string, i int) string {
	if i < len(s) {
		return s[i]
	}
	return "(none)"
}

// wordCounts returns the lines (word<TAB>count) of the part files in dir,
// sorted.
func wordCounts(t *testing.T, dir string) []string {
	t.Helper()
	parts, err := filepath.Glob(filepath.Join(dir, "part-*"))
	if err != nil || len(parts) == 0 {
		t.Fatalf("no part files in %s (%v)", dir, err)
	}
	var lines []string
	for _, p := range parts {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		lines = append(lines, strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")...)
	}
	slices.Sort(lines)
	return lines
}

// firstDiff is the first index where a and b differ.
func firstDiff(a, b []string) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
