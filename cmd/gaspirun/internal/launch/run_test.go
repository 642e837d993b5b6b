package launch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// watchBuffer collects output and lets a test wait for a substring.
type watchBuffer struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{}
}

func newWatchBuffer() *watchBuffer { return &watchBuffer{changed: make(chan struct{})} }

func (w *watchBuffer) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(b)
	close(w.changed)
	w.changed = make(chan struct{})
	return len(b), nil
}

func (w *watchBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// waitCount waits until s occurs n times; false after the deadline.
func (w *watchBuffer) waitCount(s string, n int, d time.Duration) bool {
	deadline := time.After(d)
	for {
		w.mu.Lock()
		c := strings.Count(w.buf.String(), s)
		ch := w.changed
		w.mu.Unlock()
		if c >= n {
			return true
		}
		select {
		case <-ch:
		case <-deadline:
			return false
		}
	}
}

func jobConfig(mode string, ranks, spares int) (Config, *watchBuffer, *watchBuffer) {
	cfg := LocalConfig()
	cfg.Launcher = LauncherLocal // also when the tests run inside a Slurm allocation
	cfg.Ranks, cfg.Spares = ranks, spares
	cfg.Program = os.Args[0]
	cfg.Env = []string{roleVar + "=child", modeVar + "=" + mode, noRaceExitDelay}
	cfg.Timeout = 60 * time.Second // a safety net; tests that expect it set their own
	out, errs := newWatchBuffer(), newWatchBuffer()
	cfg.Stdout, cfg.Stderr = out, errs
	return cfg, out, errs
}

func run(t *testing.T, ctx context.Context, cfg Config) Result {
	t.Helper()
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, p := range res.Procs {
		pids = append(pids, p.Pid)
	}
	waitGone(t, pids)
	return res
}

func dump(t *testing.T, out, errs *watchBuffer) {
	t.Helper()
	t.Logf("stdout:\n%s\nstderr:\n%s", out, errs)
}

// Rule (cmd/gaspirun, Output): identical lines from many ranks are printed
// once, naming the ranks as ranges; different lines keep their own
// prefix; gaspirun's verdict comes once.
func TestOutputCollapsesAcrossRanks(t *testing.T) {
	const n = 32
	cfg, out, errs := jobConfig("same", n, 0)
	// Generous (the bound): the group is printed as soon as all 32 joined it.
	cfg.Collapse = 10 * time.Second
	res := run(t, context.Background(), cfg)
	if res.ExitCode != 0 {
		dump(t, out, errs)
		t.Fatalf("exit %d: %s", res.ExitCode, res.Reason)
	}
	got := out.String()
	if c := strings.Count(got, "the same line"); c != 1 || !strings.Contains(got, "[r0-31] the same line\n") {
		dump(t, out, errs)
		t.Fatalf("%d lines of \"the same line\", want one [r0-31]", c)
	}
	for p := range n {
		if w := fmt.Sprintf("[r%d] proc %d\n", p, p); !strings.Contains(got, w) {
			dump(t, out, errs)
			t.Fatalf("stdout lacks %q", w)
		}
	}
	if c := strings.Count(errs.String(), "gaspirun: 32 processes (32 ranks + 0 spares): 32 exited 0"); c != 1 {
		dump(t, out, errs)
		t.Fatalf("the verdict came %d times", c)
	}
}

func TestEnvContractReachesProcesses(t *testing.T) {
	cfg, out, errs := jobConfig("env", 2, 1)
	cfg.HostLabels = []string{"hostA", "hostB"}
	cfg.ProcsPerHost = 2
	cfg.JobID = "job-x"
	cfg.StateDir = filepath.Join(t.TempDir(), "state")
	res := run(t, context.Background(), cfg)
	if res.ExitCode != 0 {
		dump(t, out, errs)
		t.Fatalf("exit %d: %s", res.ExitCode, res.Reason)
	}
	want := []string{
		fmt.Sprintf("[r0] proc=0 nprocs=3 nranks=2 host=hostA job=job-x state=%s launcher=pgas token=32 serve=false table=3\n", cfg.StateDir),
		fmt.Sprintf("[r1] proc=1 nprocs=3 nranks=2 host=hostA job=job-x state=%s launcher=pgas token=32 serve=false table=3\n", cfg.StateDir),
		fmt.Sprintf("[s2] proc=2 nprocs=3 nranks=2 host=hostB job=job-x state=%s launcher=pgas token=32 serve=false table=3\n", cfg.StateDir),
	}
	for _, w := range want {
		if !strings.Contains(out.String(), w) {
			dump(t, out, errs)
			t.Fatalf("stdout lacks %q", w)
		}
	}
	for _, w := range []string{"[r0] stderr line from 0\n", "[r1] stderr line from 1\n", "[s2] stderr line from 2\n",
		"gaspirun: all 2 ranks finished; stopping the 1 remaining process (idle spares)\n",
		"gaspirun: 3 processes (2 ranks + 1 spare): "} {
		if !strings.Contains(errs.String(), w) {
			dump(t, out, errs)
			t.Fatalf("stderr lacks %q", w)
		}
	}
	if fi, err := os.Stat(cfg.StateDir); err != nil || !fi.IsDir() {
		t.Errorf("state dir not created: %v", err)
	}
	if p := res.Procs[2]; !p.Stopped || p.Label != "s2" || p.Host != "hostB" {
		t.Errorf("spare result %+v", p)
	}
	if !strings.Contains(res.Summary, "exit 0; wall time") {
		t.Errorf("summary %q", res.Summary)
	}
}

// --tls: the rendezvous speaks TLS (the processes registered through it)
// and every process gets PGAS_TLS=1; so does PGAS_TLS=1 in gaspirun's
// environment, and another value there is an error naming it.
func TestTLSReachesProcesses(t *testing.T) {
	for _, how := range []string{"flag", "env"} {
		cfg, out, errs := jobConfig("env", 2, 1)
		switch how {
		case "flag":
			cfg.TLS = true
		case "env":
			cfg.LookupEnv = func(k string) (string, bool) {
				if k == "PGAS_TLS" {
					return "1", true
				}
				return os.LookupEnv(k)
			}
		}
		res := run(t, context.Background(), cfg)
		if res.ExitCode != 0 {
			dump(t, out, errs)
			t.Fatalf("%s: exit %d: %s", how, res.ExitCode, res.Reason)
		}
		for _, w := range []string{"[r0] tls=true\n", "[r1] tls=true\n", "[s2] tls=true\n"} {
			if !strings.Contains(out.String(), w) {
				dump(t, out, errs)
				t.Fatalf("%s: stdout lacks %q", how, w)
			}
		}
	}
	cfg, _, _ := jobConfig("env", 1, 0)
	cfg.LookupEnv = func(k string) (string, bool) {
		if k == "PGAS_TLS" {
			return "yes", true
		}
		return os.LookupEnv(k)
	}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "PGAS_TLS yes") {
		t.Fatalf("PGAS_TLS=yes: %v, want an error naming it", err)
	}
}

