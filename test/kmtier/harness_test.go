package kmtier

import (
	"context"
	"fmt"
	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	// jobDeadline is gaspirun's --timeout for every job: generous, for a
	// busy 2-core host (a job takes well under 5 s there).
	jobDeadline = 60 * time.Second
	// killWait bounds the wait for a job's processes to be gone after
	// gaspirun ended.
	killWait = 15 * time.Second
	// grace is gaspirun's --grace: idle spares get SIGKILL this long after
	// SIGTERM (see TestFailureFree about spares that are slow to exit).
	grace = time.Second
)

// The workload every scenario runs: small enough that a job takes a
// fraction of a second of compute on this machine, with checkpoints
// every 5 iterations.
var workload = []string{"--generate", "200000", "--dim", "10", "--k", "20", "--max-iter", "25", "--ckpt-every", "5"}

const (
	ranks    = 4
	maxIter  = 25
	ckptStep = 5
)

var bins struct {
	gaspirun, kmeans string
	err              error
}

func TestMain(m *testing.M) {
	os.Exit(proctest.Main(m, "kmtier", proctest.Race, []string{"./cmd/gaspirun", "./apps/kmeans/cmd/kmeans"}, func(dir string, skip error) {
		bins.err = skip
		bins.gaspirun = filepath.Join(dir, "gaspirun")
		bins.kmeans = filepath.Join(dir, "kmeans")
	}))
}

// spec is one gaspirun job of kmeans.
type spec struct {
	n        int // ranks (0: ranks)
	spares   int
	launcher []string // extra gaspirun flags (--ranks-per-host, --resume, ...)
	args     []string // kmeans flags; nil: workload
	extra    []string // kmeans flags after args (--inject, ...)
	// during, when set, runs once gaspirun started, with the job's
	// processes as they are found and gaspirun's pid; the function it
	// returns is called when gaspirun ended.
	during func(pids *proctest.Procs, launcher int) (stop func())
	// refused: the job ends as it starts (its processes refuse the
	// configuration and exit within milliseconds), before the watcher
	// may have seen them all: the count of processes seen is not
	// required. The scan after gaspirun ended still finds any process
	// of the job left running.
	refused bool
}

// result is what a finished job left behind.
type result struct {
	code  int
	lines []string // every output line, in the order gaspirun printed them per stream
	out   string
	wall  time.Duration
}

var (
	finalRE  = regexp.MustCompile(`^\[r0\] centroids sha256=([0-9a-f]{64}) sse=(\S+) iterations=(\d+)$`)
	injectRE = regexp.MustCompile(`^\[[rsp]\d+\] inject: SIGKILL rank (\d+) \(pid (\d+)\) after iteration (\d+)(, inside the checkpoint commit)? at (\S+)$`)
	holdsRE  = regexp.MustCompile(`^gaspirun: spare process (\d+) now holds rank (\d+) \(epoch (\d+)\)$`)
)

// final is rank 0's last line.
type final struct {
	sum  string
	sse  string
	iter int
}

// kill is one inject line.
type kill struct {
	rank, pid, iter int
	commit          bool
}

// run starts gaspirun -n 4 --spares s -- kmeans ..., waits for it (bounded)
// and checks by pid that none of its processes is left.
func run(t *testing.T, s spec) *result {
	t.Helper()
	if bins.err != nil {
		t.Skip(bins.err)
	}
	jobID := fmt.Sprintf("kmtier-%d-%x", os.Getpid(), rand.Uint64())
	n := ranks
	if s.n > 0 {
		n = s.n
	}
	args := []string{"-n", strconv.Itoa(n), "--spares", strconv.Itoa(s.spares),
		"--timeout", jobDeadline.String(), "--grace", grace.String(), "--job-id", jobID}
	args = append(args, s.launcher...)
	args = append(args, "--", bins.kmeans)
	if s.args == nil {
		args = append(args, workload...)
	} else {
		args = append(args, s.args...)
	}
	args = append(args, s.extra...)
	cmd := exec.Command(bins.gaspirun, args...)
	cmd.Env = append(os.Environ(), "PGAS_LOG=info")
	t.Logf("gaspirun %s", strings.Join(args, " "))
	j, err := proctest.Start(proctest.JobConfig{Bound: jobDeadline + 30*time.Second}, cmd)
	if err != nil {
		t.Fatalf("start gaspirun: %v", err)
	}
	launcher := cmd.Process.Pid
	// Watch /proc for the job's processes (they carry PGAS_JOB_ID) while it
	// runs, so that every one of them can be checked by pid at the end.
	pids := proctest.NewProcs()
	stopWatch := pids.Watch(jobID, launcher, 20*time.Millisecond)
	stopDuring := func() {}
	if s.during != nil {
		stopDuring = s.during(pids, launcher)
	}
	j.Wait(context.Background()) // the bound ends it
	stopDuring()
	stopWatch()
	_, _, end, _ := j.Procs()[0].Exit()
	res := &result{code: j.ExitCode(), wall: end.Sub(j.Begin()), out: j.Output(), lines: j.Texts()}
	t.Logf("gaspirun exited %d after %v (load average %s)", res.code, res.wall.Round(time.Millisecond), proctest.LoadAvg())
	// The victims' pids come from their inject lines too.
	for _, k := range res.kills() {
		pids.Add(k.pid)
	}
	pids.Scan(jobID, launcher)
	if s.refused {
		n = 0
	}
	checkGone(t, pids, jobID, n)
	if j.TimedOut() {
		t.Fatalf("gaspirun did not end within %v\n%s", jobDeadline+30*time.Second, res.text())
	}
	return res
}

