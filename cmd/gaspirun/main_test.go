package main

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/cmd/gaspirun/internal/launch"
	"github.com/gaspigo/gaspigo/internal/auth"
)

func TestParseFlags(t *testing.T) {
	var stderr bytes.Buffer
	cfg, what, err := parseFlags([]string{"-n", "4", "--spares", "2", "--timeout", "1m", "--host-labels", "a, b",
		"--ranks-per-host", "3", "--state-dir", "/tmp/s", "--on-death", "abort", "--quiet", "--grace", "2s",
		"--job-id", "j", "--tls", "--", "./prog", "-x", "--y"}, &stderr)
	if err != nil || what != actRun {
		t.Fatal(err, what)
	}
	want := launch.DefaultConfig()
	want.Ranks, want.Spares, want.Timeout = 4, 2, time.Minute
	want.HostLabels, want.ProcsPerHost, want.StateDir = []string{"a", "b"}, 3, "/tmp/s"
	want.OnDeath, want.Quiet, want.Grace, want.JobID = launch.DeathAbort, true, 2*time.Second, "j"
	want.TLS = true
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
	for _, h := range []string{"-h", "--help", "-help"} {
		if _, what, err := parseFlags([]string{"-n", "2", h}, &stderr); err != nil || what != actHelp {
			t.Errorf("%s: %v, %v", h, what, err)
		}
	}
	if stderr.Len() != 0 {
		t.Errorf("parseFlags wrote %q", stderr.String())
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
		{[]string{"-n", "4", "--host-labels", "a,b", "--ranks-per-host", "1", os.Args[0]}, 2, "use --ranks-per-host 2"},
		{[]string{"--bogus"}, 2, "gaspirun: unknown flag --bogus\nRun 'gaspirun --help' for the flags.\n"},
		{[]string{"-bogus"}, 2, "unknown flag --bogus"},
		{[]string{"--spares", "x"}, 2, `invalid value "x" for flag --spares`},
		{[]string{"-n"}, 2, "flag needs an argument: -n"},
		{[]string{"-n", "2", "--host", "a:0", "prog"}, 2, `--host a:0: "a:0": slots "0" is not a whole number`},
		{[]string{"-n", "2", "--host", "a", "--hostfile", "f", "prog"}, 2, "--host a: and --hostfile both name the hosts"},
		{[]string{"-n", "2", "--host", "a", "--launcher", "local", "prog"}, 2, "--host a: is for --launcher ssh, not local"},
	}
	for _, c := range cases {
		var stdout, stderr bytes.Buffer
		if code := run(c.args, &stdout, &stderr); code != c.code || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("gaspirun %q: exit %d, stderr %q; want exit %d and %q", c.args, code, stderr.String(), c.code, c.want)
		}
		// A short message: the error and where the flags are, not the help.
		if n := strings.Count(stderr.String(), "\n"); n != 2 || !strings.HasSuffix(stderr.String(), "Run 'gaspirun --help' for the flags.\n") {
			t.Errorf("gaspirun %q: stderr of %d lines, want the error and the hint:\n%s", c.args, n, stderr.String())
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

func TestParseFlagsLaunchers(t *testing.T) {
	var stderr bytes.Buffer
	t.Setenv("GASPIRUN_TEST_X", "x value")
	cfg, _, err := parseFlags([]string{"-n", "2", "--hostfile", "hosts", "--ssh", `ssh -p 2222 -i "my key"`,
		"--rendezvous-addr", "10.0.0.1:29400", "--remote-gaspirun", "/opt/bin/gaspirun", "-x", "GASPIRUN_TEST_X", "-x", "A=b=c",
		"--", "./prog"}, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Backend() != launch.LauncherSSH || cfg.Hostfile != "hosts" || cfg.RendezvousAddr != "10.0.0.1:29400" ||
		!reflect.DeepEqual(cfg.SSH, []string{"ssh", "-p", "2222", "-i", "my key"}) ||
		!reflect.DeepEqual(cfg.RemoteCommand, []string{"/opt/bin/gaspirun", "--remote-exec"}) ||
		!reflect.DeepEqual(cfg.Env, []string{"GASPIRUN_TEST_X=x value", "A=b=c"}) {
		t.Fatalf("got %+v", cfg)
	}
	cfg, _, err = parseFlags([]string{"-n", "2", "--launcher", "slurm", "--srun", "srun --mem-per-cpu=1G", "prog"}, &stderr)
	if err != nil || cfg.Launcher != launch.LauncherSlurm || !reflect.DeepEqual(cfg.Srun, []string{"srun", "--mem-per-cpu=1G"}) {
		t.Fatalf("got %+v, %v", cfg, err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-n", "2", "-x", "GASPIRUN_TEST_UNSET_VAR", "prog"}, "-x GASPIRUN_TEST_UNSET_VAR: is not set here"},
		{[]string{"-n", "2", "-x", "=v", "prog"}, "-x =v: has no name"},
		{[]string{"-n", "2", "--ssh", `ssh "x`, "prog"}, "--ssh ssh \"x: is not a command"},
		{[]string{"-n", "2", "--ssh", " ", "prog"}, "--ssh  : is not a command"},
	} {
		if _, _, err := parseFlags(c.args, &stderr); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.args, err, c.want)
		}
	}
}

func TestSlurmDefaultRanks(t *testing.T) {
	var stderr bytes.Buffer
	t.Setenv("SLURM_JOB_ID", "9")
	t.Setenv("SLURM_NTASKS", "6")
	cfg, _, err := parseFlags([]string{"--spares", "2", "prog"}, &stderr)
	if err != nil || cfg.Ranks != 4 || cfg.Backend() != launch.LauncherSlurm {
		t.Fatalf("got ranks %d, backend %s, %v", cfg.Ranks, cfg.Backend(), err)
	}
	if _, _, err := parseFlags([]string{"--spares", "6", "prog"}, &stderr); err == nil || !strings.Contains(err.Error(), "leaves no rank of the allocation's 6 tasks") {
		t.Errorf("all spares: %v", err)
	}
	// --launcher local inside an allocation still needs -n.
	if _, _, err := parseFlags([]string{"--launcher", "local", "prog"}, &stderr); err == nil || !strings.Contains(err.Error(), "-n: is required") {
		t.Errorf("local without -n: %v", err)
	}
}

func TestRunLauncherErrors(t *testing.T) {
	hf := filepath.Join(t.TempDir(), "hosts")
	os.WriteFile(hf, []byte("node1 slots=2\nnode2 slots=x\n"), 0o644)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"-n", "2", "--hostfile", hf, "prog"}, `line 2 ("node2 slots=x"): slots=x: not a whole number`},
		{[]string{"-n", "2", "--hostfile", hf, "--host-labels", "a,b", "prog"}, "--host-labels/--ranks-per-host: only label processes of a local job"},
		{[]string{"-n", "2", "--launcher", "ssh", "prog"}, "--launcher ssh: needs the hosts; give --hostfile FILE"},
		{[]string{"-n", "2", "--launcher", "local", "--ssh", "ssh", os.Args[0]}, "apply to --hostfile and Slurm jobs"},
		{[]string{"-n", "2", "--launcher", "pbs", "prog"}, "--launcher pbs: unknown launcher; use local, ssh or slurm"},
		{[]string{"-n", "2", "--hostfile", hf, "--rendezvous-addr", "a b", "prog"}, "--rendezvous-addr a b: is not HOST or HOST:PORT"},
	}
	for _, c := range cases {
		var stdout, stderr bytes.Buffer
		if code := run(c.args, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), c.want) {
			t.Errorf("gaspirun %q: exit %d, stderr %q; want exit 2 and %q", c.args, code, stderr.String(), c.want)
		}
	}
	os.WriteFile(hf, []byte("node1 slots=2\n"), 0o644)
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-n", "2", "--spares", "1", "--hostfile", hf, "prog"}, &stdout, &stderr); code != 2 ||
		!strings.Contains(stderr.String(), "its 1 host offer 2 slots, too few for 3 processes (-n 2 + --spares 1)") {
		t.Errorf("too few slots: exit %d, %q", code, stderr.String())
	}
}
