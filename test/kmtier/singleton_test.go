package kmtier

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// A gaspigo program run from the shell alone, as an MPI program runs
// without mpirun, is a job of one rank: kmeans gives the checksum of
// gaspirun -n 1, exits 0, and prints no warning.
func TestSingletonRunsAlone(t *testing.T) {
	if bins.err != nil {
		t.Skip(bins.err)
	}
	args := []string{"--generate", "2000", "--k", "3", "--max-iter", "10", "--quiet"}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PGAS_") && !strings.HasPrefix(kv, "SLURM_") && !strings.HasPrefix(kv, "OMPI_") && !strings.HasPrefix(kv, "PMI_") && !strings.HasPrefix(kv, "JOB_COMPLETION_INDEX=") {
			env = append(env, kv)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), jobDeadline)
	defer cancel()
	alone := exec.CommandContext(ctx, bins.kmeans, args...)
	alone.Env = env
	out, err := alone.CombinedOutput()
	if err != nil {
		t.Fatalf("kmeans alone: %v\n%s", err, out)
	}
	launched := exec.CommandContext(ctx, bins.gaspirun, append([]string{"-n", "1", "--", bins.kmeans}, args...)...)
	launched.Env = env
	ref, err := launched.CombinedOutput()
	if err != nil {
		t.Fatalf("gaspirun -n 1: %v\n%s", err, ref)
	}
	sum := regexp.MustCompile(`centroids sha256=[0-9a-f]{64}`)
	if a, b := sum.FindString(string(out)), sum.FindString(string(ref)); a == "" || a != b {
		t.Fatalf("alone: %q, under gaspirun -n 1: %q\n%s\n%s", a, b, out, ref)
	}
	if strings.Contains(string(out), "WARN") || strings.Contains(string(ref), "WARN") {
		t.Errorf("a warning in the simplest run:\n%s\n%s", out, ref)
	}
}
