package launch

import (
	"slices"
	"testing"

	"github.com/gaspigo/gaspigo/cmd/gaspirun/internal/remote"
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

// formatRanges writes what the remote side's signal lines and srun's
// reports list: remote.ParseRanges reads it back.
func TestFormatRangesRoundTrip(t *testing.T) {
	ps := []int{0, 1, 2, 3, 7, 9, 10, 11, 12, 4095}
	got, err := remote.ParseRanges(formatRanges(ps))
	if err != nil || !slices.Equal(got, ps) {
		t.Errorf("round trip of %v: %v, %v", ps, got, err)
	}
}
