package job

import (
	"testing"

	"github.com/gaspigo/gaspigo/internal/bootstrap"
)

// Rule: the processes that share this machine are those that published
// its id, whatever their host labels, and those of this host label that
// published none; without an id, those of this host label.
func TestMachineMembers(t *testing.T) {
	member := func(host, machine string) bootstrap.Member {
		m := bootstrap.Member{Host: host, Extra: map[string]string{}}
		publishMachine(m.Extra, machine)
		return m
	}
	table := bootstrap.Table{Members: []bootstrap.Member{
		member("a", "m1"), member("b", "m1"), member("c", "m1"), // three simulated hosts of machine m1
		member("d", "m2"),
		member("a", ""), // one of a that published nothing
		member("e", ""),
	}}
	for _, tc := range []struct {
		host, id string
		want     int
	}{
		{"a", "m1", 4},
		{"d", "m2", 1},
		{"a", "", 2},
		{"e", "", 1},
	} {
		if got := machineMembers(table, tc.host, tc.id); got != tc.want {
			t.Errorf("machineMembers(host %q, machine %q) = %d, want %d", tc.host, tc.id, got, tc.want)
		}
	}
	if thisMachine() == "" {
		t.Logf("no %s here: the choice falls back to host labels", bootIDPath)
	}
}
