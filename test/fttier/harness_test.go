package fttier

import (
	"context"
	"fmt"
	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	ranks  = 4
	spares = 2
	// jobDeadline bounds every job: generous, for a busy 2-core host.
	jobDeadline = 150 * time.Second
	// progTimeout is ftstep's own -timeout: it gives up (and a waiting
	// spare exits) after this long.
	progTimeout = 90 * time.Second
	// stepWait bounds one expected event (a detection, a promotion).
	stepWait = 45 * time.Second
)

var bins struct {
	gaspirun, prog, terasort, wordcount string
	err                                 error
}

func TestMain(m *testing.M) {
	if probe := os.Getenv("FTTIER_TRACE_PROBE"); probe != "" {
		os.Exit(traceProbe(probe)) // a helper of TestDirectWritesWithoutTracing
	}
	os.Exit(proctest.Main(m, "fttier", proctest.Race, []string{"./cmd/gaspirun", "./test/fttier/testprog/ftstep", "./apps/terasort/cmd/terasort", "./apps/wordcount/cmd/wordcount"}, func(dir string, skip error) {
		bins.err = skip
		bins.gaspirun = filepath.Join(dir, "gaspirun")
		bins.prog = filepath.Join(dir, "ftstep")
		bins.terasort = filepath.Join(dir, "terasort")
		bins.wordcount = filepath.Join(dir, "wordcount")
	}))
}

// expectedSum is ftstep's result for n ranks and s steps: step i
// contributes the sum over ranks r of r*i+1.
func expectedSum(n, s int64) int64 { return n*s + n*(n-1)/2*(s*(s-1)/2) }

// rec is one parsed output line.
type rec struct {
	recv  time.Time
	label string // gaspirun's prefix without brackets; "" for gaspirun's own lines
	kind  string // log, gaspirun, pid, init, result, stats, leader, progress, rank (step messages), other
	msg   string // a log record's message
	kv    map[string]string
	raw   string
}

func (r rec) proc() int { return r.int("proc") }

func (r rec) int(key string) int {
	v, err := strconv.Atoi(r.kv[key])
	if err != nil {
		return -1
	}
	return v
}

func parseRec(raw string, recv time.Time) rec {
	r := rec{recv: recv, raw: raw, kv: map[string]string{}}
	s := raw
	if strings.HasPrefix(s, "[") {
		if i := strings.Index(s, "] "); i > 0 {
			r.label, s = s[1:i], s[i+2:]
		}
	}
	switch {
	case strings.HasPrefix(s, "gaspirun: "):
		r.kind = "gaspirun"
		return r
	case strings.HasPrefix(s, "time="):
		r.kind = "log"
		proctest.ParseKV(s, r.kv)
		r.msg = r.kv["msg"]
		return r
	}
	r.kind, s, _ = strings.Cut(s, " ")
	f := strings.Fields(s)
	switch r.kind {
	case "pid": // pid <pid> proc <p>
		if len(f) == 3 && f[1] == "proc" {
			r.kv["pid"], r.kv["proc"] = f[0], f[2]
		}
	case "rank": // rank <r> epoch <e>, or rank <r>: step ...
		if len(f) == 3 && f[1] == "epoch" {
			r.kind = "init"
			r.kv["rank"], r.kv["epoch"] = f[0], f[2]
		}
	case "result", "stats", "leader", "progress":
		proctest.ParseKV(s, r.kv)
	default:
		r.kind = "other"
	}
	return r
}

// job is one gaspirun run of ftstep.
type job struct {
	t         *testing.T
	run       *proctest.Job
	steps     int
	resultDir string

	// Guarded by run's lock (built by read, its OnLine).
	recs []rec
	pids map[int]int // process id -> OS pid
}

// jobOpts are the knobs of startJob.
type jobOpts struct {
	steps    int
	pause    time.Duration
	progress int           // ftstep -progress
	timeout  time.Duration // ftstep -timeout (0: progTimeout)
	extra    []string
	launch   []string // gaspirun flags, before the program (e.g. host labels)
	env      []string // KEY=VALUE for every process (through gaspirun)
	// as runs gaspirun (and so the job) with these binaries as another
	// user; nil: bins, as this process's user.
	as *runAs
}

