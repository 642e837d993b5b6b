package clustertier

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/internal/auth"
	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
)

// The real cluster's workload: long enough (a few hundred iterations of a
// few tens of milliseconds on 2 cores) for pods to be lost, replaced and
// joined in the middle of it.
var kubeWorkload = []string{"--generate", "1000000", "--dim", "10", "--k", "100", "--max-iter", "400", "--tol", "0", "--ckpt-every", "5"}

// kubeDeadline bounds one Job on the real cluster.
const kubeDeadline = 5 * time.Minute

// realKube is a running cluster of deploy/kubernetes/local-cluster.sh.
type realKube struct {
	script, dir string
	env         []string
	repo        string
}

// startRealKube brings the one-machine cluster up in a state directory of
// its own and stops it when the test ends; it skips the test with the
// reason when the cluster cannot be started here.
func startRealKube(t *testing.T) *realKube {
	t.Helper()
	needBins(t)
	if os.Getenv("GASPIGO_K8S") != "1" {
		// A whole cluster beside the other tiers of the default command
		// loads a 2-core machine enough to make their timings flaky.
		t.Skip("the real Kubernetes tier runs only when asked: GASPIGO_K8S=1 go test ./test/clustertier -run TestRealKubernetes -v -timeout 20m")
	}
	if os.Geteuid() != 0 {
		t.Skip("a real Kubernetes node needs root (the kubelet and containerd manage cgroups, mounts and network namespaces)")
	}
	var missing []string
	for _, b := range []string{"containerd", "ctr", "runc", "etcd", "kubectl", "nft", "openssl"} {
		if _, err := exec.LookPath(b); err != nil {
			missing = append(missing, b)
		}
	}
	if len(missing) > 0 {
		t.Skipf("no %s: deploy/kubernetes/local-cluster.sh install (Debian's containerd, runc, etcd-server, containernetworking-plugins, kubernetes-client, nftables)", strings.Join(missing, ", "))
	}
	bin := os.Getenv("GASPIGO_K8S_BIN")
	if bin == "" {
		bin = "/var/cache/gaspigo-k8s/v1.34.0"
	}
	root, err := proctest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	k := &realKube{script: filepath.Join(root, "deploy", "kubernetes", "local-cluster.sh"), repo: root}
	if _, err := os.Stat(filepath.Join(bin, "kubelet")); err != nil {
		if os.Getenv("GASPIGO_K8S_BUILD") != "1" {
			t.Skipf("no Kubernetes binaries in %s: deploy/kubernetes/local-cluster.sh build (about 10 minutes), or GASPIGO_K8S_BUILD=1 to let the test build them", bin)
		}
	}
	dir, err := os.MkdirTemp("", "clustertier-k8s-")
	if err != nil {
		t.Fatal(err)
	}
	k.dir = dir
	k.env = append(os.Environ(), "GASPIGO_K8S_DIR="+dir, "GASPIGO_K8S_BIN="+bin, "KUBECONFIG="+filepath.Join(dir, "kubeconfig"))
	if _, err := os.Stat(filepath.Join(bin, "kubelet")); err != nil {
		if out, err := k.script1(30*time.Minute, "build"); err != nil {
			t.Fatalf("local-cluster.sh build: %v\n%s", err, out)
		}
	}
	t.Cleanup(func() { k.stop(t) })
	begin := time.Now()
	if out, err := k.script1(10*time.Minute, "start"); err != nil {
		t.Fatalf("local-cluster.sh start: %v\n%s\n%s", err, out, k.logs())
	}
	t.Logf("cluster up in %v (images built and imported)", time.Since(begin).Round(time.Millisecond))
	return k
}

