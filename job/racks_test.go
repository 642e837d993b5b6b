package job

import (
	"slices"
	"testing"
)

// Rule: each process gets its host's rack from PGAS_RACKS; a host it does
// not name is a rack of its own, apart from every named rack; no racks,
// no labels.
func TestRacksOf(t *testing.T) {
	hosts := []string{"n1", "n1", "n2", "n3", "n4"}
	got := racksOf(hosts, map[string]string{"n1": "r1", "n2": "r1", "n3": "r2", "other": "r9"})
	if want := []string{"r1", "r1", "r1", "r2", "\x00n4"}; !slices.Equal(got, want) {
		t.Fatalf("racksOf = %q, want %q", got, want)
	}
	if got := racksOf(hosts, nil); got != nil {
		t.Fatalf("racksOf without racks = %q, want nil", got)
	}
}
