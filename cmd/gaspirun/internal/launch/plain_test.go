package launch

import (
	"context"
	"fmt"
	"os/exec"
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