// runAs is a jobOpts.as: the user, and the binaries that user runs.
type runAs struct {
	cred           *syscall.Credential
	gaspirun, prog string
	tmp            string // TMPDIR for the job, writable by the user
}

// startJob runs gaspirun -n 4 --spares 2 with ftstep under PGAS_LOG=info.
func startJob(t *testing.T, o jobOpts) *job {
	t.Helper()
	if bins.err != nil {
		t.Skip(bins.err)
	}
	if o.pause == 0 {
		o.pause = 20 * time.Millisecond
	}
	if o.progress == 0 {
		o.progress = 10
	}
	if o.timeout == 0 {
		o.timeout = progTimeout
	}
	j := &job{t: t, steps: o.steps, resultDir: t.TempDir(), pids: map[int]int{}}
	gaspirun, prog := bins.gaspirun, bins.prog
	if o.as != nil {
		gaspirun, prog = o.as.gaspirun, o.as.prog
		j.resultDir = filepath.Join(o.as.tmp, "results")
		if err := os.Mkdir(j.resultDir, 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(j.resultDir, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{"-n", strconv.Itoa(ranks), "--spares", strconv.Itoa(spares), "--timeout", jobDeadline.String()}
	args = append(args, o.launch...)
	args = append(args, "--", prog, "-steps", strconv.Itoa(o.steps), "-pause", o.pause.String(),
		"-progress", strconv.Itoa(o.progress), "-leader", "-stats", "-result-dir", j.resultDir,
		"-timeout", o.timeout.String(), "-finalize-timeout", "10s")
	args = append(args, o.extra...)
	// For example "-suspicion 1s -probe 500ms": a detector configuration
	// other than the default, for a machine too loaded for it.
	args = append(args, strings.Fields(os.Getenv("FTTIER_FTSTEP_ARGS"))...)
	cmd := exec.Command(gaspirun, args...)
	cmd.Env = append(append(os.Environ(), "PGAS_LOG=info"), o.env...)
	if o.as != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: o.as.cred}
		cmd.Env = append(cmd.Env, "TMPDIR="+o.as.tmp, "HOME="+o.as.tmp)
		cmd.Dir = o.as.tmp
	}
	run, err := proctest.Start(proctest.JobConfig{OnLine: j.read, Bound: jobDeadline}, cmd)
	if err != nil {
		t.Fatalf("start gaspirun: %v", err)
	}
	j.run = run
	t.Cleanup(j.cleanup)
	return j
}

// read parses one line; run's lock is held.
func (j *job) read(l proctest.Line) {
	x := parseRec(l.Text, l.Time)
	j.recs = append(j.recs, x)
	if x.kind == "pid" {
		if pid, err := strconv.Atoi(x.kv["pid"]); err == nil && x.proc() >= 0 {
			j.pids[x.proc()] = pid
		}
	}
}

// waitFor waits up to d for cond over the records; it fails the test,
// naming what, if the job ends or the time passes first.
func (j *job) waitFor(what string, d time.Duration, cond func(recs []rec) bool) {
	j.t.Helper()
	if !j.poll(d, cond) {
		j.fatalf("timed out after %v (or the job ended) waiting for %s", d, what)
	}
}

// poll is waitFor without failing: it reports whether cond held.
func (j *job) poll(d time.Duration, cond func(recs []rec) bool) bool {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return j.run.WaitCond(ctx, func() bool { return cond(j.recs) })
}

func (j *job) snapshot() []rec {
	j.run.Lock()
	defer j.run.Unlock()
	return append([]rec(nil), j.recs...)
}

func (j *job) pidOf(proc int) int {
	j.run.Lock()
	defer j.run.Unlock()
	return j.pids[proc]
}

// fatalf fails the test with the job's output attached.
func (j *job) fatalf(format string, args ...any) {
	j.t.Helper()
	j.t.Fatalf("%s\n--- job output (%v) ---\n%s", fmt.Sprintf(format, args...), time.Since(j.run.Begin()).Round(time.Millisecond), j.output())
}

func (j *job) errorf(format string, args ...any) {
	j.t.Helper()
	j.t.Errorf(format, args...)
}

// output is the job's output without Raft's connection chatter.
func (j *job) output() string {
	var b strings.Builder
	for _, x := range j.snapshot() {
		if x.kind == "log" && x.kv["component"] == "raft" {
			continue
		}
		if x.kind == "log" && x.msg == "failure report not accepted yet" {
			continue
		}
		b.WriteString(x.raw)
		b.WriteByte('\n')
	}
	return b.String()
}

// running waits until every rank has started and every process has
// reported its pid, and returns the Raft leader's process id.
func (j *job) running() int {
	j.t.Helper()
	j.waitFor("every rank to start and a Raft leader", stepWait, func(recs []rec) bool {
		return count(recs, "init") >= ranks && len(pidsOf(recs)) == ranks+spares && leaderAfter(recs, time.Time{}) >= 0
	})
	return leaderAfter(j.snapshot(), time.Time{})
}

// waitProgress waits until some rank completed step s in epoch e or later.
func (j *job) waitProgress(s, e int) {
	j.t.Helper()
	j.waitFor(fmt.Sprintf("progress to step %d in epoch %d", s, e), stepWait, func(recs []rec) bool {
		for _, x := range recs {
			if x.kind == "progress" && x.int("step") >= s && x.int("epoch") >= e {
				return true
			}
		}
		return false
	})
}

// signal sends sig to process proc of the job.
func (j *job) signal(proc int, sig syscall.Signal) time.Time {
	j.t.Helper()
	pid := j.pidOf(proc)
	if pid <= 0 {
		j.fatalf("no pid for process %d", proc)
	}
	at := time.Now()
	if err := syscall.Kill(pid, sig); err != nil {
		j.fatalf("kill -%v %d (process %d): %v", sig, pid, proc, err)
	}
	j.t.Logf("%v: sent %v to process %d (pid %d)", at.Sub(j.run.Begin()).Round(time.Millisecond), sig, proc, pid)
	return at
}

// waitHolder waits for gaspirun's notice that a spare process holds rank
// r and returns the process.
func (j *job) waitHolder(r int) int {
	j.t.Helper()
	holder := -1
	j.waitFor(fmt.Sprintf("a spare to take rank %d", r), stepWait, func(recs []rec) bool {
		for _, x := range recs {
			var p, rr int
			var e uint64
			if x.kind == "gaspirun" {
				if n, _ := fmt.Sscanf(x.raw, "gaspirun: spare process %d now holds rank %d (epoch %d)", &p, &rr, &e); n == 3 && rr == r {
					holder = p
					return true
				}
			}
		}
		return false
	})
	return holder
}

// waitApplied waits until every process in procs applied a view with
// epoch >= e.
func (j *job) waitApplied(procs []int, e int) {
	j.t.Helper()
	j.waitFor(fmt.Sprintf("processes %v to apply epoch %d", procs, e), stepWait, func(recs []rec) bool {
		got := map[int]bool{}
		for _, x := range recs {
			if x.kind == "log" && x.msg == "view applied" && x.int("epoch") >= e {
				got[x.proc()] = true
			}
		}
		for _, p := range procs {
			if !got[p] {
				return false
			}
		}
		return true
	})
}

// wait waits for gaspirun to exit and returns its exit code.
func (j *job) wait() int {
	j.t.Helper()
	ended := j.run.WaitEnd(jobDeadline)
	code := j.run.ExitCode()
	if !ended {
		j.fatalf("gaspirun still running after %v", jobDeadline)
	}
	j.t.Logf("gaspirun exited %d after %v", code, time.Since(j.run.Begin()).Round(time.Millisecond))
	return code
}

// checkResults checks that every rank printed the failure-free result,
// all in one epoch, and returns that epoch.
func (j *job) checkResults() int {
	j.t.Helper()
	want := strconv.FormatInt(expectedSum(ranks, int64(j.steps)), 10)
	byRank := map[int]rec{}
	for _, x := range j.snapshot() {
		if x.kind == "result" {
			if _, dup := byRank[x.int("rank")]; dup {
				j.errorf("rank %d printed two results: %s", x.int("rank"), x.raw)
			}
			byRank[x.int("rank")] = x
		}
	}
	epoch := -1
	for r := 0; r < ranks; r++ {
		x, ok := byRank[r]
		switch {
		case !ok:
			j.fatalf("rank %d printed no result", r)
		case x.kv["sum"] != want:
			j.fatalf("rank %d: %s, want sum=%s (the failure-free result)", r, x.raw, want)
		case epoch >= 0 && x.int("epoch") != epoch:
			j.fatalf("ranks ended in different epochs: rank %d in epoch %d, another in %d", r, x.int("epoch"), epoch)
		}
		epoch = x.int("epoch")
	}
	return epoch
}

// checkFailures checks that a failure was confirmed only for the
// processes in expected: anything else is a false positive. After a rank
// finished its job its process may be reported as failed by the others
// while they shut down: only records before the first result count.
func (j *job) checkFailures(expected ...int) {
	j.t.Helper()
	j.checkFailuresUntil(func(x rec) bool { return x.kind == "result" }, expected...)
}

// checkFailuresUntil is checkFailures over the records before the first
// one for which end holds.
func (j *job) checkFailuresUntil(end func(rec) bool, expected ...int) {
	j.t.Helper()
	exp := map[int]bool{}
	for _, p := range expected {
		exp[p] = true
	}
	var bad []string
	for _, x := range j.snapshot() {
		if end(x) {
			break
		}
		if x.kind == "log" && x.msg == "failure confirmed" && !exp[x.int("failed_proc")] {
			bad = append(bad, x.raw)
		}
	}
	if len(bad) > 0 {
		j.fatalf("false positive: a failure was confirmed for a process the test did not kill or stop:\n%s", strings.Join(bad, "\n"))
	}
}

// checkFinalize fails on a Finalize that did not complete (it once raced
// the other ranks' Close: Finish needs a Raft quorum they took away).
func (j *job) checkFinalize() {
	j.t.Helper()
	for _, x := range j.snapshot() {
		if x.kind == "other" && strings.HasPrefix(strings.TrimPrefix(x.raw, "["+x.label+"] "), "finalize:") {
			j.errorf("Finalize did not complete: %s", x.raw)
		}
	}
}

// statsOf returns the stats lines.
func statsOf(recs []rec) []rec {
	var out []rec
	for _, x := range recs {
		if x.kind == "stats" {
			out = append(out, x)
		}
	}
	return out
}

// cleanup stops gaspirun if it still runs, then checks by pid that no
// process of the job is left, killing and reporting any that is.
func (j *job) cleanup() {
	j.run.Stop(30 * time.Second)
	pids := pidsOf(j.snapshot())
	for _, pid := range j.extraPids() {
		pids[-pid] = pid
	}
	procOf := map[int]int{}
	for p, pid := range pids {
		procOf[pid] = p
	}
	for _, pid := range proctest.WaitGone(slices.Collect(maps.Keys(procOf)), 15*time.Second) {
		j.t.Errorf("process %d (pid %d) is still running after the job ended; killing it", procOf[pid], pid)
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

// extraPids are pids from the result directory (processes whose pid line
// was lost with gaspirun's output).
func (j *job) extraPids() []int {
	var out []int
	ms, _ := filepath.Glob(filepath.Join(j.resultDir, "pid.*"))
	for _, m := range ms {
		b, err := os.ReadFile(m)
		if err != nil {
			continue
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			out = append(out, pid)
		}
	}
	return out
}

// resultFile reads dir/<kind>.<proc>.
func (j *job) resultFile(kind string, proc int) (string, bool) {
	b, err := os.ReadFile(filepath.Join(j.resultDir, fmt.Sprintf("%s.%d", kind, proc)))
	if err != nil {
		return "", false
	}
	return strings.TrimSpace(string(b)), true
}

func pidsOf(recs []rec) map[int]int {
	m := map[int]int{}
	for _, x := range recs {
		if x.kind == "pid" {
			if pid, err := strconv.Atoi(x.kv["pid"]); err == nil && x.proc() >= 0 {
				m[x.proc()] = pid
			}
		}
	}
	return m
}

func count(recs []rec, kind string) int {
	n := 0
	for _, x := range recs {
		if x.kind == kind {
			n++
		}
	}
	return n
}

// leaderAfter is the process that last reported becoming the Raft leader
// at or after since, or -1.
func leaderAfter(recs []rec, since time.Time) int {
	p := -1
	for _, x := range recs {
		if x.kind == "leader" && !x.recv.Before(since) {
			p = x.proc()
		}
	}
	return p
}
