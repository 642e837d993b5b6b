package pagerank

// Real-process tests: gaspirun and pagerank run as jobs of 3 ranks.

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
)

var bins = proctest.Program{Pkg: "./apps/pagerank/cmd/pagerank"}

func TestMain(m *testing.M) {
	code := m.Run()
	bins.Cleanup()
	os.Exit(code)
}

var resultRE = regexp.MustCompile(`^vertices=\d+ edges=\d+ iterations=\d+ sha256=[0-9a-f]{64} top=`)

// The job's ranks equal the reference's, bit for bit, with a SIGKILL of
// a rank between two checkpoints (iterations after the restored one are
// redone).
func TestPageRankKill(t *testing.T) {
	graph := []string{"--vertices", "6000", "--degree", "6", "--seed", "9", "--iterations", "9"}
	want := bins.Reference(t, resultRE, append([]string{"ref"}, graph...)...)
	code, log := bins.Job(t, 3, 1, append(append([]string{"run"}, graph...), "--ckpt-every", "3", "--inject", "kill:rank=1,iter=5", "--check")...)
	if got := proctest.JobResult(t, code, log, resultRE); got != want {
		t.Fatalf("job with a kill: %q, reference %q", got, want)
	}
	proctest.LogContains(t, log, "[r1] inject: SIGKILL rank 1", "restored checkpoint", "[r0] reference: match")
}

// A graph read from a file, with vertices without edges, failure-free,
// on one rank and on three.
func TestPageRankEdgeFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "edges")
	var b strings.Builder
	for v := range 500 {
		if v%7 != 0 { // every 7th vertex dangles
			b.WriteString(fmt.Sprintf("%d %d\n", v, (v*31)%503))
			b.WriteString(fmt.Sprintf("%d %d\n", v, v/3))
		}
	}
	os.WriteFile(path, []byte(b.String()), 0o600)
	want := bins.Reference(t, resultRE, "ref", "--edges", path, "--iterations", "6")
	// On one rank nothing goes through the shuffle; on three most sums do.
	for _, ranks := range []int{1, 3} {
		code, log := bins.Job(t, ranks, 0, "run", "--edges", path, "--iterations", "6")
		if got := proctest.JobResult(t, code, log, resultRE); got != want {
			t.Fatalf("job of %d ranks: %q, reference %q", ranks, got, want)
		}
		proctest.LogContains(t, log, "[r0] 1/6 iterations done: ", "[r0] 6/6 iterations done: ")
	}
}

func TestPageRankUsage(t *testing.T) {
	bins.Usage(t, "--vertices N or --edges", "run")
	bins.Usage(t, "whole number", "run", "--vertices", "10", "--inject", "kill:rank=1,iter=1.5")
	bins.Usage(t, "--edges", "run", "--edges", "/nonexistent/e")
	bins.Usage(t, "--iterations", "ref", "--vertices", "10", "--iterations", "0")
}
