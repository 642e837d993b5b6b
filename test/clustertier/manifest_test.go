package clustertier

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
)

// The parts of the Kubernetes objects the tests read.
type object struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec json.RawMessage `json:"spec"`
}

type serviceSpec struct {
	ClusterIP                string            `json:"clusterIP"`
	PublishNotReadyAddresses bool              `json:"publishNotReadyAddresses"`
	Selector                 map[string]string `json:"selector"`
	Ports                    []struct {
		Port int `json:"port"`
	} `json:"ports"`
}

type jobSpec struct {
	CompletionMode       string  `json:"completionMode"`
	Completions          int     `json:"completions"`
	Parallelism          int     `json:"parallelism"`
	BackoffLimitPerIndex *int    `json:"backoffLimitPerIndex"`
	MaxFailedIndexes     *int    `json:"maxFailedIndexes"`
	PodFailurePolicy     *policy `json:"podFailurePolicy"`
	Template             struct {
		Spec struct {
			RestartPolicy string      `json:"restartPolicy"`
			Subdomain     string      `json:"subdomain"`
			Containers    []container `json:"containers"`
		} `json:"spec"`
	} `json:"template"`
}

type policy struct {
	Rules []struct {
		Action      string `json:"action"`
		OnExitCodes *struct {
			ContainerName string `json:"containerName"`
			Operator      string `json:"operator"`
			Values        []int  `json:"values"`
		} `json:"onExitCodes"`
		OnPodConditions []struct {
			Type string `json:"type"`
		} `json:"onPodConditions"`
	} `json:"rules"`
}

type container struct {
	Name    string   `json:"name"`
	Command []string `json:"command"`
	Args    []string `json:"args"`
	Env     []envVar `json:"env"`
}

type envVar struct {
	Name      string `json:"name"`
	Value     string `json:"value"`
	ValueFrom *struct {
		FieldRef *struct {
			FieldPath string `json:"fieldPath"`
		} `json:"fieldRef"`
		SecretKeyRef *struct {
			Name string `json:"name"`
			Key  string `json:"key"`
		} `json:"secretKeyRef"`
	} `json:"valueFrom"`
}

// manifest is deploy/kubernetes rendered (its kustomization.yaml), read.
type manifest struct {
	service     string
	serviceSpec serviceSpec
	job         string
	jobSpec     jobSpec
	c           container
	objs        [][]byte // every object, JSON
}

// kubeDir is deploy/kubernetes.
func kubeDir(t *testing.T) string {
	t.Helper()
	root, err := proctest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "deploy", "kubernetes")
}

// readManifest renders deploy/kubernetes/kustomization.yaml (render) and
// reads the result: it must be one Service and one Job with one container.
func readManifest(t *testing.T) *manifest {
	t.Helper()
	dir := kubeDir(t)
	kust, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := render(dir, kust)
	if err != nil {
		t.Fatalf("%s: %v", dir, err)
	}
	return decodeManifest(t, objs)
}

// decodeManifest reads rendered objects into a manifest.
func decodeManifest(t *testing.T, objs [][]byte) *manifest {
	t.Helper()
	m := &manifest{objs: objs}
	for _, j := range objs {
		var o object
		err := json.Unmarshal(j, &o)
		switch {
		case err != nil:
		case o.Kind == "Service":
			m.service = o.Metadata.Name
			err = json.Unmarshal(o.Spec, &m.serviceSpec)
		case o.Kind == "Job":
			m.job = o.Metadata.Name
			err = json.Unmarshal(o.Spec, &m.jobSpec)
		default:
			t.Errorf("unexpected object kind %q", o.Kind)
		}
		if err != nil {
			t.Fatalf("%s: %v", o.Kind, err)
		}
	}
	if m.service == "" || m.job == "" || len(m.jobSpec.Template.Spec.Containers) != 1 {
		t.Fatalf("want a Service and a Job with one container")
	}
	m.c = m.jobSpec.Template.Spec.Containers[0]
	return m
}

