package mhtier

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/internal/testkit/mhjob"
	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
	"github.com/gaspigo/gaspigo/internal/testkit/simhost"
	"github.com/gaspigo/gaspigo/job"
)

const (
	// resultWait bounds a job's start to its final line: generous, for a
	// busy 2-core host (the failure-free job takes a few seconds there).
	resultWait = 90 * time.Second
	// endWait is the acceptance bound: every process ends by itself
	// within this long of the job's end (its final line).
	endWait = 30 * time.Second
	// stepWait bounds the wait for one progress line.
	stepWait = 60 * time.Second
	// triggerIter is the iteration after which a scenario's fault strikes.
	triggerIter = 10
)

// The job every scenario runs: 4 ranks and 2 spares on 3 hosts. node1
// runs processes 0 and 1 (ranks 0 and 1; process 0 serves the
// rendezvous); node2 runs rank 2 and spare process 4; node3 rank 3 and
// spare process 5. The loss of node1 takes two ranks, and the spares on
// the two other hosts take them; the loss of node2 takes a rank and an
// idle spare, as in the report of issue 9, and node3's spare steps in.
var (
	layout   = []int{0, 0, 1, 2, 1, 2}
	nspares  = 2
	workload = []string{"--generate", "200000", "--dim", "10", "--k", "20", "--max-iter", "40", "--ckpt-every", "5"}
)

var bins struct {
	kmeans, terasort, gaspibench, gaspirun string
	err                                    error
}

func TestMain(m *testing.M) {
	os.Exit(proctest.Main(m, "mhtier", proctest.Race, []string{"./apps/kmeans/cmd/kmeans", "./apps/terasort/cmd/terasort", "./cmd/gaspibench", "./cmd/gaspirun"}, func(dir string, skip error) {
		bins.err = skip
		bins.kmeans = filepath.Join(dir, "kmeans")
		bins.terasort = filepath.Join(dir, "terasort")
		bins.gaspibench = filepath.Join(dir, "gaspibench")
		bins.gaspirun = filepath.Join(dir, "gaspirun")
	}))
}

var (
	// finalRE is a job's answer: K-means' centroid line, or the summary
	// line of TeraSort's sort (checked against the input's by the test).
	finalRE = regexp.MustCompile(`^(centroids sha256=[0-9a-f]{64} sse=\S+ iterations=\d+|records=\d+ checksum=[0-9a-f]{16})$`)
	iterRE  = regexp.MustCompile(`^iter\s+(\d+)\s`)
)

// newCluster builds three simulated hosts, removed when the test ends.
func newCluster(t *testing.T) *simhost.Cluster {
	t.Helper()
	if bins.err != nil {
		t.Skip(bins.err)
	}
	return simhost.NewForTest(t, simhost.Config{Hosts: 3})
}

// start launches the job on c with the bare PGAS_* contract; tune, if
// not nil, adjusts the job's configuration first.
func start(t *testing.T, c *simhost.Cluster, tune func(*mhjob.Config)) *mhjob.Job {
	t.Helper()
	cfg := mhjob.Config{
		Cluster: c, Program: bins.kmeans, Args: workload, Hosts: layout, Spares: nspares,
		Env: []string{"PGAS_LOG=info", "GOMAXPROCS=1"},
	}
	if tune != nil {
		tune(&cfg)
	}
	j, err := mhjob.Start(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(j.Kill)
	t.Logf("job %s on %s (%v), rendezvous %s", j.JobID(), c.ID(), c.Subnet(), rendezvousOf(c, cfg.Rendezvous))
	return j
}

func rendezvousOf(c *simhost.Cluster, r string) string {
	if r != "" {
		return r
	}
	return fmt.Sprintf("%s:%d", c.Host(0).Addr(), mhjob.RendezvousPort)
}

// waitIter waits until some process reports iteration n (the reporter is
// whichever process holds rank 0).
func waitIter(t *testing.T, j *mhjob.Job, n int) proctest.Line {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), stepWait)
	defer cancel()
	l, err := j.WaitLine(ctx, func(l proctest.Line) bool {
		m := iterRE.FindStringSubmatch(l.Text)
		if m == nil {
			return false
		}
		i, _ := strconv.Atoi(m[1])
		return i >= n
	})
	if err != nil {
		t.Fatalf("no iteration %d: %v\n%s", n, err, output(j))
	}
	return l
}

// exitCutOff is the exit code of a process that was cut off from a
// membership quorum for longer than PGAS_CUTOFF.
const exitCutOff = job.ExitCutOff

// end is how a process must end.
type end int

const (
	exitZero  end = iota // by itself, exit 0
	killedBy9            // SIGKILLed by the test
	cutOff               // by itself, fenced (77) or cut off (spares' code for it)
	// healedSpare: an idle spare of a host cut off and healed. Whether
	// the others declared it failed is only known once the job ended (a
	// failure found during the cut may be committed after the heal): if
	// any did, as cutOff, otherwise as exitZero.
	healedSpare
)

func (e end) String() string {
	return [...]string{"exit 0", "SIGKILL", fmt.Sprintf("exit %d (fenced) or %d (cut off)", job.ExitDeclaredFailed, exitCutOff), "exit 0 if never declared failed"}[e]
}

