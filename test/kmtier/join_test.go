package kmtier

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/internal/auth"
	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
)

// Joiners started by hand (cmd/gaspirun doc, "Keeping the spare pool
// full"): the job's program started with PGAS_JOIN=1 and the job's
// PGAS_RENDEZVOUS and PGAS_TOKEN joins the running job as a new spare
// with a new process id. gaspirun does not print the token, and has no
// flag or variable to take one: a test reads both from the environment of
// a running process of the job (/proc/PID/environ), as anyone who can
// read that process's environment can. The joiner takes no other
// variable: its id and the job's shape come from the rendezvous.

const (
	// liveDeadline is gaspirun's --timeout for the jobs here: up to 16
	// ranks and a joiner on a busy 2-core machine (the failure-free
	// 16-rank job took 3m14s under -race at a load of 230).
	liveDeadline = 6 * time.Minute
	// liveStep bounds the wait for one event of a running job (its
	// processes found, the joiner added, a rank taken over).
	liveStep = 90 * time.Second
)

// joinWorkload runs a fixed number of iterations whatever the
// convergence, so that a joiner started with the job is in the pool, and
// a rank killed, long before the end (the joiner is in the pool within a
// second, 8 s under -race, of the start): 600 (16 ranks on this 2-core
// machine took 7 s at a load of 160, 57 s at 245), or under -race, where
// every iteration costs several times more, 200.
func joinWorkload() []string {
	iters := "600"
	if proctest.Race {
		iters = "200"
	}
	return []string{"--generate", "200000", "--dim", "10", "--k", "20", "--max-iter", iters, "--tol", "0", "--ckpt-every", "5"}
}

// tokenWorkload is a shorter job that a joiner with a wrong token tries to
// join (it is refused within a second).
var tokenWorkload = []string{"--generate", "200000", "--dim", "10", "--k", "20", "--max-iter", "300", "--tol", "0", "--ckpt-every", "5"}

var (
	// byHandRE is gaspirun's notice of a joiner it did not start.
	byHandRE = regexp.MustCompile(`^gaspirun: process (\d+) joined the running job by hand \(pid (\d+) on \S+\); it waits as spare s(\d+)$`)
	// handHoldsRE is gaspirun's notice that such a joiner took a rank.
	handHoldsRE = regexp.MustCompile(`^gaspirun: spare process (\d+) \(joined by hand\) now holds rank (\d+) \(epoch \d+\)$`)
)

// live is a gaspirun job of kmeans that the test acts on while it runs:
// it reads the output as it comes and finds the job's processes in /proc
// (by their PGAS_JOB_ID) to signal them and, at the end, check by pid
// that none is left.
type live struct {
	t     *testing.T
	n     int
	id    string
	run   *proctest.Job
	procs *proctest.Procs
	stop  func() // stops the /proc watch; idempotent
}

// startLive starts gaspirun -n n --spares spares [launcher...] -- kmeans
// args with PGAS_LOG=info. The test's cleanup kills what is left.
func startLive(t *testing.T, n, spares int, launcher, args []string) *live {
	t.Helper()
	if bins.err != nil {
		t.Skip(bins.err)
	}
	l := &live{t: t, n: n, id: fmt.Sprintf("kmtier-%d-%x", os.Getpid(), rand.Uint64())}
	gargs := []string{"-n", strconv.Itoa(n), "--spares", strconv.Itoa(spares),
		"--timeout", liveDeadline.String(), "--grace", grace.String(), "--job-id", l.id}
	gargs = append(append(append(gargs, launcher...), "--", bins.kmeans), args...)
	cmd := exec.Command(bins.gaspirun, gargs...)
	cmd.Env = append(os.Environ(), "PGAS_LOG=info")
	t.Logf("gaspirun %s", strings.Join(gargs, " "))
	run, err := proctest.Start(proctest.JobConfig{Bound: liveDeadline + 30*time.Second}, cmd)
	if err != nil {
		t.Fatalf("start gaspirun: %v", err)
	}
	l.run = run
	l.procs = proctest.NewProcs()
	l.stop = sync.OnceFunc(l.procs.Watch(l.id, cmd.Process.Pid, 20*time.Millisecond))
	// A test that failed half-way stops gaspirun, which tears the job
	// down (SIGKILL would leave a local job's processes running).
	t.Cleanup(func() {
		run.Stop(30 * time.Second)
		l.stop()
	})
	return l
}

// contract returns the job's rendezvous address and token, read from the
// environment of process 0 once it runs.
func (l *live) contract() (rendezvous, token string) {
	l.t.Helper()
	deadline := time.Now().Add(liveStep)
	for {
		if pid, ok := l.procs.PIDOf(0); ok {
			rv, ok1 := proctest.EnvOf(pid, "PGAS_RENDEZVOUS")
			tok, ok2 := proctest.EnvOf(pid, "PGAS_TOKEN")
			if ok1 && ok2 {
				return rv, tok
			}
		}
		if l.run.Ended() || time.Now().After(deadline) {
			l.t.Fatalf("no process 0 of job %s with PGAS_RENDEZVOUS and PGAS_TOKEN within %v (gaspirun ended: %v)\n%s",
				l.id, liveStep, l.run.Ended(), l.text())
		}
		time.Sleep(20 * time.Millisecond) // real processes: poll with a deadline
	}
}

