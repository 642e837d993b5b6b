package clustertier

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	sigsjson "sigs.k8s.io/json"
)

// typed is the rendered manifest decoded into the Kubernetes API's own
// types.
type typed struct {
	job *batchv1.Job
	svc *corev1.Service
}

// strictDecode decodes an object's JSON into v the way the API server
// does: case-sensitive, and an unknown or duplicate field is an error.
func strictDecode(j []byte, v any) error {
	strict, err := sigsjson.UnmarshalStrict(j, v, sigsjson.DisallowDuplicateFields, sigsjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	if len(strict) > 0 {
		return fmt.Errorf("%v", strict)
	}
	return nil
}

// decodeTyped checks every object against the Kubernetes schema by
// decoding it strictly into k8s.io/api's type for its kind: a misspelt or
// misplaced field, or a value of the wrong type, fails.
func decodeTyped(t *testing.T, objs [][]byte) typed {
	t.Helper()
	var out typed
	for _, j := range objs {
		var head struct{ APIVersion, Kind string }
		if err := json.Unmarshal(j, &head); err != nil {
			t.Fatal(err)
		}
		switch head.APIVersion + " " + head.Kind {
		case "batch/v1 Job":
			out.job = new(batchv1.Job)
			if err := strictDecode(j, out.job); err != nil {
				t.Errorf("Job: %v", err)
			}
		case "v1 Service":
			out.svc = new(corev1.Service)
			if err := strictDecode(j, out.svc); err != nil {
				t.Errorf("Service: %v", err)
			}
		default:
			t.Errorf("%s %s: an object the manifest should not have", head.APIVersion, head.Kind)
		}
	}
	if out.job == nil || out.svc == nil {
		t.Fatalf("want a batch/v1 Job and a v1 Service")
	}
	return out
}

// TestManifestSchema: the rendered manifest, and kmeans-job.yaml alone
// (kubectl apply -f), decode strictly into the API's types; the strict
// decoding does catch a misspelt field; and the file alone is the
// rendering at the kustomization's default size.
func TestManifestSchema(t *testing.T) {
	m := readManifest(t)
	decodeTyped(t, m.objs)
	data, err := os.ReadFile(filepath.Join(kubeDir(t), "kmeans-job.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	alone, err := yamlJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	decodeTyped(t, alone)
	if !sameObjects(t, alone, m.objs) {
		t.Errorf("kmeans-job.yaml alone differs from the kustomization's rendering: keep the file's sizes at the kustomization's")
	}
	for _, j := range m.objs {
		if !bytes.Contains(j, []byte(`"kind":"Job"`)) {
			continue
		}
		for _, mistake := range [][2]string{{`"securityContext"`, `"securityContxt"`}, {`"completions"`, `"Completions"`}, {`"parallelism":6`, `"parallelism":"6"`}} {
			bad := bytes.Replace(j, []byte(mistake[0]), []byte(mistake[1]), 1)
			if bytes.Equal(bad, j) || strictDecode(bad, new(batchv1.Job)) == nil {
				t.Errorf("%s for %s in the Job is not caught", mistake[1], mistake[0])
			}
		}
	}
}

// sameObjects compares objects as JSON values.
func sameObjects(t *testing.T, a, b [][]byte) bool {
	t.Helper()
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		var x, y any
		if json.Unmarshal(a[i], &x) != nil || json.Unmarshal(b[i], &y) != nil || !reflect.DeepEqual(x, y) {
			return false
		}
	}
	return true
}

// TestManifestPodSecurityRestricted checks the pod template against the
// Pod Security Standard "restricted" (kubernetes.io/docs/concepts/security/
// pod-security-standards), the Job's clean-up and its metrics port.
func TestManifestPodSecurityRestricted(t *testing.T) {
	tm := decodeTyped(t, readManifest(t).objs)
	ps := tm.job.Spec.Template.Spec
	psc := ps.SecurityContext
	if psc == nil {
		t.Fatal("the pod has no securityContext")
	}
	if ps.HostNetwork || ps.HostPID || ps.HostIPC {
		t.Errorf("host namespaces: network %v, pid %v, ipc %v", ps.HostNetwork, ps.HostPID, ps.HostIPC)
	}
	for _, v := range ps.Volumes {
		if v.HostPath != nil {
			t.Errorf("volume %s: hostPath", v.Name)
		}
	}
	if len(psc.Sysctls) > 0 {
		t.Errorf("sysctls %v", psc.Sysctls)
	}
	if psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
		t.Errorf("pod: want runAsNonRoot: true")
	}
	if psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Errorf("pod: want runAsUser, not 0")
	}
	podSeccomp := psc.SeccompProfile != nil && psc.SeccompProfile.Type == corev1.SeccompProfileTypeRuntimeDefault
	if !podSeccomp {
		t.Errorf("pod: want seccompProfile type RuntimeDefault")
	}
	all := append(slices.Clone(ps.InitContainers), ps.Containers...)
	for _, c := range all {
		sc := c.SecurityContext
		if sc == nil {
			t.Errorf("container %s: no securityContext", c.Name)
			continue
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("container %s: want allowPrivilegeEscalation: false", c.Name)
		}
		if sc.Privileged != nil && *sc.Privileged {
			t.Errorf("container %s: privileged", c.Name)
		}
		if sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
			t.Errorf("container %s: want capabilities.drop [ALL]", c.Name)
		} else if a := sc.Capabilities.Add; len(a) > 0 && !slices.Equal(a, []corev1.Capability{"NET_BIND_SERVICE"}) {
			t.Errorf("container %s: capabilities.add %v (restricted allows NET_BIND_SERVICE only)", c.Name, a)
		}
		if sc.RunAsNonRoot != nil && !*sc.RunAsNonRoot || sc.RunAsUser != nil && *sc.RunAsUser == 0 {
			t.Errorf("container %s: runs as root", c.Name)
		}
		if sc.SeccompProfile != nil && sc.SeccompProfile.Type == corev1.SeccompProfileTypeUnconfined ||
			!podSeccomp && (sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault) {
			t.Errorf("container %s: want seccompProfile RuntimeDefault", c.Name)
		}
		for _, p := range c.Ports {
			if p.HostPort != 0 {
				t.Errorf("container %s: hostPort %d", c.Name, p.HostPort)
			}
		}
	}
	if ttl := tm.job.Spec.TTLSecondsAfterFinished; ttl == nil || *ttl <= 0 {
		t.Errorf("want ttlSecondsAfterFinished, so that finished Jobs go away")
	}
	// The metrics: PGAS_METRICS on a named container port, which the
	// Service names too.
	c := ps.Containers[0]
	var port int32
	for _, p := range c.Ports {
		if p.Name == "metrics" {
			port = p.ContainerPort
		}
	}
	var addr string
	for _, e := range c.Env {
		if e.Name == "PGAS_METRICS" {
			addr = e.Value
		}
	}
	if port == 0 || addr != ":"+strconv.Itoa(int(port)) {
		t.Errorf("PGAS_METRICS %q, container port metrics %d: want PGAS_METRICS=:PORT of the port named metrics", addr, port)
	}
	found := false
	for _, p := range tm.svc.Spec.Ports {
		found = found || p.Name == "metrics" && p.TargetPort.StrVal == "metrics"
	}
	if !found {
		t.Errorf("the Service has no port metrics -> targetPort metrics")
	}
}

