package clustertier

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/internal/auth"
	"github.com/gaspigo/gaspigo/internal/testkit/simhost"
)

// imagePath maps the image's paths to the test's binaries.
func imagePath(p string) string {
	switch p {
	case "/gaspipod":
		return bins.gaspipod
	case "/kmeans":
		return bins.kmeans
	case "/gaspirun":
		return bins.gaspirun
	}
	return p
}

// TestKubernetesPodLost runs the manifest's Job on three simulated hosts
// (network namespaces, each with its own /etc/hosts), every pod with
// exactly the environment the manifest gives it, and loses a node in the
// middle of the run: every process of node2 (pods 2 and 3, ranks 2 and 3),
// or of node1 (pods 0 and 1: process 0 hosted the rendezvous and rank 0
// prints the answer), is SIGKILLed after iteration 12. The spares on node3 take both ranks
// and the job ends with the failure-free checksum. The test then does what the Job controller
// would: the manifest's podFailurePolicy applied to the lost pods' exit
// codes gives each index its one retry, and the replacement pods, started
// with the index's failure count as the controller annotates it, end at
// once with 0. Every index then has a succeeded pod: the Job completes.
func TestKubernetesPodLost(t *testing.T) {
	needBins(t)
	m := readManifest(t)
	simhost.Require(t)
	ref := referenceSum(t)
	for _, lost := range []int{1, 0} {
		t.Run(fmt.Sprintf("node%d", lost+1), func(t *testing.T) { kubePodLost(t, m, ref, lost) })
	}
}

// killIter is the iteration after which the lost node's processes die.
const killIter = 12

// kubeJob is the manifest's Job on three simulated hosts: cluster DNS for
// pod 0's name, the token of its Secret, and its pods as the test starts
// them (the scheduler's and the Job controller's part).
type kubeJob struct {
	t     *testing.T
	m     *manifest
	ctx   context.Context
	c     *simhost.Cluster
	token string
	n     int      // the Job's completions: the processes as started
	args  []string // the program's arguments, instead of the manifest's
}

