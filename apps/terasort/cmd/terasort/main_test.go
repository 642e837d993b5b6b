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

var summaryLine = regexp.MustCompile(`^records=\d+ checksum=[0-9a-f]{16}$`)

// buildBinary compiles the command into a directory removed at the end
// of the test.
func buildBinary(t *testing.T) string {
	t.Helper()
	dir, cleanup, err := proctest.Build("terasort-cli", false, "./apps/terasort/cmd/terasort")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	return filepath.Join(dir, "terasort")
}

type result struct {
	stdout, stderr string
	code           int
}

func (r result) lastLine() string {
	lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	return lines[len(lines)-1]
}

func runBin(t *testing.T, bin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%v: %v", args, err)
	}
	return result{so.String(), se.String(), code}
}

func TestCLI(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	in := filepath.Join(dir, "in")

	gen := runBin(t, bin, "gen", "--records", "5000", "--out", in, "--parts", "3", "--seed", "7")
	if gen.code != 0 || !summaryLine.MatchString(gen.lastLine()) {
		t.Fatalf("gen: code %d, out %q, err %q", gen.code, gen.stdout, gen.stderr)
	}
	want := gen.lastLine()
	for _, p := range []string{"part-00000", "part-00001", "part-00002"} {
		if st, err := os.Stat(filepath.Join(in, p)); err != nil || st.Size()%100 != 0 {
			t.Fatalf("%s: %v", p, err)
		}
	}
	// Generation is deterministic and independent of the part count.
	single := filepath.Join(dir, "single.dat")
	if r := runBin(t, bin, "gen", "--records", "5000", "--single", "--out", single, "--seed", "7"); r.code != 0 || r.lastLine() != want {
		t.Fatalf("gen --single: %q, want %q (%s)", r.lastLine(), want, r.stderr)
	}
	if r := runBin(t, bin, "gen", "--records", "5000", "--out", in); r.code == 0 || !strings.Contains(r.stderr, "already") {
		t.Fatalf("gen into a full directory: code %d, %q", r.code, r.stderr)
	}
	if r := runBin(t, bin, "gen", "--records", "5000", "--out", in, "--parts", "2", "--force", "--seed", "7"); r.code != 0 || r.lastLine() != want {
		t.Fatalf("gen --force: code %d %q", r.code, r.stderr)
	}

	// sum agrees with gen; validate finds the unsorted input out of order.
	if r := runBin(t, bin, "sum", in); r.code != 0 || r.lastLine() != want {
		t.Fatalf("sum: code %d, last line %q, want %q", r.code, r.lastLine(), want)
	}
	// A directory is validated only as a complete sort output (its
	// _SUCCESS marker); the part files named one by one are checked anyway.
	r := runBin(t, bin, "validate", in)
	if r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, "no _SUCCESS marker: not the complete output of terasort sort") {
		t.Fatalf("validate a directory without a marker: code %d, out %q, err %q", r.code, r.stdout, r.stderr)
	}
	r = runBin(t, bin, "validate", filepath.Join(in, "part-00000"), filepath.Join(in, "part-00001"))
	if r.code != 1 || r.lastLine() != want || !strings.Contains(r.stderr, "part-00000 record") {
		t.Fatalf("validate unsorted: code %d, out %q, err %q", r.code, r.stdout, r.stderr)
	}

	// memsort produces a file that validates with the input's checksum.
	sorted := filepath.Join(dir, "sorted.dat")
	if r := runBin(t, bin, "memsort", "--in", in, "--out", sorted, "--repeat", "2"); r.code != 0 || !strings.Contains(r.stdout, "warm_sort=") {
		t.Fatalf("memsort: %q", r.stderr)
	}
	cs := strings.TrimPrefix(strings.Fields(want)[1], "checksum=")
	r = runBin(t, bin, "validate", sorted, "--expect-checksum", cs, "--expect-records", "5000")
	if r.code != 0 || r.lastLine() != want {
		t.Fatalf("validate sorted: code %d, out %q, err %q", r.code, r.stdout, r.stderr)
	}
	r = runBin(t, bin, "validate", "--expect-checksum", "0123456789abcdef", sorted)
	if r.code != 1 || r.lastLine() != want || !strings.Contains(r.stderr, "expected 0123456789abcdef") {
		t.Fatalf("checksum mismatch: code %d, err %q", r.code, r.stderr)
	}
	r = runBin(t, bin, "validate", "--expect-records", "4999", sorted)
	if r.code != 1 || !strings.Contains(r.stderr, "got 5000 records, expected 4999") {
		t.Fatalf("count mismatch: code %d, err %q", r.code, r.stderr)
	}

	// A truncated file: clear error with file and offset, no summary line.
	b, _ := os.ReadFile(sorted)
	cut := filepath.Join(dir, "cut.dat")
	os.WriteFile(cut, b[:len(b)-33], 0o644)
	r = runBin(t, bin, "validate", cut)
	if r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, cut+" at byte offset 499900") {
		t.Fatalf("truncated: code %d, out %q, err %q", r.code, r.stdout, r.stderr)
	}

	// The distributed sort runs alone as a job of one rank (run as an MPI
	// program runs without mpirun; apps/terasort/dist_test.go runs it
	// under gaspirun), and its output validates.
	out := filepath.Join(dir, "out")
	r = runBin(t, bin, "sort", "--in", in, "--out", out)
	if r.code != 0 {
		t.Fatalf("sort alone: code %d, err %q", r.code, r.stderr)
	}
	if r = runBin(t, bin, "validate", out, "--expect-checksum", cs, "--expect-records", "5000"); r.code != 0 || r.lastLine() != want {
		t.Fatalf("validate the output of sort alone: code %d, out %q, err %q", r.code, r.stdout, r.stderr)
	}

	// Usage errors exit 2 with one line saying what to do, and no list of
	// the flags; --help lists them on stdout and exits 0.
	for _, args := range [][]string{
		{},
		{"gen", "--records", "x"},
		{"gen", "--bogus"},
		{"sort", "--inject", "bogus", "--in", in, "--out", dir},
		{"gen", "--out", dir},
		{"gen", "--records", "10"},
		{"gen", "--records", "10", "--out", dir, "--single", "--parts", "2"},
		{"gen", "--records", "10", "--out", dir, "--format", "ebcdic"},
		{"validate"},
		{"validate", "--expect-checksum", "xyz", sorted},
		{"frobnicate"},
		{"sort", "--in", in, "--out", dir, "--schedule", "random"},
	} {
		if r := runBin(t, bin, args...); r.code != 2 || strings.Count(r.stderr, "\n") != 1 || strings.Contains(r.stderr, ": terasort: ") || r.stdout != "" {
			t.Errorf("%v: code %d, stdout %q, stderr %q; want 2 and one line", args, r.code, r.stdout, r.stderr)
		}
	}
	for _, args := range [][]string{{"--help"}, {"gen", "-h"}, {"validate", "--help"}} {
		if r := runBin(t, bin, args...); r.code != 0 || r.stderr != "" || !strings.Contains(r.stdout, "usage") && !strings.Contains(r.stdout, "-records N") {
			t.Errorf("%v: code %d, stdout %q, stderr %q; want the usage on stdout and 0", args, r.code, r.stdout, r.stderr)
		}
	}
	if r := runBin(t, bin, "validate", in); strings.Contains(r.stderr, "terasort validate: terasort:") {
		t.Errorf("validate: the program's name twice in %q", r.stderr)
	}
}