// TestKustomizeSizeInOnePlace: the size set in kustomization.yaml (6
// processes, 2 spares there) reaches completions, parallelism,
// PGAS_NPROCS and PGAS_SPARES, and nothing else holds it.
func TestKustomizeSizeInOnePlace(t *testing.T) {
	dir := kubeDir(t)
	kust, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, size := range [][2]int{{6, 2}, {9, 3}, {3, 1}} {
		k := bytes.Replace(kust, []byte("processes=6"), fmt.Appendf(nil, "processes=%d", size[0]), 1)
		k = bytes.Replace(k, []byte("spares=2"), fmt.Appendf(nil, "spares=%d", size[1]), 1)
		if size[0] != 6 && bytes.Equal(k, kust) {
			t.Fatal("kustomization.yaml has no processes=6 and spares=2 literals")
		}
		objs, err := render(dir, k)
		if err != nil {
			t.Fatal(err)
		}
		tm := decodeTyped(t, objs)
		m := decodeManifest(t, objs)
		js := tm.job.Spec
		want := int32(size[0])
		if js.Completions == nil || *js.Completions != want || js.Parallelism == nil || *js.Parallelism != want {
			t.Errorf("size %v: completions %v, parallelism %v", size, js.Completions, js.Parallelism)
		}
		if n, k := m.literal("PGAS_NPROCS"), m.literal("PGAS_SPARES"); n != strconv.Itoa(size[0]) || k != strconv.Itoa(size[1]) {
			t.Errorf("size %v: PGAS_NPROCS=%q PGAS_SPARES=%q", size, n, k)
		}
		if out, ok := kubectlKustomize(t, dir, k); ok && !sameObjects(t, out, objs) {
			t.Errorf("size %v: kubectl kustomize renders otherwise than the model:\n%s", size, bytes.Join(out, []byte("\n")))
		}
	}
}

// kubectlKustomize renders kust (over a copy of dir) with kubectl
// kustomize, kustomize itself; false without kubectl.
func kubectlKustomize(t *testing.T, dir string, kust []byte) ([][]byte, bool) {
	t.Helper()
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		t.Logf("no kubectl: the kustomization is checked through the model only (%v)", err)
		return nil, false
	}
	tmp := t.TempDir()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if e.Name() == "kustomization.yaml" {
			data = kust
		}
		if err := os.WriteFile(filepath.Join(tmp, e.Name()), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	out, err := exec.Command(kubectl, "kustomize", tmp).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize: %v", err)
	}
	objs, err := yamlJSON(out)
	if err != nil {
		t.Fatal(err)
	}
	return objs, true
}

// No document shows the token on a command line (kubectl create secret
// --from-literal=token=$(...) puts it in the process list).
func TestTokenNotOnCommandLines(t *testing.T) {
	root := filepath.Dir(filepath.Dir(kubeDir(t)))
	files := []string{filepath.Join(root, "README.md")}
	for _, g := range []string{"docs/*.md", "deploy/*", "deploy/*/*"} {
		m, _ := filepath.Glob(filepath.Join(root, g))
		files = append(files, m...)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue // a directory
		}
		if strings.Contains(string(data), "--from-literal=token") {
			t.Errorf("%s: --from-literal=token puts the token on a command line: pipe it (--from-file=token=/dev/stdin)", f)
		}
	}
}