func TestFailingRankTearsDownAndPropagatesCode(t *testing.T) {
	cfg, out, errs := jobConfig("exit3", 3, 0)
	cfg.Quiet = true
	res := run(t, context.Background(), cfg)
	if res.ExitCode != 3 {
		dump(t, out, errs)
		t.Fatalf("exit %d, want 3", res.ExitCode)
	}
	for _, w := range []string{"gaspirun: job failed: rank 1 (process 1) exited with code 3; stopping the other 2 processes\n"} {
		if !strings.Contains(errs.String(), w) {
			dump(t, out, errs)
			t.Fatalf("stderr lacks %q", w)
		}
	}
	if !strings.Contains(out.String(), "[r1] rank 1 failing\n") {
		dump(t, out, errs)
		t.Fatal("rank 1's output missing")
	}
	if strings.Contains(errs.String(), "wall time") {
		t.Errorf("--quiet printed the summary:\n%s", errs)
	}
	for _, p := range res.Procs {
		if p.Proc != 1 && !p.Stopped {
			t.Errorf("process %d not stopped: %+v", p.Proc, p)
		}
	}
}

var grandchildRE = regexp.MustCompile(`grandchild (\d+)`)

func grandchildren(t *testing.T, out string) []int {
	var pids []int
	for _, m := range grandchildRE.FindAllStringSubmatch(out, -1) {
		pid, _ := strconv.Atoi(m[1])
		pids = append(pids, pid)
	}
	return pids
}

func TestTimeoutLeavesNothingBehind(t *testing.T) {
	cfg, out, errs := jobConfig("hang", 2, 1)
	cfg.Timeout = 5 * time.Second
	cfg.Grace = 300 * time.Millisecond
	start := time.Now()
	res := run(t, context.Background(), cfg)
	if res.ExitCode != ExitTimeout || !res.TimedOut {
		dump(t, out, errs)
		t.Fatalf("exit %d (timed out %v), want %d", res.ExitCode, res.TimedOut, ExitTimeout)
	}
	if d := time.Since(start); d > 15*time.Second {
		t.Errorf("took %v", d)
	}
	// Every process normally starts its grandchild within the timeout; on
	// a machine too busy for that, the ones that did are checked.
	gc := grandchildren(t, out.String())
	if len(gc) == 0 {
		dump(t, out, errs)
		t.Fatal("no process started its grandchild before the timeout")
	}
	if len(gc) < 3 {
		t.Logf("only %d of 3 processes started their grandchild before the timeout", len(gc))
	}
	// The children ignore SIGTERM: only the SIGKILL after the grace ends them,
	// and killing the process group takes the grandchildren too.
	waitGone(t, gc)
	if !strings.Contains(errs.String(), "timeout: the job ran longer than --timeout 5s; stopping the other 3 processes") {
		dump(t, out, errs)
		t.Fatal("no timeout message")
	}
}

