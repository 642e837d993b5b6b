package launch

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func plainConfig(ranks, spares int, env ...string) (Config, *watchBuffer, *watchBuffer) {
	cfg, out, errs := jobConfig("", ranks, spares)
	cfg.Env = append([]string{roleVar + "=plain", noRaceExitDelay}, env...)
	return cfg, out, errs
}

// Rule (cmd/gaspirun, Programs that never join): a program that never
// registers runs as under mpirun: every process runs, its output is
// prefixed, and the job exits 0 when they all do.
func TestPlainProgramRuns(t *testing.T) {
	cfg, out, errs := plainConfig(2, 1)
	res := run(t, context.Background(), cfg)
	if res.ExitCode != 0 || res.Reason != "" {
		dump(t, out, errs)
		t.Fatalf("exit %d (%s), want 0", res.ExitCode, res.Reason)
	}
	for _, w := range []string{"[r0] plain 0\n", "[r1] plain 1\n", "[s2] plain 2\n"} {
		if !strings.Contains(out.String(), w) {
			dump(t, out, errs)
			t.Fatalf("stdout lacks %q", w)
		}
	}
	if errs.String() != "" {
		dump(t, out, errs)
		t.Fatal("gaspirun printed lines of its own for a plain job that succeeded (mpirun prints none)")
	}
	if strings.Contains(errs.String(), "registered") {
		dump(t, out, errs)
		t.Fatal("gaspirun talks of the rendezvous to a plain program")
	}
}

// Habits of mpirun and torchrun: gaspirun's standard input reaches rank
// 0 (--stdin), or every rank, or none; every rank gets the rank variables
// both set.
func TestStdinAndRankVariables(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skipf("no sh: %v", err)
	}
	in := filepath.Join(t.TempDir(), "in")
	if err := os.WriteFile(in, []byte("hello\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		to   int
		want []string // lines of stdout
	}{
		{0, []string{"[r0] 0 3 0 3 hello"}},
		{2, []string{"[r2] 2 3 2 3 hello"}},
		{StdinAll, []string{"[r0] 0 3 0 3 hello", "[r1] 1 3 1 3 hello", "[r2] 2 3 2 3 hello"}},
		{StdinNone, nil},
	} {
		f, err := os.Open(in)
		if err != nil {
			t.Fatal(err)
		}
		cfg, out, errs := jobConfig("", 3, 1)
		cfg.Program, cfg.Args, cfg.Env = "sh", []string{"-c", `read l && echo "$RANK $WORLD_SIZE $OMPI_COMM_WORLD_RANK $LOCAL_WORLD_SIZE $l"; true`}, nil
		cfg.Stdin, cfg.StdinTo = f, c.to
		res := run(t, context.Background(), cfg)
		f.Close()
		var got []string
		for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
			if l != "" {
				got = append(got, l)
			}
		}
		slices.Sort(got)
		if res.ExitCode != 0 || !slices.Equal(got, c.want) {
			dump(t, out, errs)
			t.Fatalf("--stdin %d: exit %d, stdout %q, want %q", c.to, res.ExitCode, got, c.want)
		}
	}
}

// --output-filename DIR: every process's output also lands in
// DIR/rank.N/stdout and stderr (a spare's in DIR/proc.P/), as written.
func TestOutputFilename(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	cfg, out, errs := jobConfig("", 2, 1)
	cfg.Program, cfg.Args, cfg.Env = "sh", []string{"-c", `echo "out $RANK"; echo "err $RANK" >&2`}, nil
	cfg.OutputDir = dir
	res := run(t, context.Background(), cfg)
	if res.ExitCode != 0 {
		dump(t, out, errs)
		t.Fatalf("exit %d", res.ExitCode)
	}
	for name, want := range map[string]string{"rank.0/stdout": "out 0\n", "rank.0/stderr": "err 0\n", "rank.1/stdout": "out 1\n", "rank.1/stderr": "err 1\n", "proc.2/stdout": "out \n"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || string(b) != want {
			t.Errorf("%s: %q, %v; want %q", name, b, err, want)
		}
	}
	if !strings.Contains(out.String(), "[r1] out 1") {
		dump(t, out, errs)
		t.Error("the terminal lost the lines")
	}
}

// The system's true and hostname, as a user would start them.
func TestSystemProgramsRun(t *testing.T) {
	for _, prog := range []string{"true", "hostname"} {
		if _, err := exec.LookPath(prog); err != nil {
			t.Logf("%s not found: %v", prog, err)
			continue
		}
		cfg, out, errs := jobConfig("", 2, 0)
		cfg.Program, cfg.Env = prog, nil
		res := run(t, context.Background(), cfg)
		if res.ExitCode != 0 {
			dump(t, out, errs)
			t.Fatalf("%s: exit %d (%s), want 0", prog, res.ExitCode, res.Reason)
		}
		if prog == "hostname" {
			if n := strings.Count(out.String(), "\n"); n != 2 || !strings.HasPrefix(out.String(), "[r") {
				dump(t, out, errs)
				t.Fatalf("hostname printed %d lines, want 2 prefixed ones", n)
			}
		}
	}
}

