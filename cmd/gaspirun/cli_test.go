package main

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/cmd/gaspirun/internal/launch"
)

// What an mpirun or srun user types: any program, -np, --host, --version,
// --help.

func TestHelp(t *testing.T) {
	for _, h := range []string{"--help", "-h"} {
		var stdout, stderr bytes.Buffer
		if code := run([]string{h}, &stdout, &stderr); code != 0 || stderr.Len() != 0 {
			t.Fatalf("%s: exit %d, stderr %q", h, code, stderr.String())
		}
		help := stdout.String()
		if !strings.HasPrefix(help, "usage: gaspirun -n N [flags] [--] PROGRAM [ARGS...]\n") {
			t.Errorf("%s: the help does not start with the synopsis:\n%s", h, help)
		}
		for _, w := range []string{"\n  -n, -np N\n", "\n  --spares K\n", "\n  --host, -H HOST[:SLOTS],...\n", "\n  --host-labels labels\n",
			"\n  -x NAME\n", "\n  --quiet\n", "\n  --help, -h\n", "(default 3s)"} {
			if !strings.Contains(help, w) {
				t.Errorf("the help lacks %q", w)
			}
		}
		if regexp.MustCompile(`(?m)^  -[a-z][a-z-]+`).MatchString(strings.ReplaceAll(help, "-np", "")) || strings.Contains(help, "--hosts") {
			t.Errorf("the help shows a long flag with one dash, or the deprecated --hosts:\n%s", help)
		}
	}
	// Every flag is in the help once, but aliases and deprecated names.
	var cfg launch.Config
	fs := newFlagSet(&cfg, &flagVars{})
	seen := map[string]int{}
	for _, sec := range helpSections {
		for _, name := range sec.flags {
			seen[name]++
			if fs.Lookup(name) == nil {
				t.Errorf("the help lists %s, which is no flag", dash(name))
			}
		}
	}
	fs.VisitAll(func(f *flag.Flag) {
		_, alias := aliases[f.Name]
		_, old := deprecated[f.Name]
		if want := map[bool]int{true: 0, false: 1}[alias || old]; seen[f.Name] != want {
			t.Errorf("%s is in the help %d times, want %d", dash(f.Name), seen[f.Name], want)
		}
	})
}

func TestVersion(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"--version"}, &stdout, &stderr); code != 0 || stderr.Len() != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
	if !regexp.MustCompile(`^gaspirun \S+ \(go\S+ \w+/\w+\)\n$`).MatchString(stdout.String()) {
		t.Errorf("version line %q", stdout.String())
	}
}

func TestNpHostAndDeprecatedHosts(t *testing.T) {
	var stderr bytes.Buffer
	cfg, _, err := parseFlags([]string{"-np", "3", "--host", "a,b:2,a", "prog"}, &stderr)
	if err != nil || cfg.Ranks != 3 || cfg.Backend() != launch.LauncherSSH ||
		!reflect.DeepEqual(cfg.HostList, []launch.HostSlots{{Name: "a", Slots: 2}, {Name: "b", Slots: 2}}) {
		t.Fatalf("got %+v, %v", cfg, err)
	}
	if stderr.Len() != 0 {
		t.Errorf("stderr %q", stderr.String())
	}
	cfg, _, err = parseFlags([]string{"-n", "2", "--hosts", "a,b", "prog"}, &stderr)
	if err != nil || !reflect.DeepEqual(cfg.HostLabels, []string{"a", "b"}) || cfg.Backend() != launch.LauncherLocal {
		t.Fatalf("--hosts: got %+v, %v", cfg, err)
	}
	if w := "gaspirun: warning: --hosts is deprecated: use --host-labels"; strings.Count(stderr.String(), "\n") != 1 || !strings.HasPrefix(stderr.String(), w) {
		t.Errorf("--hosts: stderr %q, want one line starting %q", stderr.String(), w)
	}
	if _, _, err := parseFlags([]string{"-n", "2", "--hosts", "a", "--host-labels", "b", "prog"}, &stderr); err == nil {
		t.Error("--hosts with --host-labels accepted")
	}
}

// As mpirun: -H is --host; without -n the slots say how many ranks;
// hosts that are all this machine run without ssh; --stdin takes a rank,
// all or none.
func TestHostSlotsLocalhostAndStdin(t *testing.T) {
	var stderr bytes.Buffer
	for _, c := range []struct {
		args    []string
		ranks   int
		backend launch.LauncherKind
		stdin   int
	}{
		{[]string{"-H", "a:2,b:3", "prog"}, 5, launch.LauncherSSH, 0},
		{[]string{"--host", "a:2,b:3", "--spares", "1", "prog"}, 4, launch.LauncherSSH, 0},
		{[]string{"--host", "localhost:4", "prog"}, 4, launch.LauncherLocal, 0},
		{[]string{"-n", "2", "--host", "localhost,127.0.0.1", "--stdin", "all", "prog"}, 2, launch.LauncherLocal, launch.StdinAll},
		{[]string{"-n", "2", "--stdin", "none", "prog"}, 2, launch.LauncherLocal, launch.StdinNone},
		{[]string{"-n", "2", "--stdin", "1", "prog"}, 2, launch.LauncherLocal, 1},
	} {
		cfg, _, err := parseFlags(c.args, &stderr)
		if err != nil || cfg.Ranks != c.ranks || cfg.Backend() != c.backend || cfg.StdinTo != c.stdin {
			t.Errorf("%q: ranks %d, launcher %s, stdin %d, %v; want %d, %s, %d", c.args, cfg.Ranks, cfg.Backend(), cfg.StdinTo, err, c.ranks, c.backend, c.stdin)
		}
	}
	for args, want := range map[string]string{
		"--host a:2 --spares 2 prog": "leaves no rank of --host's 2 slots",
		"-n 2 --stdin first prog":    "--stdin first: is not a rank, all or none",
	} {
		if _, _, err := parseFlags(strings.Fields(args), &stderr); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", args, err, want)
		}
	}
	cfg, _, _ := parseFlags([]string{"-n", "2", "--stdin", "2", "prog"}, &stderr)
	cfg.Program = os.Args[0]
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "names no rank of the job's 2") {
		t.Errorf("--stdin 2 of 2 ranks: %v", err)
	}
}