// checkGone fails the test for every process of the job still running
// killWait after gaspirun ended (and kills it); a job of n ranks has at
// least n processes.
func checkGone(t *testing.T, procs *proctest.Procs, jobID string, n int) {
	t.Helper()
	for _, pid := range procs.Leftovers(killWait) {
		t.Errorf("process pid %d of job %s was still running %v after gaspirun ended; killed it", pid, jobID, killWait)
	}
	pids := procs.PIDs()
	if len(pids) < n {
		t.Errorf("saw only %d processes of job %s (pids %v), want at least %d: the pid check cannot be trusted", len(pids), jobID, pids, n)
	}
}

// text is the job's output without the Raft library's chatter, for
// failure messages.
func (r *result) text() string {
	var b strings.Builder
	for _, l := range r.lines {
		if strings.Contains(l, "component=raft") {
			continue
		}
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.String()
}

// final returns rank 0's final line; it fails the test unless there is
// exactly one.
func (r *result) final(t *testing.T) final {
	t.Helper()
	var out []final
	for _, l := range r.lines {
		if m := finalRE.FindStringSubmatch(l); m != nil {
			it, _ := strconv.Atoi(m[3])
			out = append(out, final{sum: m[1], sse: m[2], iter: it})
		}
	}
	if len(out) != 1 {
		t.Fatalf("want exactly one final line from rank 0, got %d (exit %d)\n%s", len(out), r.code, r.text())
	}
	return out[0]
}

// kills returns the inject lines in output order.
func (r *result) kills() []kill {
	var out []kill
	for _, l := range r.lines {
		if m := injectRE.FindStringSubmatch(l); m != nil {
			rk, _ := strconv.Atoi(m[1])
			pid, _ := strconv.Atoi(m[2])
			it, _ := strconv.Atoi(m[3])
			out = append(out, kill{rank: rk, pid: pid, iter: it, commit: m[4] != ""})
		}
	}
	return out
}

// promotions returns rank -> spare process from gaspirun's notices.
func (r *result) promotions() map[int]int {
	out := map[int]int{}
	for _, l := range r.lines {
		if m := holdsRE.FindStringSubmatch(l); m != nil {
			p, _ := strconv.Atoi(m[1])
			rk, _ := strconv.Atoi(m[2])
			out[rk] = p
		}
	}
	return out
}

// has reports whether some line contains s.
func (r *result) has(s string) bool { return strings.Contains(r.out, s) }

// index is the position of the first line containing s at or after from,
// or -1.
func (r *result) index(s string, from int) int {
	for i := max(from, 0); i < len(r.lines); i++ {
		if strings.Contains(r.lines[i], s) {
			return i
		}
	}
	return -1
}

// logRecords returns the slog records (key=value lines) with message msg.
func (r *result) logRecords(msg string) []map[string]string {
	var out []map[string]string
	for _, l := range r.lines {
		_, s, ok := strings.Cut(l, "] ")
		if !ok || !strings.HasPrefix(s, "time=") {
			continue
		}
		kv := parseKV(s)
		if kv["msg"] == msg {
			out = append(out, kv)
		}
	}
	return out
}

// Baselines: the failure-free run of each argument list, once per test
// binary.
var baselines struct {
	mu sync.Mutex
	m  map[string]final
}

// baseline returns the failure-free result of gaspirun -n 4 -- kmeans args.
func baseline(t *testing.T, args []string) final {
	t.Helper()
	if args == nil {
		args = workload
	}
	key := strings.Join(args, " ")
	baselines.mu.Lock()
	defer baselines.mu.Unlock()
	if baselines.m == nil {
		baselines.m = map[string]final{}
	}
	if f, ok := baselines.m[key]; ok {
		return f
	}
	res := run(t, spec{args: args})
	if res.code != 0 {
		t.Fatalf("failure-free baseline run exited %d\n%s", res.code, res.text())
	}
	f := res.final(t)
	t.Logf("failure-free baseline: sha256=%s sse=%s iterations=%d", f.sum, f.sse, f.iter)
	baselines.m[key] = f
	return f
}

// checkRecovered checks a job that had failures injected: exit 0, the
// failure-free checksum, SSE and iteration count, and the expected number
// of kills.
func checkRecovered(t *testing.T, res *result, wantKills int) {
	t.Helper()
	base := baseline(t, nil)
	if res.code != 0 {
		t.Fatalf("gaspirun exited %d, want 0 (every failure recovered)\n%s", res.code, res.text())
	}
	got := res.final(t)
	if got != base {
		t.Fatalf("final line %+v differs from the failure-free run's %+v\n%s", got, base, res.text())
	}
	if k := res.kills(); len(k) != wantKills {
		t.Fatalf("%d inject lines (%v), want %d\n%s", len(k), k, wantKills, res.text())
	}
	if !res.has(fmt.Sprintf("%d killed by signal 9 (SIGKILL)", wantKills)) {
		t.Fatalf("gaspirun's summary does not count %d SIGKILLed processes\n%s", wantKills, res.text())
	}
}

// parseKV reads a slog text line's key=value pairs.
func parseKV(s string) map[string]string {
	kv := map[string]string{}
	proctest.ParseKV(s, kv)
	return kv
}