// waitLine waits up to liveStep for a line of gaspirun's output that
// match accepts and returns it.
func (l *live) waitLine(what string, match func(string) bool) string {
	l.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), liveStep)
	defer cancel()
	found, err := l.run.WaitLine(ctx, func(x proctest.Line) bool { return match(x.Text) })
	if err != nil {
		if l.run.Ended() {
			l.t.Fatalf("gaspirun exited (%d) before %s\n%s", l.run.ExitCode(), what, l.text())
		}
		l.t.Fatalf("no %s within %v\n%s", what, liveStep, l.text())
	}
	return found.Text
}

// end waits for gaspirun (bounded by the job's --timeout), checks by pid
// that no process of the job is left, and returns what the job printed.
func (l *live) end() *result {
	l.t.Helper()
	l.run.Wait(context.Background()) // the bound ends it
	l.stop()
	_, _, ended, _ := l.run.Procs()[0].Exit()
	res := &result{code: l.run.ExitCode(), wall: ended.Sub(l.run.Begin()), out: l.run.Output(), lines: l.run.Texts()}
	l.t.Logf("gaspirun exited %d after %v (load average %s)", res.code, res.wall.Round(time.Millisecond), proctest.LoadAvg())
	l.procs.Scan(l.id, l.run.Procs()[0].Cmd.Process.Pid)
	checkGone(l.t, l.procs, l.id, l.n)
	if l.run.TimedOut() {
		l.t.Fatalf("gaspirun did not end within %v\n%s", liveDeadline+30*time.Second, res.text())
	}
	return res
}

// text is gaspirun's output so far, without the Raft library's chatter.
func (l *live) text() string {
	return (&result{lines: l.run.Texts()}).text()
}

// liveBaseline returns the failure-free answer of kmeans args on n ranks,
// run once per test binary.
func liveBaseline(t *testing.T, n int, args []string) final {
	t.Helper()
	key := fmt.Sprintf("-n %d -- %s", n, strings.Join(args, " "))
	baselines.mu.Lock()
	defer baselines.mu.Unlock()
	if baselines.m == nil {
		baselines.m = map[string]final{}
	}
	if f, ok := baselines.m[key]; ok {
		return f
	}
	res := startLive(t, n, 0, nil, args).end()
	if res.code != 0 {
		t.Fatalf("failure-free baseline run on %d ranks exited %d\n%s", n, res.code, res.text())
	}
	f := res.final(t)
	t.Logf("failure-free baseline on %d ranks: sha256=%s sse=%s iterations=%d", n, f.sum, f.sse, f.iter)
	baselines.m[key] = f
	return f
}

// startJoiner starts kmeans args by hand as a joiner of the job at
// rendezvous with token: the documented environment (PGAS_JOIN,
// PGAS_RENDEZVOUS, PGAS_TOKEN) and no other PGAS_ variable but PGAS_LOG.
func startJoiner(t *testing.T, rendezvous, token string, args []string) *proctest.Job {
	t.Helper()
	cmd := exec.Command(bins.kmeans, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PGAS_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "PGAS_JOIN=1", "PGAS_RENDEZVOUS="+rendezvous, "PGAS_TOKEN="+token, "PGAS_LOG=info", "GOMAXPROCS=1")
	j, err := proctest.Start(proctest.JobConfig{Bound: liveDeadline + 30*time.Second}, cmd)
	if err != nil {
		t.Fatalf("start the joiner: %v", err)
	}
	t.Cleanup(j.Kill)
	return j
}

// joinerText is a joiner's output without the Raft library's chatter.
func joinerText(j *proctest.Job) string {
	return (&result{lines: j.Texts()}).text()
}