// literal returns the plain value of env variable name, "" if it has none.
func (m *manifest) literal(name string) string {
	for _, e := range m.c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// pod is what the Kubernetes API would fill in for one pod.
type pod struct {
	index      int
	namespace  string
	node       string // spec.nodeName
	ip         string // status.podIP
	failures   int    // batch.kubernetes.io/job-index-failure-count
	token      string // the Secret's value
	secretName string // set by environ: the Secret the token came from
}

// environ is the container's environment for p, built the way the kubelet
// does: JOB_COMPLETION_INDEX and HOSTNAME, then the manifest's env list in
// order, with downward-API fields, the Secret and $(VAR) references to
// earlier entries resolved. Unknown field paths fail the test.
func (m *manifest) environ(t *testing.T, p *pod) []string {
	t.Helper()
	vars := map[string]string{}
	env := []string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"HOSTNAME=" + m.job + "-" + strconv.Itoa(p.index),
		"JOB_COMPLETION_INDEX=" + strconv.Itoa(p.index),
	}
	ref := regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)
	for _, e := range m.c.Env {
		var v string
		switch {
		case e.ValueFrom == nil:
			v = ref.ReplaceAllStringFunc(e.Value, func(s string) string {
				if r, ok := vars[s[2:len(s)-1]]; ok {
					return r
				}
				return s
			})
		case e.ValueFrom.SecretKeyRef != nil:
			v = p.token
			p.secretName = e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
		case e.ValueFrom.FieldRef != nil:
			switch f := e.ValueFrom.FieldRef.FieldPath; f {
			case "metadata.namespace":
				v = p.namespace
			case "spec.nodeName":
				v = p.node
			case "status.podIP":
				v = p.ip
			case "metadata.labels['batch.kubernetes.io/job-name']":
				v = m.job
			case "metadata.annotations['batch.kubernetes.io/job-index-failure-count']":
				if p.failures > 0 {
					v = strconv.Itoa(p.failures)
				}
			case "metadata.annotations['batch.kubernetes.io/job-index-ignored-failure-count']":
			default:
				t.Fatalf("env %s: field %s is not simulated here", e.Name, f)
			}
		default:
			t.Fatalf("env %s: a valueFrom this test does not know", e.Name)
		}
		if e.Name == "PGAS_METRICS" {
			// A real pod has a network namespace of its own; here the
			// pods of a node share the node's, and a fixed port would
			// be taken twice.
			if h, _, err := net.SplitHostPort(v); err == nil {
				v = net.JoinHostPort(h, "0")
			}
		}
		vars[e.Name] = v
		env = append(env, e.Name+"="+v)
	}
	return env
}

// onFailure is the Job's podFailurePolicy applied to a failed pod of
// container exit code exit (disrupted: the pod has a DisruptionTarget
// condition): the action of the first rule that matches, "Count" if none.
func (m *manifest) onFailure(exit int, disrupted bool) string {
	if m.jobSpec.PodFailurePolicy == nil {
		return "Count"
	}
	for _, r := range m.jobSpec.PodFailurePolicy.Rules {
		for _, c := range r.OnPodConditions {
			if c.Type == "DisruptionTarget" && disrupted {
				return r.Action
			}
		}
		if x := r.OnExitCodes; x != nil && exit != 0 && (x.ContainerName == "" || x.ContainerName == m.c.Name) {
			in := slices.Contains(x.Values, exit)
			if (x.Operator == "In") == in {
				return r.Action
			}
		}
	}
	return "Count"
}