// stop stops the cluster and checks that none of its daemons is left.
func (k *realKube) stop(t *testing.T) {
	pids := map[string]int{}
	ents, _ := os.ReadDir(filepath.Join(k.dir, "pid"))
	for _, e := range ents {
		b, _ := os.ReadFile(filepath.Join(k.dir, "pid", e.Name()))
		if p, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			pids[e.Name()] = p
		}
	}
	if out, err := k.script1(3*time.Minute, "stop"); err != nil {
		t.Errorf("local-cluster.sh stop: %v\n%s", err, out)
	}
	for name, p := range pids {
		if syscall.Kill(p, 0) == nil {
			t.Errorf("%s (pid %d) still runs after local-cluster.sh stop", name, p)
		}
	}
	// Nor anything else of the cluster's: containerd's shims name its
	// socket, the pods' processes carry the namespaces' names.
	ents, _ = os.ReadDir("/proc")
	for _, e := range ents {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		env, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if strings.Contains(string(cmdline), k.dir) || strings.Contains(string(env), "POD_NAMESPACE=gaspigo-") {
			t.Errorf("process %s (%s) still runs after local-cluster.sh stop", e.Name(), strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
	if t.Failed() {
		t.Logf("the cluster's logs are kept in %s/log", k.dir)
		return
	}
	os.RemoveAll(k.dir)
}

func (k *realKube) script1(d time.Duration, verb string) (string, error) {
	return runScript(k.script, k.env, d, verb)
}

// logs is the tail of every daemon's log.
func (k *realKube) logs() string { return logTails(k.dir) }

// kubectl runs kubectl against the cluster.
func (k *realKube) kubectl(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "kubectl", args...)
	cmd.Env = k.env
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (k *realKube) must(t *testing.T, args ...string) string {
	t.Helper()
	out, err := k.kubectl(args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// kubeRun is one Job in a namespace of its own.
type kubeRun struct {
	k  *realKube
	ns string
}

// apply creates a namespace that enforces Pod Security "restricted", the
// token's Secret, and deploy/kubernetes-local with args as the program's
// arguments.
func (k *realKube) apply(t *testing.T, name string, args []string) *kubeRun {
	t.Helper()
	ns := "gaspigo-" + name
	k.must(t, "create", "namespace", ns)
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := k.kubectl("-n", ns, "get", "pods,jobs", "-o", "wide")
			t.Logf("namespace %s:\n%s", ns, out)
		}
		k.kubectl("delete", "namespace", ns, "--wait=false")
	})
	k.must(t, "label", "namespace", ns, "pod-security.kubernetes.io/enforce=restricted", "pod-security.kubernetes.io/enforce-version=latest")
	k.must(t, "-n", ns, "create", "secret", "generic", "kmeans-ft-token", "--from-literal=token="+auth.FormatToken(auth.NewToken()))
	dir := t.TempDir()
	base, err := filepath.Rel(dir, filepath.Join(k.repo, "deploy", "kubernetes-local"))
	if err != nil {
		t.Fatal(err)
	}
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = strconv.Quote(a)
	}
	kust := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - %s
patches:
  - target: {kind: Job, name: kmeans-ft}
    patch: |-
      - op: replace
        path: /spec/template/spec/containers/0/args
        value: [%s]
`, base, strings.Join(quoted, ", "))
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(kust), 0o644); err != nil {
		t.Fatal(err)
	}
	out := k.must(t, "-n", ns, "apply", "-k", dir)
	// (Kubernetes 1.34 warns "spec.SessionAffinity is ignored for
	// headless services" for every headless Service: it checks the field
	// after defaulting has set it.)
	if strings.Contains(out, "PodSecurity") {
		t.Errorf("the Job's pods would violate Pod Security \"restricted\":\n%s", out)
	}
	return &kubeRun{k: k, ns: ns}
}

// running waits until the Job's ranks+spares pods all run.
func (r *kubeRun) running(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(kubeDeadline)
	for time.Now().Before(deadline) {
		out, err := r.k.kubectl("-n", r.ns, "get", "pods", "-o", "jsonpath={.items[*].status.phase}")
		if err == nil && strings.Count(out, "Running") == ranks+spares {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("the Job's %d pods did not all run within %v", ranks+spares, kubeDeadline)
}

var recoveredRE = regexp.MustCompile(`(?m)^recovery: epoch \d+ in force`)

// recovered waits until rank 0 has printed an iteration after its
// recovery number n (counted from 1).
func (r *kubeRun) recovered(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(kubeDeadline)
	for time.Now().Before(deadline) {
		out, err := r.k.kubectl("-n", r.ns, "logs", r.pod(t, 0))
		if idx := recoveredRE.FindAllStringIndex(out, -1); err == nil && len(idx) >= n && lastIter(out[idx[n-1][1]:]) >= 0 {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("rank 0 did not go on after recovery %d within %v", n, kubeDeadline)
}

// pod is the running (or last) pod of completion index i.
func (r *kubeRun) pod(t *testing.T, i int) string {
	t.Helper()
	out := r.k.must(t, "-n", r.ns, "get", "pods", "-l", fmt.Sprintf("batch.kubernetes.io/job-completion-index=%d", i),
		"--sort-by=.metadata.creationTimestamp", "-o", "jsonpath={.items[*].metadata.name}")
	names := strings.Fields(out)
	if len(names) == 0 {
		return ""
	}
	return names[len(names)-1]
}

// waitIter waits until pod 0 (rank 0, which prints each iteration) has
// printed iteration it, and returns when it has.
func (r *kubeRun) waitIter(t *testing.T, it int) {
	t.Helper()
	deadline := time.Now().Add(kubeDeadline)
	for time.Now().Before(deadline) {
		if p := r.pod(t, 0); p != "" {
			if out, err := r.k.kubectl("-n", r.ns, "logs", p); err == nil && lastIter(out) >= it {
				return
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("rank 0 did not reach iteration %d within %v", it, kubeDeadline)
}

// complete waits for the Job to complete and returns rank 0's output.
func (r *kubeRun) complete(t *testing.T) string {
	t.Helper()
	if out, err := r.k.kubectl("-n", r.ns, "wait", "--for=condition=complete", "job/kmeans-ft", "--timeout="+kubeDeadline.String()); err != nil {
		st, _ := r.k.kubectl("-n", r.ns, "get", "job/kmeans-ft", "-o", "jsonpath={.status}")
		t.Fatalf("the Job did not complete: %v\n%s\nstatus: %s", err, out, st)
	}
	return r.k.must(t, "-n", r.ns, "logs", r.pod(t, 0))
}

// checkSum holds rank 0's final line to the failure-free checksum.
func checkSum(t *testing.T, out, want string) {
	t.Helper()
	if sums := finals(out); len(sums) != 1 || sums[0] != want {
		t.Fatalf("rank 0's final lines %v, want one with the failure-free checksum %s\n%s", sums, want, out)
	}
}

// procOf finds the host pid of the program (kmeans) of the pod of index i
// in namespace ns: the process whose environment says so.
func procOf(t *testing.T, ns string, i int) int {
	t.Helper()
	ents, _ := os.ReadDir("/proc")
	want := [][]byte{[]byte("POD_NAMESPACE=" + ns + "\x00"), []byte(fmt.Sprintf("JOB_COMPLETION_INDEX=%d\x00", i))}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if filepath.Base(exe) != "kmeans" {
			continue
		}
		env, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if strings.Contains(string(env), string(want[0])) && strings.Contains(string(env), string(want[1])) {
			return pid
		}
	}
	return 0
}

var uidRE = regexp.MustCompile(`(?m)^Uid:\s+(\d+)\s+(\d+)`)

// TestRealKubernetes runs deploy/kubernetes on a real single-node cluster
// (deploy/kubernetes/local-cluster.sh: API server, scheduler, Job
// controller, kubelet, containerd, kube-proxy) in namespaces that enforce
// Pod Security "restricted": failure-free; with a rank's pod deleted
// mid-run; with a container's process SIGKILLed from the host; and with
// three ranks' pods deleted one after the other, one more than the
// spares, so that the last is covered only by a pod the Job controller
// recreated and that joined as a spare. Each ends Complete with the
// failure-free checksum. It also reads a pod's metrics over the pod
// network and checks that no process of the pods runs as root.
func TestRealKubernetes(t *testing.T) {
	k := startRealKube(t)
	want := referenceSumOf(t, kubeWorkload)

	t.Run("failure-free", func(t *testing.T) {
		start := time.Now()
		r := k.apply(t, "clean", kubeWorkload)
		r.running(t)
		scheduled := time.Since(start)
		r.waitIter(t, 1)
		t.Logf("kubectl apply to every pod running: %v; to rank 0's first iteration: %v",
			scheduled.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
		r.checkPods(t)
		checkSum(t, r.complete(t), want)
	})
	t.Run("pod-deleted", func(t *testing.T) {
		r := k.apply(t, "deleted", kubeWorkload)
		r.waitIter(t, 40)
		victim := r.pod(t, 2)
		start := time.Now()
		k.must(t, "-n", r.ns, "delete", "pod", victim, "--wait=false")
		r.recovered(t, 1)
		t.Logf("pod deletion to rank 0's next iteration: %v", time.Since(start).Round(time.Millisecond))
		checkSum(t, r.complete(t), want)
	})
	t.Run("container-killed", func(t *testing.T) {
		r := k.apply(t, "killed", kubeWorkload)
		r.waitIter(t, 40)
		pid := procOf(t, r.ns, 3)
		if pid == 0 {
			t.Fatal("no process of pod 3's kmeans on this host")
		}
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		checkSum(t, r.complete(t), want)
	})
	t.Run("three-deleted", func(t *testing.T) {
		r := k.apply(t, "refill", kubeWorkload)
		for n, i := range []int{1, 2, 3} {
			r.waitIter(t, 40+80*n)
			victim := r.pod(t, i)
			k.must(t, "-n", r.ns, "delete", "pod", victim, "--wait=false")
		}
		checkSum(t, r.complete(t), want)
	})
}

// checkPods reads pod 1's metrics over the pod network and checks that
// no process of the namespace's pods runs as root.
func (r *kubeRun) checkPods(t *testing.T) {
	t.Helper()
	ip := strings.TrimSpace(r.k.must(t, "-n", r.ns, "get", "pod", r.pod(t, 1), "-o", "jsonpath={.status.podIP}"))
	resp, err := http.Get("http://" + ip + ":9100/metrics")
	if err != nil {
		t.Fatalf("pod 1's metrics: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "# TYPE gaspigo_") {
		t.Errorf("pod 1's metrics: %s, no Prometheus text of ours:\n%.400s", resp.Status, body)
	}
	for i := range ranks + spares {
		pid := procOf(t, r.ns, i)
		if pid == 0 {
			t.Errorf("no kmeans process of pod %d on this host", i)
			continue
		}
		st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if m := uidRE.FindStringSubmatch(string(st)); m == nil || m[1] == "0" || m[2] == "0" {
			t.Errorf("pod %d's kmeans (pid %d) runs as uid %v", i, pid, m)
		}
	}
}