func TestInterruptTearsDown(t *testing.T) {
	cfg, out, errs := jobConfig("hang", 2, 0)
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	go func() {
		if out.waitCount("ready", 2, 30*time.Second) {
			cancel(&Interrupt{Signal: syscall.SIGINT})
		}
	}()
	res := run(t, ctx, cfg)
	if res.ExitCode != ExitInterrupted || !res.Interrupted {
		dump(t, out, errs)
		t.Fatalf("exit %d, want %d", res.ExitCode, ExitInterrupted)
	}
	waitGone(t, grandchildren(t, out.String()))
	if !strings.Contains(errs.String(), "interrupted by SIGINT") {
		dump(t, out, errs)
		t.Fatal("no interrupt message")
	}
}

func TestSpareTakesOverAfterDeath(t *testing.T) {
	cfg, out, errs := jobConfig("promote", 2, 1)
	res := run(t, context.Background(), cfg)
	if res.ExitCode != 0 {
		dump(t, out, errs)
		t.Fatalf("exit %d: %s", res.ExitCode, res.Reason)
	}
	// The death is normally seen before the promotion; if the promotion
	// wins the race, the death is that of a replaced process. Either way
	// the user is told which rank's process died and that the job goes on.
	died := regexp.MustCompile(`gaspirun: (rank 1 \(process 1\)|process 1 \(formerly rank 1\)) was killed by signal 9 \(SIGKILL\).*; the job continues`)
	if !died.MatchString(errs.String()) || !strings.Contains(errs.String(), "gaspirun: spare process 2 now holds rank 1 (epoch 1)") {
		dump(t, out, errs)
		t.Fatal("death or promotion not reported")
	}
	if p := res.Procs[2]; p.Label != "r1" || p.Code != 0 || p.Stopped {
		t.Errorf("promoted spare %+v", p)
	}
}

func TestDeathAbortsWithoutSpares(t *testing.T) {
	cfg, out, errs := jobConfig("promote", 2, 0)
	res := run(t, context.Background(), cfg)
	if res.ExitCode != 128+9 {
		dump(t, out, errs)
		t.Fatalf("exit %d, want 137", res.ExitCode)
	}
	// The verdict, once: not again in the summary.
	if !strings.Contains(errs.String(), "gaspirun: job failed: rank 1 (process 1) was killed by signal 9 (SIGKILL)") ||
		strings.Count(errs.String(), "was killed by signal 9") != 1 {
		dump(t, out, errs)
		t.Fatal("no death message")
	}
}

// TestLauncherKilledLeavesProcessesRunning kills a launcher (another process)
// with SIGKILL: its processes are not signalled, notice the loss of the
// rendezvous, survive writing to their broken output pipes, and end when
// the job is done.
func TestLauncherKilledLeavesProcessesRunning(t *testing.T) {
	dir := t.TempDir()
	launcher := exec.Command(os.Args[0])
	launcher.Env = append(os.Environ(), roleVar+"=launcher", dirVar+"="+dir, noRaceExitDelay)
	var lout bytes.Buffer
	launcher.Stdout, launcher.Stderr = &lout, &lout
	if err := launcher.Start(); err != nil {
		t.Fatal(err)
	}
	pids := make([]int, 2)
	deadline := time.Now().Add(30 * time.Second)
	for p := range pids {
		for {
			b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("pid.%d", p)))
			if err == nil && len(b) > 0 {
				pids[p], _ = strconv.Atoi(string(b))
				break
			}
			if time.Now().After(deadline) {
				launcher.Process.Kill()
				launcher.Wait()
				t.Fatalf("process %d never started; launcher output:\n%s", p, lout.String())
			}
			time.Sleep(10 * time.Millisecond) // real processes: poll with a deadline
		}
	}
	t.Cleanup(func() {
		for _, pid := range pids {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	launcher.Process.Signal(syscall.SIGKILL)
	launcher.Wait()
	for p := range pids {
		for {
			if _, err := os.Stat(filepath.Join(dir, fmt.Sprintf("lost.%d", p))); err == nil {
				break
			}
			if !alive(pids[p]) {
				t.Fatalf("process %d died with its launcher", p)
			}
			if time.Now().After(deadline) {
				t.Fatalf("process %d did not notice the launcher's death", p)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if !alive(pids[p]) {
			t.Fatalf("process %d died after writing to its broken stdout", p)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "stop"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitGone(t, pids)
}

func TestRunStartErrors(t *testing.T) {
	cfg, _, _ := jobConfig("env", 1, 0)
	cfg.Ranks = 0
	if _, err := Run(context.Background(), cfg); !errors.Is(err, ErrConfig) {
		t.Errorf("bad config: %v", err)
	}
	cfg.Ranks = 1
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, nil, 0o644)
	cfg.StateDir = filepath.Join(file, "state")
	if _, err := Run(context.Background(), cfg); !errors.Is(err, ErrStart) || !strings.Contains(err.Error(), "--state-dir") {
		t.Errorf("state dir under a file: %v", err)
	}
}