// TestManifestShape checks the manifest against the environment contract
// and the rules of Indexed Jobs it relies on.
func TestManifestShape(t *testing.T) {
	m := readManifest(t)
	js := m.jobSpec
	if js.CompletionMode != "Indexed" {
		t.Errorf("completionMode %q: want Indexed (the process id is JOB_COMPLETION_INDEX)", js.CompletionMode)
	}
	if js.Parallelism != js.Completions {
		t.Errorf("parallelism %d != completions %d: every process must run at once", js.Parallelism, js.Completions)
	}
	if n := m.literal("PGAS_NPROCS"); n != strconv.Itoa(js.Completions) {
		t.Errorf("PGAS_NPROCS=%q, want the Job's completions (%d)", n, js.Completions)
	}
	if k, err := strconv.Atoi(m.literal("PGAS_SPARES")); err != nil || k < 1 || k >= js.Completions {
		t.Errorf("PGAS_SPARES=%q: want 1..completions-1", m.literal("PGAS_SPARES"))
	}
	if rp := js.Template.Spec.RestartPolicy; rp != "Never" {
		t.Errorf("restartPolicy %q: want Never (a restarted container would come back with a taken process id; podFailurePolicy requires Never)", rp)
	}
	if js.BackoffLimitPerIndex == nil || *js.BackoffLimitPerIndex < 2 {
		t.Errorf("backoffLimitPerIndex: want 2 or more (a lost pod's retry joins the job as a spare, and may hold a rank and be lost in turn)")
	}
	if js.MaxFailedIndexes == nil || *js.MaxFailedIndexes != 0 {
		t.Errorf("maxFailedIndexes: want 0")
	}
	// The rendezvous is pod 0's DNS name under the headless Service.
	if m.serviceSpec.ClusterIP != "None" || !m.serviceSpec.PublishNotReadyAddresses {
		t.Errorf("Service %s: want clusterIP None and publishNotReadyAddresses", m.service)
	}
	if m.serviceSpec.Selector["batch.kubernetes.io/job-name"] != m.job {
		t.Errorf("Service selector %v does not select the Job %s's pods", m.serviceSpec.Selector, m.job)
	}
	if js.Template.Spec.Subdomain != m.service {
		t.Errorf("subdomain %q: want the Service's name %q", js.Template.Spec.Subdomain, m.service)
	}
	want := fmt.Sprintf("%s-0.%s.$(POD_NAMESPACE).svc.cluster.local:%d", m.job, m.service, m.serviceSpec.Ports[0].Port)
	if rv := m.literal("PGAS_RENDEZVOUS"); rv != want {
		t.Errorf("PGAS_RENDEZVOUS=%q, want %q", rv, want)
	}
	// The token only from the Secret.
	for _, e := range m.c.Env {
		if e.Name == "PGAS_TOKEN" && (e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil) {
			t.Errorf("PGAS_TOKEN must come from a Secret (valueFrom.secretKeyRef)")
		}
	}
	for _, a := range append(append([]string(nil), m.c.Command...), m.c.Args...) {
		if strings.Contains(a, "TOKEN") {
			t.Errorf("the container's command line mentions the token: %q", a)
		}
	}
	if len(m.c.Command) < 3 || m.c.Command[0] != "/gaspipod" {
		t.Errorf("command %q: want /gaspipod -- PROGRAM, so that a replacement pod ends at once", m.c.Command)
	}
	// The failure policy: a lost process takes the index's one retry; the
	// program's own verdicts fail the Job.
	for _, tc := range []struct {
		exit      int
		disrupted bool
		want      string
	}{
		{137, false, "Count"}, {77, false, "Count"}, {74, false, "Count"}, {143, false, "Count"}, {0, true, "Ignore"}, {143, true, "Ignore"},
		{1, false, "FailJob"}, {2, false, "FailJob"}, {69, false, "FailJob"}, {75, false, "FailJob"},
	} {
		if got := m.onFailure(tc.exit, tc.disrupted); got != tc.want {
			t.Errorf("a pod that failed with exit %d (disrupted %v): policy action %s, want %s", tc.exit, tc.disrupted, got, tc.want)
		}
	}
}