// newKubeJob makes the cluster of a job of m running the program with
// args; the cluster goes at the end of the test.
func newKubeJob(t *testing.T, m *manifest, args []string) *kubeJob {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), jobDeadline+time.Minute)
	t.Cleanup(cancel)
	c, err := simhost.New(ctx, simhost.Config{Hosts: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	// Cluster DNS: pod 0's name under the headless Service resolves to its
	// node on every host (pod IP = node address here).
	rvName := fmt.Sprintf("%s-0.%s.%s.svc.cluster.local", m.job, m.service, kubeNamespace)
	for _, h := range c.Hosts() {
		f, err := os.OpenFile(filepath.Join("/etc/netns", h.Namespace(), "hosts"), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(f, "%s\t%s\n", c.Host(0).Addr(), rvName)
		f.Close()
	}
	return &kubeJob{t: t, m: m, ctx: ctx, c: c, token: auth.FormatToken(auth.NewToken()), n: m.jobSpec.Completions, args: args}
}

// kubeNamespace is the namespace of every simulated pod.
const kubeNamespace = "default"

// hostOf is the node of the job's pod index i: the pods spread evenly
// over the hosts in index order, as the manifest's topology spread asks.
func (k *kubeJob) hostOf(i int) *simhost.Host { return k.c.Host(i * len(k.c.Hosts()) / k.n) }

// run starts a pod of index on h, with the failure count the controller
// annotates (0 for the job's own pods), exactly the manifest's
// environment, and the image's command with k.args plus extra.
func (k *kubeJob) run(index int, h *simhost.Host, failures int, extra ...string) *proc {
	t := k.t
	t.Helper()
	p := &pod{index: index, namespace: kubeNamespace, node: h.Name(), ip: h.Addr().String(), failures: failures, token: k.token}
	env := k.m.environ(t, p)
	if failures == 0 && index == 0 {
		t.Logf("pod 0 on %s: %s", h.Name(), strings.Join(redactEnv(env, k.token), " "))
	}
	var a []string
	for _, s := range k.m.c.Command {
		a = append(a, imagePath(s))
	}
	a = append(append(a, k.args...), extra...)
	cmd := h.Command(k.ctx, a[0], a[1:]...)
	cmd.Env = env
	name := fmt.Sprintf("%s-%d on %s", k.m.job, index, h.Name())
	if failures > 0 {
		name = fmt.Sprintf("%s-%d (retry %d) on %s", k.m.job, index, failures, h.Name())
	}
	pr := start(t, name, cmd)
	t.Cleanup(func() {
		if pr.cmd.Process != nil {
			pr.cmd.Process.Kill()
		}
	})
	return pr
}

// retry is the Job controller's part for lost pod i (exit code), whose
// retry is the failures-th: the manifest's podFailurePolicy must count
// the loss, and the index must have a retry left; the retry pod starts on
// h.
func (k *kubeJob) retry(i, code, failures int, h *simhost.Host) *proc {
	k.t.Helper()
	if act := k.m.onFailure(code, false); act != "Count" {
		k.t.Fatalf("lost pod %d (exit %d): the manifest's podFailurePolicy says %s, want Count (a retry of the index)", i, code, act)
	}
	if limit := *k.m.jobSpec.BackoffLimitPerIndex; failures > limit {
		k.t.Fatalf("backoffLimitPerIndex %d: index %d lost %d times fails", limit, i, failures)
	}
	return k.run(i, h, failures)
}

func kubePodLost(t *testing.T, m *manifest, ref string, lostHost int) {
	k := newKubeJob(t, m, workload)
	c, n := k.c, k.n
	hostOf := k.hostOf
	token := k.token
	pods := make([]*proc, n)
	begin := time.Now()
	lost := c.Host(lostHost)
	for i := range n {
		// The node's loss comes from the program's own injection: each
		// rank of the host label kills itself after iteration killIter.
		pods[i] = k.run(i, hostOf(i), 0, "--inject", fmt.Sprintf("kill:host=%s,iter=%d", lost.Name(), killIter))
	}

	// The node's loss: every process on it is SIGKILLed after iteration
	// killIter. Its pods hold only ranks, so the program's own injection
	// (each rank of the host label kills itself) does it at a fixed point
	// of the job, whatever the load; a crash of the host's namespace then
	// takes anything else that runs there.
	for i := range n {
		if hostOf(i) != lost {
			continue
		}
		if !pods[i].wait(jobDeadline) {
			t.Fatalf("pod %d on %s did not die at the injected loss\n%s", i, lost.Name(), noRaft(pods[i].output()))
		}
	}
	killedAt := time.Now()
	checkNoTokenInArgv(t, token)
	if killed, err := c.Crash(lost); err != nil {
		t.Fatal(err)
	} else if len(killed) > 0 {
		t.Logf("the crash of %s killed pids %v besides the job's", lost.Name(), killed)
	}

	// The Job controller's part, for each lost pod: a retry on a node that
	// is up. With pod 0 alive it joins the running job as a spare and ends
	// with it; with pod 0 (and the rendezvous) lost it finds no job to join
	// and ends with 0, not needed.
	var replacements []*proc
	for i := range n {
		if hostOf(i) == lost {
			replacements = append(replacements, k.retry(i, pods[i].exitCode(), 1, c.Host(2)))
		}
	}

	// Every surviving pod ends by itself, with 0.
	var all strings.Builder
	for i, p := range pods {
		if hostOf(i) == lost {
			continue
		}
		if !p.wait(jobDeadline) {
			var b strings.Builder
			for _, q := range pods {
				fmt.Fprintf(&b, "--- %s\n%s", q.name, tail(noRaft(q.output()), 30))
			}
			t.Fatalf("pod %s still running %v after the start\n%s", p.name, time.Since(begin).Round(time.Millisecond), b.String())
		}
		all.WriteString(p.output())
		if p.exitCode() != 0 {
			t.Errorf("pod %s: exit %d, want 0\n%s", p.name, p.exitCode(), noRaft(p.output()))
		}
	}
	for _, r := range replacements {
		if !r.wait(jobDeadline) {
			t.Fatalf("retry pod %s still running %v after the job's pods ended\n%s", r.name, jobDeadline, noRaft(r.output()))
		}
		want := "admitted to the running job"
		if lostHost == 0 {
			want = "found no running job to join"
		}
		if r.exitCode() != 0 || !strings.Contains(r.output(), want) {
			t.Errorf("retry pod %s: exit %d, want 0 with %q\n%s", r.name, r.exitCode(), want, noRaft(r.output()))
		}
	}
	wall := time.Since(begin)
	sums := finals(all.String())
	if len(sums) != 1 || sums[0] != ref {
		t.Fatalf("final checksums %v, want exactly the failure-free %s\n%s", sums, ref, noRaft(all.String()))
	}
	if !strings.Contains(all.String(), "msg=recovered") || lastIter(all.String()) <= killIter {
		t.Fatalf("no recovery after the loss at iteration %d\n%s", killIter, noRaft(all.String()))
	}
	t.Logf("job of %d pods on %d hosts: %s lost after iteration %d, %v after the start; ended %v later with the failure-free checksum",
		n, len(c.Hosts()), lost.Name(), killIter, killedAt.Sub(begin).Round(time.Millisecond), time.Since(killedAt).Round(time.Millisecond))
	t.Logf("wall time %v", wall.Round(time.Millisecond))
}

// redactEnv hides the token in a logged environment.
func redactEnv(env []string, token string) []string {
	out := make([]string, len(env))
	for i, kv := range env {
		out[i] = strings.ReplaceAll(kv, token, "<token>")
	}
	return out
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n") + "\n"
}

// deleteWorkload is the tier's K-means run long enough for three pod
// deletions, each waited out (its recovery, its retry's join) before the
// next: 1,000 iterations whatever the convergence.
var deleteWorkload = []string{"--generate", "200000", "--dim", "10", "--k", "20", "--max-iter", "1000", "--tol", "0", "--ckpt-every", "5"}

var (
	admittedRE = regexp.MustCompile(`msg="admitted to the running job" proc=(\d+)`)
	promotedRE = regexp.MustCompile(`msg="spares: failure committed" .*\bpromoted=(\d+)`)
)

// TestKubernetesPodDeleted deletes the pods of ranks 1, 2 and 3 in turn
// (the kubelet's SIGTERM), each after the job recovered from the last
// deletion and the last retry joined, and plays the Job controller: each
// deleted pod's exit must take a retry under the manifest's
// podFailurePolicy, and the retry pod, which gaspipod runs with
// PGAS_JOIN=1, joins the running job as a spare. Two spares cannot cover
// three losses: the third rank is taken by a retry that joined, so the
// pool refilled. Every pod ends by itself with 0, the deleted ones with a
// code the policy counts, and the answer is the failure-free checksum.
func TestKubernetesPodDeleted(t *testing.T) {
	needBins(t)
	m := readManifest(t)
	simhost.Require(t)
	ref := referenceSumOf(t, deleteWorkload)
	k := newKubeJob(t, m, deleteWorkload)
	pods := make([]*proc, k.n)
	begin := time.Now()
	for i := range k.n {
		pods[i] = k.run(i, k.hostOf(i), 0)
	}
	var retries []*proc
	at := 0 // iteration after which the next deletion comes
	for _, victim := range []int{1, 2, 3} {
		at += 10
		waitIter(t, pods[0], at)
		pods[victim].cmd.Process.Signal(syscall.SIGTERM) // the kubelet, on kubectl delete pod
		if !pods[victim].wait(jobDeadline) {
			t.Fatalf("deleted pod %s still running %v after SIGTERM\n%s", pods[victim].name, jobDeadline, noRaft(pods[victim].output()))
		}
		code := pods[victim].exitCode()
		t.Logf("%v: deleted pod %s after iteration %d; it exited %d", time.Since(begin).Round(time.Millisecond), pods[victim].name, at, code)
		r := k.retry(victim, code, 1, k.hostOf(victim)) // the node is up: the scheduler may pick it again
		retries = append(retries, r)
		// Its join: admitted, then a spare in the membership.
		var id string
		waitOutput(t, r, "its admission", func(out string) bool {
			if m := admittedRE.FindStringSubmatch(out); m != nil {
				id = m[1]
				return true
			}
			return false
		})
		added := regexp.MustCompile(`msg="spares: (spare added|joiner took an awaiting rank)" .*\bproc=` + id + `\b`)
		waitOutput(t, r, "its membership", func(out string) bool { return added.MatchString(out) })
		t.Logf("%v: retry pod %s joined as process %s", time.Since(begin).Round(time.Millisecond), r.name, id)
		at = max(at, lastIter(pods[0].output()))
	}

	var all strings.Builder
	for i, p := range append(slices.Clone(pods), retries...) {
		if !p.wait(jobDeadline) {
			t.Fatalf("pod %s still running %v after the start\n%s", p.name, time.Since(begin).Round(time.Millisecond), tail(noRaft(p.output()), 40))
		}
		all.WriteString(p.output())
		deleted := i >= 1 && i <= 3
		switch code := p.exitCode(); {
		case deleted && k.m.onFailure(code, false) != "Count":
			t.Errorf("deleted pod %s: exit %d, which the podFailurePolicy does not count as a lost pod", p.name, code)
		case !deleted && code != 0:
			t.Errorf("pod %s: exit %d, want 0\n%s", p.name, code, tail(noRaft(p.output()), 40))
		}
	}
	sums := finals(all.String())
	if len(sums) != 1 || sums[0] != ref {
		t.Fatalf("final checksums %v, want exactly the failure-free %s\n%s", sums, ref, tail(noRaft(pods[0].output()), 60))
	}
	// The third loss was covered by a pod that joined: some failure
	// promoted a process with an id from the Job's completions up.
	byJoiner := false
	for _, mm := range promotedRE.FindAllStringSubmatch(pods[0].output(), -1) {
		if p, _ := strconv.Atoi(mm[1]); p >= k.n {
			byJoiner = true
		}
	}
	if !byJoiner {
		t.Errorf("no rank was taken by a retry pod that joined: two spares covered three losses?\n%s", noRaft(pods[0].output()))
	}
	t.Logf("three rank pods deleted and retried; ended %v after the start with the failure-free checksum", time.Since(begin).Round(time.Millisecond))
}

// waitIter waits up to jobDeadline for rank 0's pod to print iteration
// it or a later one.
func waitIter(t *testing.T, p *proc, it int) {
	t.Helper()
	waitOutput(t, p, fmt.Sprintf("iteration %d", it), func(out string) bool { return lastIter(out) >= it })
}

// waitOutput waits up to jobDeadline for p's output to satisfy ok.
func waitOutput(t *testing.T, p *proc, what string, ok func(string) bool) {
	t.Helper()
	for deadline := time.Now().Add(jobDeadline); !ok(p.output()); time.Sleep(20 * time.Millisecond) { // real processes: poll with a deadline
		if p.job.Ended() {
			t.Fatalf("%s ended (exit %d) before %s\n%s", p.name, p.exitCode(), what, tail(noRaft(p.output()), 40))
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s from %s within %v\n%s", what, p.name, jobDeadline, tail(noRaft(p.output()), 40))
		}
	}
}
