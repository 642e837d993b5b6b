package clustertier

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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

func kubePodLost(t *testing.T, m *manifest, ref string, lostHost int) {

	ctx, cancel := context.WithTimeout(context.Background(), jobDeadline+time.Minute)
	defer cancel()
	c, err := simhost.New(ctx, simhost.Config{Hosts: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })

	// Cluster DNS: pod 0's name under the headless Service resolves to its
	// node on every host (pod IP = node address here).
	const namespace = "default"
	rvName := fmt.Sprintf("%s-0.%s.%s.svc.cluster.local", m.job, m.service, namespace)
	for _, h := range c.Hosts() {
		f, err := os.OpenFile(filepath.Join("/etc/netns", h.Namespace(), "hosts"), os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(f, "%s\t%s\n", c.Host(0).Addr(), rvName)
		f.Close()
	}

	token := auth.FormatToken(auth.NewToken())
	n := m.jobSpec.Completions
	argv := func() []string {
		var a []string
		for _, s := range m.c.Command {
			a = append(a, imagePath(s))
		}
		// The test's workload instead of the manifest's args, and the loss.
		return append(append(a, workload...), "--inject", fmt.Sprintf("kill:host=%s,iter=%d", c.Host(lostHost).Name(), killIter))
	}
	run := func(index int, h *simhost.Host, failures int) *proc {
		p := &pod{index: index, namespace: namespace, node: h.Name(), ip: h.Addr().String(), failures: failures, token: token}
		env := m.environ(t, p)
		if failures == 0 && index == 0 {
			t.Logf("pod 0 on %s: %s", h.Name(), strings.Join(redactEnv(env, token), " "))
		}
		a := argv()
		cmd := h.Command(ctx, a[0], a[1:]...)
		cmd.Env = env
		return start(t, fmt.Sprintf("%s-%d on %s", m.job, index, h.Name()), cmd)
	}
	hostOf := func(i int) *simhost.Host { return c.Host(i * len(c.Hosts()) / n) }
	pods := make([]*proc, n)
	begin := time.Now()
	for i := range n {
		pods[i] = run(i, hostOf(i), 0)
	}
	t.Cleanup(func() {
		for _, p := range pods {
			if p.cmd.Process != nil {
				p.cmd.Process.Kill()
			}
		}
	})

	// The node's loss: every process on it is SIGKILLed after iteration
	// killIter. Its pods hold only ranks, so the program's own injection
	// (each rank of the host label kills itself) does it at a fixed point
	// of the job, whatever the load; a crash of the host's namespace then
	// takes anything else that runs there.
	lost := c.Host(lostHost)
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

	// The Job controller's part, for each lost pod.
	var replacements []*proc
	for i := range n {
		if hostOf(i) != lost {
			continue
		}
		code := pods[i].exitCode()
		if act := m.onFailure(code, false); act != "Count" {
			t.Fatalf("lost pod %d (exit %d): the manifest's podFailurePolicy says %s, want Count (the index's one retry)", i, code, act)
		}
		if *m.jobSpec.BackoffLimitPerIndex < 1 {
			t.Fatalf("backoffLimitPerIndex %d: a lost pod's index would fail", *m.jobSpec.BackoffLimitPerIndex)
		}
		replacements = append(replacements, run(i, c.Host(2), 1)) // on a node that is up
	}
	for _, r := range replacements {
		if !r.wait(20 * time.Second) {
			t.Fatalf("replacement pod %s still running after 20s\n%s", r.name, r.output())
		}
		if r.exitCode() != 0 || !strings.Contains(r.output(), "not needed") {
			t.Errorf("replacement pod %s: exit %d, want 0 with a 'not needed' line\n%s", r.name, r.exitCode(), r.output())
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
