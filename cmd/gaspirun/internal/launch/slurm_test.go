package launch

import (
	"reflect"
	"strings"
	"testing"
)

func TestExpandHostlist(t *testing.T) {
	cases := []struct {
		in   string
		want []string
	}{
		{"node1", []string{"node1"}},
		{"node[1-3]", []string{"node1", "node2", "node3"}},
		{"n[08-10],gpu1", []string{"n08", "n09", "n10", "gpu1"}},
		{"a[1,3-4]b", []string{"a1b", "a3b", "a4b"}},
		{"r[1-2]-n[1-2]", []string{"r1-n1", "r1-n2", "r2-n1", "r2-n2"}},
		{"x,,y", []string{"x", "y"}},
	}
	for _, c := range cases {
		got, err := ExpandHostlist(c.in)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%q: got %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"node[1-3", "node1]", "node[3-1]", "node[a-b]", "", "n[1-99999999]"} {
		if got, err := ExpandHostlist(bad); err == nil {
			t.Errorf("%q: accepted as %q", bad, got)
		}
	}
}

func TestParseTasksPerNode(t *testing.T) {
	got, err := ParseTasksPerNode("2(x3),1")
	if err != nil || !reflect.DeepEqual(got, []int{2, 2, 2, 1}) {
		t.Errorf("got %v, %v", got, err)
	}
	for _, bad := range []string{"", "x", "2(3)", "2(x0)", "-1", "2(x3"} {
		if got, err := ParseTasksPerNode(bad); err == nil {
			t.Errorf("%q: accepted as %v", bad, got)
		}
	}
}

func TestSlurmHosts(t *testing.T) {
	env := map[string]string{"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "c[1-2],d1", "SLURM_TASKS_PER_NODE": "2(x2),1"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	got, err := SlurmHosts(lookup)
	if want := []HostSlots{{"c1", 2}, {"c2", 2}, {"d1", 1}}; err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, %v; want %v", got, err, want)
	}
	for k, want := range map[string]string{
		"SLURM_JOB_ID":         "not inside a Slurm allocation",
		"SLURM_JOB_NODELIST":   "SLURM_JOB_NODELIST: is unset",
		"SLURM_TASKS_PER_NODE": "SLURM_TASKS_PER_NODE: is unset",
	} {
		v := env[k]
		delete(env, k)
		if _, err := SlurmHosts(lookup); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("without %s: %v", k, err)
		}
		env[k] = v
	}
	env["SLURM_TASKS_PER_NODE"] = "2(x2)"
	if _, err := SlurmHosts(lookup); err == nil || !strings.Contains(err.Error(), "gives 2 nodes but SLURM_JOB_NODELIST=c[1-2],d1 names 3") {
		t.Errorf("mismatch: %v", err)
	}
}
