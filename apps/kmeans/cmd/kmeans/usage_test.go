package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestMain runs the command itself when the test binary is started as
// it (runMain), so the tests see its real output and exit status.
func TestMain(m *testing.M) {
	if os.Getenv("KMEANS_TEST_MAIN") == "1" {
		os.Args = append([]string{"kmeans"}, os.Args[1:]...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runMain runs the command with args, outside any job.
func runMain(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	cmd.Env = append(os.Environ(), "KMEANS_TEST_MAIN=1")
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("kmeans %q: %v", args, err)
	}
	return so.String(), se.String(), code
}

// A bad flag or value is said once, on one line naming the flag, without
// the list of flags and without a rank (every rank of a job prints the
// same line, which gaspirun collapses), and is exit status 2; --help
// prints the flags on stdout and is exit 0.
func TestUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--inject", "bogus", "--generate", "100"}, `kmeans: --inject "bogus": only kill injections exist (want kill:rank=R,iter=I`},
		{[]string{"--dim", "0", "--generate", "100"}, "kmeans: --dim 0: give a dimension of at least 1\n"},
		{[]string{"--k", "x"}, "kmeans: --k x: give a whole number\n"},
		{[]string{"--bogus"}, "kmeans: --bogus: no such flag (kmeans --help lists them)\n"},
		{[]string{"plot", "--title"}, "kmeans plot: --title needs a value: --title VALUE\n"},
	} {
		so, se, code := runMain(t, c.args...)
		if code != 2 || !strings.HasPrefix(se, c.want) || strings.Count(se, "\n") != 1 || so != "" {
			t.Errorf("kmeans %q: exit %d, stdout %q, stderr %q; want exit 2 and the one line %q", c.args, code, so, se, c.want)
		}
	}
	for _, args := range [][]string{{"--help"}, {"-h"}, {"plot", "-h"}} {
		so, se, code := runMain(t, args...)
		if code != 0 || se != "" || !strings.Contains(so, "-history FILE") && !strings.Contains(so, "-ckpt-every C") {
			t.Errorf("kmeans %q: exit %d, stdout %q, stderr %q; want the flags on stdout and exit 0", args, code, so, se)
		}
	}
}