// Rule (cmd/gaspirun, Programs that never join): a failing plain process
// fails the job with its code, and gaspirun says so once.
func TestPlainProgramFailurePropagatesCode(t *testing.T) {
	cfg, out, errs := plainConfig(3, 0, "GASPIRUN_TEST_CODE_1=5")
	res := run(t, context.Background(), cfg)
	if res.ExitCode != 5 {
		dump(t, out, errs)
		t.Fatalf("exit %d, want 5", res.ExitCode)
	}
	verdict := "rank 1 (process 1) exited with code 5"
	if n := strings.Count(errs.String(), verdict); n != 1 || !strings.Contains(errs.String(), "gaspirun: job failed: "+verdict) {
		dump(t, out, errs)
		t.Fatalf("the verdict %q came %d times, want once after \"job failed: \"", verdict, n)
	}
	if !strings.Contains(errs.String(), "; exit 5; wall time") {
		dump(t, out, errs)
		t.Fatal("no summary")
	}
}

// Rule (cmd/gaspirun, Programs that never join): a process that exits 0
// without registering fails a job whose other processes registered, at
// once rather than at their rendezvous timeout.
func TestPlainProcessFailsAJob(t *testing.T) {
	cfg, out, errs := jobConfig("plain0", 3, 0)
	start := time.Now()
	res := run(t, context.Background(), cfg)
	if res.ExitCode != ExitLost {
		dump(t, out, errs)
		t.Fatalf("exit %d, want %d", res.ExitCode, ExitLost)
	}
	// The children give up registering after 20 s; the bound is generous
	// for a busy machine and still well below that.
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("the job took %v to fail", d)
	}
	w := fmt.Sprintf("gaspirun: job failed: rank 0 (process 0) exited with code 0 without registering with the rendezvous, but rank ")
	if !strings.Contains(errs.String(), w) {
		dump(t, out, errs)
		t.Fatalf("stderr lacks %q", w)
	}
	for _, p := range res.Procs {
		if p.Proc != 0 && !p.Stopped {
			t.Errorf("process %d was not stopped: %+v", p.Proc, p)
		}
	}
}

// --host a,b:N is a hostfile on the command line (Open MPI's --host), and
// a plain program runs over ssh as locally.
func TestSSHHostListAndPlainProgram(t *testing.T) {
	cfg, out, errs, _ := remoteJob(t, "", 2, 1, 1)
	cfg.Hostfile = ""
	cfg.HostList = []HostSlots{{Name: "h0", Slots: 2}, {Name: "h1", Slots: 1}}
	cfg.Env = append(cfg.Env, roleVar+"=plain")
	res := run(t, context.Background(), cfg)
	if res.ExitCode != 0 {
		dump(t, out, errs)
		t.Fatalf("exit %d (%s), want 0", res.ExitCode, res.Reason)
	}
	for _, w := range []string{"placement: h0: r0-1; h1: s2"} {
		if !strings.Contains(errs.String(), w) {
			dump(t, out, errs)
			t.Fatalf("stderr lacks %q", w)
		}
	}
	for _, w := range []string{"[r0] plain 0\n", "[r1] plain 1\n", "[s2] plain 2\n"} {
		if !strings.Contains(out.String(), w) {
			dump(t, out, errs)
			t.Fatalf("stdout lacks %q", w)
		}
	}
	waitNoRemoteSides(t)
}

// Rule (gaspirun --collapse): the same usage error from every process of
// a large job is said once (or twice, for processes that print it a
// window later): at most 5 lines in all, and the job exits 2.
func TestUsageErrorSaidOnce(t *testing.T) {
	cfg, out, errs := jobConfig("", 32, 0)
	cfg.Env = []string{roleVar + "=usage", noRaceExitDelay}
	cfg.Collapse = DefaultConfig().Collapse
	res := run(t, context.Background(), cfg)
	if res.ExitCode != 2 {
		dump(t, out, errs)
		t.Fatalf("exit %d, want 2", res.ExitCode)
	}
	all := out.String() + errs.String()
	if n := strings.Count(all, "\n"); n > 5 {
		dump(t, out, errs)
		t.Fatalf("%d lines (the error %d times); want at most 5", n, strings.Count(all, "--bogus"))
	}
}