// TestJoinByHand: a 16-rank job without spares (gaspirun --on-death
// continue: a lost rank is the runtime's business) and a joiner started
// by hand with the documented environment. The rendezvous gives it id 16,
// the first after the job's own; once rank 0 has applied the view that
// adds it to the pool, the test SIGKILLs rank 5's process. The joiner
// takes rank 5 (the only spare), the job ends with the failure-free
// answer of 16 ranks and exit 0, the joiner ends by itself with exit 0,
// and no process of the job is left.
func TestJoinByHand(t *testing.T) {
	const n, victim = 16, 5
	args := joinWorkload()
	base := liveBaseline(t, n, args)
	l := startLive(t, n, 0, []string{"--on-death", "continue"}, args)
	rendezvous, token := l.contract()
	joiner := startJoiner(t, rendezvous, token, args)

	notice := l.waitLine("the joiner's admission", byHandRE.MatchString)
	m := byHandRE.FindStringSubmatch(notice)
	if id, _ := strconv.Atoi(m[1]); id != n {
		t.Fatalf("the joiner got process id %d, want %d (the first after the job's 0..%d)\n%s", id, n, n-1, notice)
	}
	if pid, _ := strconv.Atoi(m[2]); pid != joiner.Procs()[0].Cmd.Process.Pid {
		t.Fatalf("gaspirun names pid %d for the joiner, which is pid %d: %s", pid, joiner.Procs()[0].Cmd.Process.Pid, notice)
	}
	pool := fmt.Sprintf("joiner=%d ", n)
	l.waitLine("rank 0's view with the joiner in the pool", func(s string) bool {
		return strings.HasPrefix(s, "[r0] ") && strings.Contains(s, `msg="a process joined the job"`) && strings.Contains(s+" ", pool)
	})
	pid, ok := l.procs.Signal(victim, syscall.SIGKILL)
	if !ok {
		t.Fatalf("could not SIGKILL process %d (pid %d, found: %v): it must hold rank %d\n%s", victim, pid, pid != 0, victim, l.text())
	}
	t.Logf("%v: SIGKILLed process %d (rank %d, pid %d)", time.Since(l.run.Begin()).Round(time.Millisecond), victim, victim, pid)
	l.waitLine(fmt.Sprintf("the joiner taking rank %d", victim), func(s string) bool {
		h := handHoldsRE.FindStringSubmatch(s)
		return h != nil && h[1] == strconv.Itoa(n) && h[2] == strconv.Itoa(victim)
	})

	res := l.end()
	if res.code != 0 {
		t.Fatalf("gaspirun exited %d, want 0 (the joiner took the lost rank)\n%s", res.code, res.text())
	}
	if got := res.final(t); got != base {
		t.Fatalf("final line %+v differs from the failure-free run's %+v\n%s", got, base, res.text())
	}
	if !joiner.WaitEnd(killWait) {
		t.Fatalf("the joiner was still running %v after gaspirun ended\n%s", killWait, joinerText(joiner))
	}
	if code, sig, _, _ := joiner.Procs()[0].Exit(); code != 0 || sig != 0 {
		t.Fatalf("the joiner ended with exit %d (signal %v), want exit 0 by itself\n%s", code, sig, joinerText(joiner))
	}
	if !strings.Contains(joiner.Output(), fmt.Sprintf(`msg="spare promoted" proc=%d rank=%d `, n, victim)) {
		t.Errorf("the joiner logged no promotion to rank %d\n%s", victim, joinerText(joiner))
	}
	if !res.has("+ 1 joined)") {
		t.Errorf("gaspirun's summary does not count the joiner\n%s", res.text())
	}
}

// TestJoinWrongToken: a joiner with a token other than the job's is
// refused by the rendezvous: it exits non-zero at once, saying that the
// token handshake failed and that PGAS_TOKEN must be the launcher's; the
// job runs on undisturbed to the failure-free answer and exit 0, and
// gaspirun logs the refused connection and counts no joiner.
func TestJoinWrongToken(t *testing.T) {
	base := liveBaseline(t, ranks, tokenWorkload)
	l := startLive(t, ranks, 1, nil, tokenWorkload)
	rendezvous, token := l.contract()
	wrong := auth.FormatToken(auth.NewToken())
	if wrong == token {
		t.Fatal("a fresh token equals the job's")
	}
	joiner := startJoiner(t, rendezvous, wrong, tokenWorkload)
	if !joiner.WaitEnd(liveStep) {
		t.Fatalf("the joiner with a wrong token still runs after %v\n%s", liveStep, joinerText(joiner))
	}
	refusedWhileRunning := !l.run.Ended()
	code, sig, _, _ := joiner.Procs()[0].Exit()
	out := joinerText(joiner)
	if sig != 0 {
		t.Fatalf("the joiner with a wrong token was killed by %v; want a non-zero exit of its own\n%s", sig, out)
	}
	t.Logf("the joiner with a wrong token: exit %d: %s", code, strings.TrimSpace(out))
	if code == 0 {
		t.Errorf("the joiner with a wrong token exited 0; want a non-zero exit")
	}
	for _, want := range []string{"rendezvous authentication failed", "PGAS_TOKEN must be the same as the launcher's"} {
		if !strings.Contains(out, want) {
			t.Errorf("the joiner's message lacks %q:\n%s", want, out)
		}
	}

	res := l.end()
	if !refusedWhileRunning {
		t.Fatalf("the job ended before the joiner was refused: nothing was tried against a running job (workload too short for this machine?)\n%s", res.text())
	}
	if res.code != 0 {
		t.Fatalf("gaspirun exited %d, want 0 (the joiner refused, the job undisturbed)\n%s", res.code, res.text())
	}
	if got := res.final(t); got != base {
		t.Fatalf("final line %+v differs from the failure-free run's %+v\n%s", got, base, res.text())
	}
	if !res.has(`msg="rendezvous: connection refused"`) || !res.has("wrong job token") {
		t.Errorf("gaspirun did not log the refused joiner\n%s", res.text())
	}
	if res.has("joined the running job") || res.has("joined)") {
		t.Errorf("gaspirun counts a joiner although it was refused\n%s", res.text())
	}
}
