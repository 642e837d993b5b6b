package kmtier

import (
	"strings"
	"testing"
)

// TestEveryProcessEnds: 14 ranks and 2 spares on one host, without and
// with a kill. Every rank's process ends by itself (gaspirun stops only
// idle spares; a rank that hangs at exit runs the job into its --timeout),
// no rank finds a failure under Finalize (processes leaving at the end are
// the job ending), and both runs print the same result.
func TestEveryProcessEnds(t *testing.T) {
	const n = 14
	var finals []final
	for _, extra := range [][]string{nil, {"--inject", "kill:rank=7,iter=10"}} {
		res := run(t, spec{n: n, spares: 2, extra: extra})
		if res.code != 0 {
			t.Fatalf("gaspirun exited %d, want 0\n%s", res.code, res.text())
		}
		kills := len(res.kills())
		if kills != len(extra)/2 {
			t.Fatalf("%d kills, want %d\n%s", kills, len(extra)/2, res.text())
		}
		if got := strings.Count(res.out, "recovery: "); kills == 0 && got != 0 {
			t.Fatalf("%d recovery lines in a run without kills: a process leaving at the end taken for a failure\n%s", got, res.text())
		}
		for _, bad := range []string{"kmeans: finalize:", "remaining processes (1 replaced", "lost its process"} {
			if res.has(bad) {
				t.Fatalf("output has %q\n%s", bad, res.text())
			}
		}
		if a := strings.Count(res.out, "shutdown abandoned"); a > 0 {
			t.Logf("%d processes abandoned a Raft shutdown that did not finish in time", a)
		}
		finals = append(finals, res.final(t))
	}
	if finals[0] != finals[1] {
		t.Fatalf("with a kill: %+v, without: %+v", finals[1], finals[0])
	}
}
