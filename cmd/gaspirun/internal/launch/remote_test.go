package launch

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
)

func TestSSHOutputEnvAndNoTokenAnywhere(t *testing.T) {
	since := time.Now().Add(-time.Second)
	cfg, out, errs, dir := remoteJob(t, "hold", 2, 1, 2, 1)
	cfg.StateDir = filepath.Join(dir, "state")
	type result struct {
		res Result
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := Run(context.Background(), cfg)
		done <- result{res, err}
	}()
	if !out.waitCount("ready", 3, 30*time.Second) {
		dump(t, out, errs)
		t.Fatal("the processes did not start")
	}
	pid := readPid(t, dir, "pid.0")
	token, _ := proctest.EnvOf(pid, "PGAS_TOKEN")
	if len(token) < 32 {
		t.Fatalf("token %q", token)
	}
	// While everything runs: no argv holds the token (ssh clients, remote
	// sides, programs), and no file does.
	if hits := proctest.ArgvsWith(token); len(hits) > 0 {
		t.Errorf("the token is in argvs:\n%s", strings.Join(hits, "\n"))
	}
	// This test's files (state directory, hostfile, connector records)
	// and whatever landed right in the temporary directory.
	for _, root := range []string{os.TempDir(), filepath.Dir(dir), cfg.StateDir} {
		if hits := proctest.FilesWith(root, token, since, root != os.TempDir()); len(hits) > 0 {
			t.Errorf("the token is in files: %v", hits)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "stop"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.res.ExitCode != 0 {
		dump(t, out, errs)
		t.Fatalf("exit %d: %s", r.res.ExitCode, r.res.Reason)
	}
	for _, w := range []string{"[r0] ready\n", "[r1] ready\n", "[s2] ready\n"} {
		if !strings.Contains(out.String(), w) {
			dump(t, out, errs)
			t.Fatalf("stdout lacks %q", w)
		}
	}
	if strings.Contains(out.String(), "gaspirun-status") || strings.Contains(errs.String(), "gaspirun-status") {
		dump(t, out, errs)
		t.Fatal("a status line leaked into the output")
	}
	for _, w := range []string{"gaspirun: ssh launch, rendezvous 127.0.0.1:", "placement: h0: r0-1; h1: s2",
		"gaspirun: warning: the spares cannot cover the loss of h0 (2 ranks, 1 spare elsewhere)",
		"gaspirun: all 2 ranks finished; stopping the 1 remaining process (idle spares)"} {
		if !strings.Contains(errs.String(), w) {
			dump(t, out, errs)
			t.Fatalf("stderr lacks %q", w)
		}
	}
	if p := r.res.Procs[2]; p.Host != "h1" || !p.Stopped {
		t.Errorf("spare %+v", p)
	}
	// ssh got its options, the host, and a remote command without secrets.
	argv, err := os.ReadFile(filepath.Join(dir, "fakessh.h1.argv"))
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Split(string(argv), "\x00")
	want := append(append([]string{}, sshOptions...), "h1", "exec "+shellJoin(cfg.RemoteCommand))
	if got := args[1:]; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("ssh argv %q, want %q", got, want)
	}
	waitNoRemoteSides(t)
}

func TestSSHKilledRankRecoveredBySpare(t *testing.T) {
	cfg, out, errs, _ := remoteJob(t, "promote", 2, 1, 1, 1, 1)
	res := run(t, context.Background(), cfg)
	if res.ExitCode != 0 {
		dump(t, out, errs)
		t.Fatalf("exit %d: %s", res.ExitCode, res.Reason)
	}
	// The remote side reports the kill, whichever comes first: the death
	// (reported) or the promotion and the end of the job.
	if p := res.Procs[1]; p.Signal != syscall.SIGKILL {
		t.Errorf("rank 1's process %+v: want killed by SIGKILL", p)
	}
	if !strings.Contains(errs.String(), "gaspirun: spare process 2 on h2 now holds rank 1 (epoch 1)") {
		dump(t, out, errs)
		t.Fatal("promotion not reported")
	}
	// A line is labelled when it reaches gaspirun: after a relabel, the
	// process's new role.
	if !regexp.MustCompile(`\[(r1|s2)\] promoted\n`).MatchString(out.String()) || !regexp.MustCompile(`\[(r1|p1)\] dying\n`).MatchString(out.String()) {
		dump(t, out, errs)
		t.Fatal("output lacks the prefixed lines")
	}
	waitNoRemoteSides(t)
}

func TestSSHTimeoutLeavesNothingBehind(t *testing.T) {
	cfg, out, errs, _ := remoteJob(t, "hang", 2, 1, 1, 1, 1)
	cfg.Timeout = 8 * time.Second
	cfg.Grace = 300 * time.Millisecond
	res := run(t, context.Background(), cfg)
	if res.ExitCode != ExitTimeout || !res.TimedOut {
		dump(t, out, errs)
		t.Fatalf("exit %d (timed out %v), want %d", res.ExitCode, res.TimedOut, ExitTimeout)
	}
	// The programs ignore SIGTERM; the SIGKILL after the grace ends them
	// and, through their process groups, their grandchildren.
	gc := grandchildren(t, out.String())
	self := regexp.MustCompile(`self (\d+)`).FindAllStringSubmatch(out.String(), -1)
	// Every program normally starts within the timeout; on a machine too
	// busy for that, the ones that did are checked, and the remote sides
	// of the others must be gone too.
	if len(gc) == 0 {
		dump(t, out, errs)
		t.Fatal("no program started before the timeout")
	}
	if len(gc) < 3 {
		t.Logf("only %d of 3 programs started before the timeout", len(gc))
	}
	for _, m := range self {
		var pid int
		fmt.Sscan(m[1], &pid)
		gc = append(gc, pid)
	}
	waitGone(t, gc)
	waitNoRemoteSides(t)
	for _, p := range res.Procs {
		if !p.Stopped || p.Signal != syscall.SIGKILL || p.Label == "" {
			t.Errorf("process %+v: want stopped by SIGKILL", p)
		}
	}
}

func TestSSHDroppedConnectionLeavesNothingBehind(t *testing.T) {
	cfg, out, errs, dir := remoteJob(t, "drop", 2, 1, 1, 1, 1)
	done := make(chan Result, 1)
	go func() {
		res, err := Run(context.Background(), cfg)
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	victim := readPid(t, dir, "pid.1")
	client := readPid(t, dir, "fakessh.h1.pid")
	// Cut rank 1's connection: its remote side sees its stdin end and
	// kills the program; gaspirun gets no status and counts it as lost.
	syscall.Kill(client, syscall.SIGKILL)
	waitGone(t, []int{victim})
	var res Result
	select {
	case res = <-done:
	case <-time.After(60 * time.Second):
		dump(t, out, errs)
		t.Fatal("the job did not end")
	}
	if res.ExitCode != 0 {
		dump(t, out, errs)
		t.Fatalf("exit %d: %s", res.ExitCode, res.Reason)
	}
	lost := regexp.MustCompile(`gaspirun: (rank 1 \(process 1 on h1\)|process 1 on h1 \(formerly rank 1\)) was lost: ssh to h1 was killed by signal 9 \(SIGKILL\) without the process's exit status`)
	if !lost.MatchString(errs.String()) || !strings.Contains(errs.String(), "now holds rank 1") {
		dump(t, out, errs)
		t.Fatal("loss or promotion not reported")
	}
	waitNoRemoteSides(t)
}

func TestSlurmKilledTaskRecoveredBySpare(t *testing.T) {
	dir := t.TempDir()
	fakeSlurm(t, dir)
	cfg, out, errs := jobConfig("promote", 2, 1)
	cfg.Launcher = LauncherAuto
	cfg.RemoteCommand = []string{os.Args[0], "--remote-exec"}
	cfg.Env = append(cfg.Env, dirVar+"="+dir)
	slurm := map[string]string{"SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "node[1-3]", "SLURM_TASKS_PER_NODE": "1(x3)"}
	cfg.LookupEnv = func(k string) (string, bool) { v, ok := slurm[k]; return v, ok }
	res := run(t, context.Background(), cfg)
	if res.ExitCode != 0 {
		dump(t, out, errs)
		t.Fatalf("exit %d: %s", res.ExitCode, res.Reason)
	}
	if !strings.Contains(errs.String(), "gaspirun: slurm launch, rendezvous 127.0.0.1:") ||
		!strings.Contains(errs.String(), "placement: node1: r0; node2: r1; node3: s2") ||
		!strings.Contains(errs.String(), "spare process 2 on node3 now holds rank 1") {
		dump(t, out, errs)
		t.Fatal("launch or promotion not reported")
	}
	if p := res.Procs[1]; p.Signal != syscall.SIGKILL || p.Host != "node2" {
		t.Errorf("rank 1's process %+v: want killed by SIGKILL on node2", p)
	}
	// One step for the whole job (cmd/gaspirun, slurm), its tasks on the
	// placement's nodes.
	argv, err := os.ReadFile(filepath.Join(dir, "fakesrun.argv"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"--ntasks=3", "--distribution=arbitrary", "--kill-on-bad-exit=0", "--no-kill", "--input=all", "--label", os.Args[0], "--remote-exec"}
	if got := strings.Split(string(argv), "\x00")[1:]; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("srun argv %q, want %q", got, want)
	}
	// Process 1 says it is dying as it is replaced: its line carries rank
	// 1's prefix, or, once gaspirun has seen the replacement, the
	// process's own ([p1]); which one depends on timing.
	if !regexp.MustCompile(`\[(r1|p1)\] dying\n`).MatchString(out.String()) || !regexp.MustCompile(`\[(s2|r1)\] promoted\n`).MatchString(out.String()) {
		dump(t, out, errs)
		t.Error("the tasks' output did not reach their processes' prefixes")
	}
	waitNoRemoteSides(t)
}

func TestRemoteStartFailureAbortsBeforeForming(t *testing.T) {
	cfg, out, errs, _ := remoteJob(t, "env", 2, 1, 1, 1, 1)
	cfg.Program = "/nonexistent/program"
	res := run(t, context.Background(), cfg)
	if res.ExitCode != 127 {
		dump(t, out, errs)
		t.Fatalf("exit %d, want 127", res.ExitCode)
	}
	if !strings.Contains(errs.String(), "cannot start process") ||
		!strings.Contains(errs.String(), "gaspirun: job failed: rank 1 (process 1 on h1) exited with code 127; stopping the other 2 processes") &&
			!strings.Contains(errs.String(), "gaspirun: job failed: rank 0 (process 0 on h0) exited with code 127; stopping the other 2 processes") &&
			!strings.Contains(errs.String(), "gaspirun: job failed: spare process 2 on h2 exited with code 127; stopping the other 2 processes") {
		dump(t, out, errs)
		t.Fatal("no start failure reported")
	}
	waitNoRemoteSides(t)
}

// slurmStepJob is a job of this test binary's child modes under the fake
// srun, on node1..node3 with one task each.
func slurmStepJob(t *testing.T, mode string, ranks, spares int) (Config, *watchBuffer, *watchBuffer, string) {
	t.Helper()
	dir := t.TempDir()
	srun := fakeConnector(t, "srun", dir)
	scontrol := filepath.Join(filepath.Dir(srun), "scontrol")
	if err := os.WriteFile(scontrol, []byte("#!/bin/sh\necho \"NodeName=$4 Arch=x86_64 NodeAddr=127.0.0.1 NodeHostName=localhost\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", filepath.Dir(srun)+string(os.PathListSeparator)+os.Getenv("PATH"))
	cfg, out, errs := jobConfig(mode, ranks, spares)
	cfg.Launcher = LauncherSlurm
	cfg.RemoteCommand = []string{os.Args[0], "--remote-exec"}
	cfg.Env = append(cfg.Env, dirVar+"="+dir)
	slurm := map[string]string{"SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "node[1-3]", "SLURM_TASKS_PER_NODE": "1(x3)"}
	cfg.LookupEnv = func(k string) (string, bool) { v, ok := slurm[k]; return v, ok }
	return cfg, out, errs, dir
}

// Rule (cmd/gaspirun, slurm): a task of the step that ends without its
// status (its remote side killed, as when its node dies) is a lost
// process, and a spare takes its rank; the step goes on. Without a
// spare, the job ends as for a killed process.
func TestSlurmStepTaskLost(t *testing.T) {
	t.Run("spare", func(t *testing.T) { testSlurmStepTaskLost(t, 1) })
	t.Run("no spare", func(t *testing.T) { testSlurmStepTaskLost(t, 0) })
}

func testSlurmStepTaskLost(t *testing.T, spares int) {
	cfg, out, errs, dir := slurmStepJob(t, "drop", 2, spares)
	type ran struct{ res Result }
	done := make(chan ran, 1)
	go func() { done <- ran{run(t, context.Background(), cfg)} }()
	if !out.waitCount("[r1] ready\n", 1, 30*time.Second) {
		dump(t, out, errs)
		t.Fatal("rank 1 never got ready")
	}
	syscall.Kill(readPid(t, dir, "fakesrun.task.1.pid"), syscall.SIGKILL)
	var res Result
	select {
	case r := <-done:
		res = r.res
	case <-time.After(60 * time.Second):
		t.Fatal("the job did not end")
	}
	if spares == 0 {
		if res.ExitCode != 128+9 || !strings.Contains(errs.String(), "rank 1 (process 1 on node2) was lost: srun: srun: error: node2: task 1: Killed") {
			dump(t, out, errs)
			t.Fatalf("exit %d: %s", res.ExitCode, res.Reason)
		}
		waitNoRemoteSides(t)
		return
	}
	// srun's word on the task comes first; the task counts as lost a grace
	// period later unless its status follows (it travels on stdout), so
	// the spare's promotion may come before or after.
	if res.ExitCode != 0 || !strings.Contains(errs.String(), "gaspirun: srun: error: node2: task 1: Killed") ||
		!strings.Contains(errs.String(), "spare process 2 on node3 now holds rank 1") {
		dump(t, out, errs)
		t.Fatalf("exit %d: %s", res.ExitCode, res.Reason)
	}
	waitNoRemoteSides(t)
}

// Rule (cmd/gaspirun, slurm): a process that fails tears the step down
// through "signal N LIST" lines, and gaspirun exits with its code.
func TestSlurmStepTeardown(t *testing.T) {
	cfg, out, errs, _ := slurmStepJob(t, "exit3", 2, 1)
	res := run(t, context.Background(), cfg)
	if res.ExitCode != 3 || !strings.Contains(errs.String(), "rank 1 (process 1 on node2) exited with code 3; stopping the other 2 processes") {
		dump(t, out, errs)
		t.Fatalf("exit %d: %s", res.ExitCode, res.Reason)
	}
	for _, p := range res.Procs {
		if p.Proc != 1 && (!p.Stopped || p.Signal != syscall.SIGTERM) {
			t.Errorf("process %d: %+v; want stopped by SIGTERM", p.Proc, p)
		}
	}
	waitNoRemoteSides(t)
}

// fakeSlurm puts a fake srun and scontrol first on PATH: Slurm knows
// where its nodes are; here they are all this machine.
func fakeSlurm(t *testing.T, dir string) {
	t.Helper()
	srun := fakeConnector(t, "srun", dir)
	scontrol := filepath.Join(filepath.Dir(srun), "scontrol")
	if err := os.WriteFile(scontrol, []byte("#!/bin/sh\necho \"NodeName=$4 Arch=x86_64 NodeAddr=127.0.0.1 NodeHostName=localhost\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", filepath.Dir(srun)+string(os.PathListSeparator)+os.Getenv("PATH"))
}

func TestSplitCommandAndShellJoin(t *testing.T) {
	cases := []struct {
		in   string
		want []string
	}{
		{"ssh", []string{"ssh"}},
		{"  ssh -p 2222\t-i key ", []string{"ssh", "-p", "2222", "-i", "key"}},
		{`ssh -i "my key" -o 'ProxyJump=a b'`, []string{"ssh", "-i", "my key", "-o", "ProxyJump=a b"}},
		{`a\ b "x\"y" ''`, []string{"a b", `x"y`, ""}},
	}
	for _, c := range cases {
		got, err := SplitCommand(c.in)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%q: got %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{`ssh "x`, `ssh 'x`} {
		if _, err := SplitCommand(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	// shellJoin survives a real shell, whatever the bytes.
	args := []string{"plain", "with space", "it's", `"dq"`, "$HOME", "a;b", "", "*", "ü"}
	out, err := exec.Command("/bin/sh", "-c", "printf '%s\\n' "+shellJoin(args)).Output()
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n"); !reflect.DeepEqual(got, args) {
		t.Errorf("shell saw %q, want %q", got, args)
	}
}

func TestForwardedEnv(t *testing.T) {
	if got := forwardedEnv([]string{"HOME=/root", "PGAS_LOG=debug", "PGAS_TOKEN=x", "GODEBUG=a=1", "SSH_AUTH_SOCK=/s"}); !reflect.DeepEqual(got, []string{"PGAS_LOG=debug", "GODEBUG=a=1"}) {
		t.Errorf("forwarded %q", got)
	}
}