func (e end) allows(code int, sig syscall.Signal) bool {
	switch e {
	case exitZero:
		return sig == 0 && code == 0
	case killedBy9:
		return sig == syscall.SIGKILL
	default:
		return sig == 0 && (code == job.ExitDeclaredFailed || code == exitCutOff)
	}
}

// Baselines: the failure-free answer of each workload, computed once per
// test binary.
var baseline struct {
	mu  sync.Mutex
	ans map[string]string
}

// reference returns the failure-free final line of the default workload.
func reference(t *testing.T) string { return referenceOf(t, workload) }

// referenceOf returns the failure-free final line of K-means with args,
// running the failure-free job first if no test has yet.
func referenceOf(t *testing.T, args []string) string {
	t.Helper()
	baseline.mu.Lock()
	defer baseline.mu.Unlock()
	key := strings.Join(args, " ")
	if baseline.ans[key] == "" {
		c := newCluster(t)
		j := start(t, c, func(cfg *mhjob.Config) { cfg.Args = args })
		if baseline.ans == nil {
			baseline.ans = map[string]string{}
		}
		baseline.ans[key] = finish(t, j, nil, "")
		t.Logf("failure-free reference (%s): %s", key, baseline.ans[key])
	}
	return baseline.ans[key]
}

// recovered fails the test unless the job went through a recovery (the
// reporting rank's "recovery: epoch N in force" line) before its final
// line: a fault that struck too late proves nothing.
func recovered(t *testing.T, j *mhjob.Job) {
	t.Helper()
	for _, l := range j.Lines() {
		if strings.HasPrefix(l.Text, "recovery: epoch ") {
			return
		}
		if finalRE.MatchString(l.Text) {
			break
		}
	}
	t.Errorf("the job printed its answer without a recovery: the fault came too late")
}

// finish waits for the job's final line and for every process to end
// (within endWait of that line), checks how each ended against want
// (missing entries: exit 0) and the runtime's stale-frame counters, and
// compares the answer with ref unless ref is empty. It returns the
// answer.
func finish(t *testing.T, j *mhjob.Job, want map[int]end, ref string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), resultWait)
	defer cancel()
	fin, err := j.WaitLine(ctx, func(l proctest.Line) bool { return finalRE.MatchString(l.Text) })
	if err != nil {
		j.Kill()
		t.Fatalf("no final line within %v of the start: %v\n%s", resultWait, err, output(j))
	}
	t.Logf("final line from process %d after %v: %s", fin.Proc, fin.Time.Sub(j.Begin()).Round(time.Millisecond), fin.Text)
	ctx, cancel = context.WithDeadline(context.Background(), fin.Time.Add(endWait))
	defer cancel()
	j.Wait(ctx)
	left := j.Running()
	dumpStacks(left)
	j.Kill()
	for _, p := range left {
		t.Errorf("process %d on %s was still running %v after the job's end; killed it (its goroutines, from SIGQUIT, are in the output)", p.ID, j.Host(p.ID).Name(), endWait)
	}
	for _, p := range j.Procs() {
		code, sig, at, _ := p.Exit()
		if slices.Contains(left, p) {
			continue
		}
		w := want[p.ID]
		if w == healedSpare {
			w = exitZero
			if declaredFailed(j, p.ID) {
				w = cutOff
			}
		}
		how := fmt.Sprintf("exit %d", code)
		if sig != 0 {
			how = "signal " + sig.String()
		}
		t.Logf("process %d on %s: %s, %v after the final line", p.ID, j.Host(p.ID).Name(), how, at.Sub(fin.Time).Round(time.Millisecond))
		if !w.allows(code, sig) {
			t.Errorf("process %d on %s ended with %s, want %v", p.ID, j.Host(p.ID).Name(), how, w)
		}
	}
	for _, l := range j.Lines() {
		if strings.Contains(l.Text, `msg="runtime closed"`) && !strings.Contains(l.Text, "stale_applied=0") {
			t.Errorf("process %d applied frames from a stale epoch: %s", l.Proc, l.Text)
		}
	}
	if want != nil {
		recovered(t, j)
	}
	if ref != "" && fin.Text != ref {
		t.Errorf("final line %q differs from the failure-free %q", fin.Text, ref)
	}
	if t.Failed() {
		t.Logf("output:\n%s", output(j))
	}
	return fin.Text
}

// output is the job's output without the Raft library's chatter.
func output(j *mhjob.Job) string {
	var b strings.Builder
	for _, l := range j.Lines() {
		if !strings.Contains(l.Text, "component=raft") {
			fmt.Fprintf(&b, "%s %s\n", l.Time.Format("15:04:05.000"), l)
		}
	}
	return b.String()
}

// dumpStacks asks each of procs, processes that should have ended by
// themselves, for its goroutines (SIGQUIT: the Go runtime writes them to
// its output and exits), and waits a few seconds for them, so that the
// output says where each was stuck.
func dumpStacks(procs []*proctest.Proc) {
	for _, p := range procs {
		p.Cmd.Process.Signal(syscall.SIGQUIT)
	}
	bound := time.After(5 * time.Second)
	for _, p := range procs {
		select {
		case <-p.Done():
		case <-bound:
			return
		}
	}
}
