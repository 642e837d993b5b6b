package main

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/cmd/gaspirun/internal/launch"
	"github.com/gaspigo/gaspigo/internal/auth"
)

func TestParseFlags(t *testing.T) {
	var stderr bytes.Buffer
	cfg, newTok, err := parseFlags([]string{"-n", "4", "--spares", "2", "--timeout", "1m", "--hosts", "a, b",
		"--ranks-per-host", "3", "--state-dir", "/tmp/s", "--on-death", "abort", "--quiet", "--grace", "2s",
		"--job-id", "j", "--", "./prog", "-x", "--y"}, &stderr)
	if err != nil || newTok {
		t.Fatal(err, newTok)
	}
	want := launch.DefaultConfig()
	want.Ranks, want.Spares, want.Timeout = 4, 2, time.Minute
	want.Hosts, want.ProcsPerHost, want.StateDir = []string{"a", "b"}, 3, "/tmp/s"
	want.OnDeath, want.Quiet, want.Grace, want.JobID = launch.DeathAbort, true, 2*time.Second, "j"
	want.Program, want.Args = "./prog", []string{"-x", "--y"}
	if !reflect.DeepEqual(cfg, want) {
		t.Fatalf("got  %+v\nwant %+v", cfg, want)
	}
	// Without "--", flags after the program belong to the program.
	cfg, _, err = parseFlags([]string{"-n", "1", "prog", "-n", "7"}, &stderr)
	if err != nil || cfg.Program != "prog" || !reflect.DeepEqual(cfg.Args, []string{"-n", "7"}) || cfg.Ranks != 1 {
		t.Fatalf("got %+v, %v", cfg, err)
	}
}

func TestParseFlagsErrors(t *testing.T) {
	var stderr bytes.Buffer
	if _, _, err := parseFlags([]string{"prog"}, &stderr); err == nil || !strings.Contains(err.Error(), "-n: is required") {
		t.Errorf("missing -n: %v", err)
	}
	if _, _, err := parseFlags([]string{"-n", "x", "prog"}, &stderr); err == nil {
		t.Errorf("bad -n accepted")
	}
	if _, _, err := parseFlags([]string{"-h"}, &stderr); !errors.Is(err, flag.ErrHelp) || !strings.Contains(stderr.String(), "usage: gaspirun") {
		t.Errorf("help: %v\n%s", err, stderr.String())
	}
}

func TestRunExitCodes(t *testing.T) {
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"prog"}, 2, "-n: is required"},
		{[]string{"-n", "0", "prog"}, 2, "-n 0: the job needs at least 1 rank"},
		{[]string{"-n", "2", "--spares", "-1", "prog"}, 2, "--spares -1: cannot be negative"},
		{[]string{"-n", "2"}, 2, "PROGRAM: no program given"},
		{[]string{"-n", "2", "no-such-program-xyz"}, 2, "not found on PATH"},
		{[]string{"-n", "2", "--on-death", "maybe", os.Args[0]}, 2, "--on-death maybe: unknown policy; use continue or abort"},
		{[]string{"-n", "4", "--hosts", "a,b", "--ranks-per-host", "1", os.Args[0]}, 2, "use --ranks-per-host 2"},
		{[]string{"--bogus"}, 2, "flag provided but not defined"},
	}
	for _, c := range cases {
		var stdout, stderr bytes.Buffer
		if code := run(c.args, &stdout, &stderr); code != c.code || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("gaspirun %q: exit %d, stderr %q; want exit %d and %q", c.args, code, stderr.String(), c.code, c.want)
		}
	}
}

func TestNewToken(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"--new-token"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if _, err := auth.ParseToken(strings.TrimSpace(stdout.String())); err != nil {
		t.Fatalf("token %q: %v", stdout.String(), err)
	}
}
