package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
)

// build compiles gaspirun and gaspibench into a directory removed at the
// end of the test.
func build(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs real processes")
	}
	dir, cleanup, err := proctest.Build("gaspibench", false, "./cmd/gaspirun", "./cmd/gaspibench")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	return dir
}

// launch runs gaspirun with args and returns its exit code and output.
func launch(t *testing.T, dir string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "gaspirun"), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("gaspirun: %v", err)
	}
	return code, stdout.String(), stderr.String()
}

// Real processes under gaspirun, built once for the subtests.
func TestGaspibench(t *testing.T) {
	dir := build(t)
	t.Run("tables", func(t *testing.T) { testTables(t, dir) })
	t.Run("refuses", func(t *testing.T) { testRefuses(t, dir) })
}

// A short real run: two processes over TCP print every table with figures
// and ratios, and the same report goes to --out as CSV.
func testTables(t *testing.T, dir string) {
	bench := filepath.Join(dir, "gaspibench")
	quick := []string{"--iters", "3", "--warmup", "1", "--min-time", "0", "--sizes", "8,1M", "--lat-sizes", "8",
		"--coll-sizes", "8", "--window", "4", "--spin", "0", "--timeout", "50s"}

	code, out, errOut := launch(t, dir, append([]string{"-n", "2", "--timeout", "55s", "--", bench}, quick...)...)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	for _, want := range []string{"[r0] # gaspibench: 2 ranks", "# Bandwidth", "write/raw", "# Write+notify ping-pong",
		"# Collectives over 2 ranks", "# Targets", "# load average at end"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "[r1] #") {
		t.Errorf("rank 1 printed a report:\n%s", out)
	}
	num := `[0-9]+\.[0-9]+`
	for _, re := range []string{
		`(?m)^\[r0\] +8 B +4 +3 +` + num + ` +` + num + ` +` + num + ` +` + num + ` +` + num + `$`,   // bandwidth, all columns
		`(?m)^\[r0\] +1 MiB +4 +3 +` + num + ` +` + num + ` +` + num + ` +` + num + ` +` + num + `$`, // bandwidth, all columns
		`(?m)^\[r0\] +8 B +3( +` + num + `){6} +` + num + `$`,                                        // latency and ratio
		`(?m)^\[r0\] +barrier +- +3 +` + num + ` +` + num + ` +` + num + `$`,                         // barrier
		`(?m)^\[r0\] +allreduce +8 B +3 +` + num + ` +` + num + ` +` + num + `$`,                     // allreduce
		`(?m)^\[r0\] +write bandwidth at 1 MiB >= 0\.80 x raw stream +` + num + ` x +(met|NOT met)$`, // target
		`(?m)^\[r0\] +8 B write\+notify RTT <= 1\.5 x raw ping-pong +` + num + ` x +(met|NOT met)$`,  // target
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("output does not match %s:\n%s", re, out)
		}
	}

	csvFile := filepath.Join(t.TempDir(), "r.csv")
	code, out, errOut = launch(t, dir, append([]string{"-n", "2", "--timeout", "55s", "--", bench, "--csv", "--out", csvFile,
		"--tests", "bw,raw"}, quick...)...)
	if code != 0 {
		t.Fatalf("csv: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	data, err := os.ReadFile(csvFile)
	if err != nil {
		t.Fatal(err)
	}
	var rows []string
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if !strings.HasPrefix(line, "#") {
			rows = append(rows, line)
		}
	}
	// Header, write 8 B and 1 MiB (with the raw stream), raw ping-pong 8 B.
	if len(rows) != 4 || !strings.HasPrefix(rows[0], "test,ranks,size_bytes,") ||
		!regexp.MustCompile(`^write,2,1048576,4,3,[0-9.]+,[0-9.]+,3,[0-9.]+,`).MatchString(rows[2]) ||
		!strings.HasPrefix(rows[3], "write_notify_rtt,2,8,") {
		t.Errorf("CSV file:\n%s", data)
	}
}

// Bad flags and a missing job are refused at once with advice.
func testRefuses(t *testing.T, dir string) {
	bench := filepath.Join(dir, "gaspibench")
	code, _, errOut := launch(t, dir, "-n", "2", "--", bench, "--window", "0")
	// Each process reports the bad flag before exiting; the launcher stops
	// the rest once the first has, so one or two copies arrive.
	if n := strings.Count(errOut, "Window (--window) is 0; want 1..1024"); code != 2 || n < 1 || n > 2 {
		t.Errorf("bad flag: exit %d, stderr:\n%s", code, errOut)
	}
	cmd := exec.Command(bench, "--iters", "1")
	cmd.Env = append(os.Environ(), "PGAS_RENDEZVOUS=", "PGAS_PROC=")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "gaspirun -n 2 -- gaspibench") {
		t.Errorf("without gaspirun: %v\n%s", err, out)
	}
}