// Rule (cmd/gaspirun, Programs that never join): gaspirun -n 2 -- hostname
// prints two lines and exits 0; the job's exit is its processes'.
func TestRunsAnyProgram(t *testing.T) {
	for _, p := range []string{"true", "false", "hostname"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("%s: %v", p, err)
		}
	}
	cases := []struct {
		args  []string
		code  int
		lines int // of stdout
	}{
		{[]string{"-np", "2", "--", "true"}, 0, 0},
		{[]string{"-n", "2", "--launcher", "local", "--", "hostname"}, 0, 2},
		{[]string{"-n", "2", "--quiet", "false"}, 1, 0},
	}
	for _, c := range cases {
		var stdout, stderr bytes.Buffer
		code := run(c.args, &stdout, &stderr)
		if code != c.code || strings.Count(stdout.String(), "\n") != c.lines {
			t.Errorf("gaspirun %q: exit %d, stdout %q, stderr %q; want exit %d and %d lines", c.args, code, stdout.String(), stderr.String(), c.code, c.lines)
		}
		if c.lines > 0 && !regexp.MustCompile(`^\[r[01]\] `).MatchString(stdout.String()) {
			t.Errorf("gaspirun %q: stdout %q is not prefixed", c.args, stdout.String())
		}
		if c.code != 0 && strings.Count(stderr.String(), "exited with code") != 1 {
			t.Errorf("gaspirun %q: the verdict is not said once:\n%s", c.args, stderr.String())
		}
	}
}

// Rule (cmd/gaspirun, Keeping the spare pool full): --respawn gives a
// budget of 16 and a refill wait of 30s, --max-restarts N alone turns it
// on, --refill-wait overrides the wait; without them nothing changes.
func TestRespawnFlags(t *testing.T) {
	cases := []struct {
		args   []string
		budget int
		wait   time.Duration
		policy launch.DeathPolicy
	}{
		{[]string{"-n", "2", "prog"}, 0, 0, launch.DeathAbort},
		{[]string{"-n", "2", "--respawn", "prog"}, launch.DefaultMaxRestarts, launch.DefaultRefillWait, launch.DeathContinue},
		{[]string{"-n", "2", "--max-restarts", "3", "prog"}, 3, launch.DefaultRefillWait, launch.DeathContinue},
		{[]string{"-n", "2", "--respawn", "--max-restarts", "5", "--refill-wait", "10s", "prog"}, 5, 10 * time.Second, launch.DeathContinue},
		{[]string{"-n", "2", "--spares", "1", "--respawn", "--refill-wait", "0", "prog"}, launch.DefaultMaxRestarts, 0, launch.DeathContinue},
		{[]string{"-n", "2", "--max-restarts", "0", "prog"}, 0, 0, launch.DeathAbort},
	}
	for _, c := range cases {
		var stderr bytes.Buffer
		cfg, _, err := parseFlags(c.args, &stderr)
		if err != nil {
			t.Fatalf("%q: %v", c.args, err)
		}
		if cfg.MaxRestarts != c.budget || cfg.RefillWait != c.wait || cfg.Policy() != c.policy || cfg.Respawn() != (c.budget > 0) {
			t.Errorf("%q: budget %d, refill wait %v, policy %q; want %d, %v, %q", c.args, cfg.MaxRestarts, cfg.RefillWait, cfg.Policy(), c.budget, c.wait, c.policy)
		}
		if stderr.Len() != 0 {
			t.Errorf("%q: stderr %q", c.args, stderr.String())
		}
	}
}

func TestRespawnFlagErrors(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"-n", "2", "--respawn", "--max-restarts", "0", os.Args[0]}, "--max-restarts 0: allows no replacement, but --respawn asks for them; give a budget of at least 1"},
		{[]string{"-n", "2", "--max-restarts", "-1", os.Args[0]}, "--max-restarts -1: cannot be negative"},
		{[]string{"-n", "2", "--respawn", "--max-restarts", "-2", os.Args[0]}, "--max-restarts -2: cannot be negative"},
		{[]string{"-n", "2", "--max-restarts", "70000", os.Args[0]}, "give at most --max-restarts 65534"},
		{[]string{"-n", "2", "--refill-wait", "5s", os.Args[0]}, "--refill-wait 5s: makes lost ranks wait for replacements, which only --respawn starts; give --respawn too"},
		{[]string{"-n", "2", "--respawn", "--refill-wait", "-1s", os.Args[0]}, "--refill-wait -1s: cannot be negative"},
		{[]string{"-n", "2", "--respawn", "--on-death", "abort", os.Args[0]}, "--respawn: replaces processes the job survives, but --on-death abort tears the job down"},
		{[]string{"-n", "2", "--max-restarts", "x", os.Args[0]}, `invalid value "x" for flag --max-restarts`},
	}
	for _, c := range cases {
		var stdout, stderr bytes.Buffer
		if code := run(c.args, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("gaspirun %q: exit %d, stderr %q; want exit 2 and %q", c.args, code, stderr.String(), c.want)
		}
	}
}
