package launch

import (
	"slices"
	"syscall"
	"testing"
)

func TestSplitTaskLabel(t *testing.T) {
	cases := []struct {
		in   string
		task int
		rest string
		ok   bool
	}{
		{"0: hello\n", 0, "hello\n", true},
		{"  7: x: y\n", 7, "x: y\n", true},
		{"4095: \n", 4095, "\n", true},
		{"srun: error: node1: task 3: Killed\n", 0, "", false},
		{": no task\n", 0, "", false},
		{"12:no space\n", 0, "", false},
		{"12", 0, "", false},
	}
	for _, c := range cases {
		task, rest, ok := splitTaskLabel([]byte(c.in))
		if ok != c.ok || (ok && (task != c.task || string(rest) != c.rest)) {
			t.Errorf("splitTaskLabel(%q) = %d, %q, %v; want %d, %q, %v", c.in, task, rest, ok, c.task, c.rest, c.ok)
		}
	}
}

func TestEndedTasks(t *testing.T) {
	cases := []struct {
		in   string
		want []int
	}{
		{"srun: error: node2: task 1: Killed", []int{1}},
		{"srun: error: node1: tasks 0-3,7: Exited with exit code 3", []int{0, 1, 2, 3, 7}},
		{"srun: error: n[1-2]: task 12: Out Of Memory", []int{12}},
		{"srun: Job step aborted: Waiting up to 32 seconds for job step to finish.", nil},
		{"srun: error: node1: task x: Killed", nil},
	}
	for _, c := range cases {
		got, ok := endedTasks(c.in)
		if ok != (c.want != nil) || !slices.Equal(got, c.want) {
			t.Errorf("endedTasks(%q) = %v, %v; want %v", c.in, got, ok, c.want)
		}
	}
}

// Rule (remoteproto.go): "signal N" is for the process at the other end;
// in a step, "signal N LIST" only for the processes of LIST.
func TestParseSignal(t *testing.T) {
	cases := []struct {
		line string
		proc int
		sig  syscall.Signal
		ok   bool
	}{
		{"signal 15", 3, syscall.SIGTERM, true},
		{"signal 9 0-3,7", 7, syscall.SIGKILL, true},
		{"signal 9 0-3,7", 5, 0, false},
		{"signal 15 2", 2, syscall.SIGTERM, true},
		{"signal 0", 1, 0, false},
		{"signal 99", 1, 0, false},
		{"signal 15 3-1", 2, 0, false},
		{"signal 15 1 2", 1, 0, false},
	}
	for _, c := range cases {
		sig, ok := parseSignal(c.line, c.proc)
		if ok != c.ok || sig != c.sig {
			t.Errorf("parseSignal(%q, %d) = %v, %v; want %v, %v", c.line, c.proc, sig, ok, c.sig, c.ok)
		}
	}
	// formatRanges and parseRanges round-trip.
	ps := []int{0, 1, 2, 3, 7, 9, 10, 11, 12, 4095}
	got, err := parseRanges(formatRanges(ps))
	if err != nil || !slices.Equal(got, ps) {
		t.Errorf("round trip of %v: %v, %v", ps, got, err)
	}
}

// Rule (stepBackend): every task gets the same header; SLURM_PROCID picks
// its process, host and rank count.
func TestResolveStep(t *testing.T) {
	h := &remoteHeader{Proc: -1, Env: []string{"PGAS_NPROCS=3"}, Step: &stepInfo{Hosts: []string{"n1", "n1", "n2"}, RanksOnHost: []int{2, 2, 0}}}
	if err := h.resolveStep("2"); err != nil {
		t.Fatal(err)
	}
	if h.Proc != 2 || h.Host != "n2" || h.RanksOnHost != 0 || !slices.Equal(h.Env, []string{"PGAS_NPROCS=3", "PGAS_PROC=2", "PGAS_HOST=n2"}) {
		t.Errorf("resolved %+v", h)
	}
	for _, bad := range []string{"", "3", "-1", "x"} {
		h := &remoteHeader{Proc: -1, Step: &stepInfo{Hosts: []string{"n1", "n1", "n2"}, RanksOnHost: []int{2, 2, 0}}}
		if err := h.resolveStep(bad); err == nil {
			t.Errorf("SLURM_PROCID=%q accepted", bad)
		}
	}
}
