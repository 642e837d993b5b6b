package proctest

import (
	"context"
	"errors"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

func needSh(t *testing.T) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("needs Linux")
	}
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("needs sh")
	}
}

// TestJob: lines of every process with their process, in the order each
// wrote them across its two streams; a last line without a newline; exit
// codes and signals; WaitLine after the end.
func TestJob(t *testing.T) {
	needSh(t)
	var seen []string
	j, err := Start(JobConfig{OnLine: func(l Line) { seen = append(seen, l.String()) }},
		exec.Command("sh", "-c", "echo one; echo two >&2; printf three; exit 3"),
		exec.Command("sh", "-c", "exec sleep 60"), // killed below
	)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l, err := j.WaitLine(ctx, func(l Line) bool { return l.Text == "three" })
	if err != nil || l.Proc != 0 {
		t.Fatalf("WaitLine = %+v, %v; want process 0's last line", l, err)
	}
	<-j.Procs()[0].Done()
	if j.Ended() || len(j.Running()) != 1 {
		t.Fatalf("ended %v with %d running, want one process running", j.Ended(), len(j.Running()))
	}
	j.Kill()
	if !j.WaitEnd(time.Minute) {
		t.Fatal("the job did not end after Kill")
	}
	var got []string
	for _, l := range j.Lines() {
		got = append(got, l.String())
	}
	if want := []string{"[p0] one", "[p0] two", "[p0] three"}; !slices.Equal(got, want) || !slices.Equal(seen, want) {
		t.Fatalf("lines %q, seen by OnLine %q; want %q", got, seen, want)
	}
	if code, sig, _, ok := j.Procs()[0].Exit(); !ok || code != 3 || sig != 0 {
		t.Fatalf("process 0: exit %d, signal %v, ended %v; want exit 3", code, sig, ok)
	}
	if code, sig, _, _ := j.Procs()[1].Exit(); code != -1 || sig != syscall.SIGKILL {
		t.Fatalf("process 1: exit %d, signal %v; want -1 and SIGKILL", code, sig)
	}
	if j.ExitCode() != 3 || j.Output() != "one\ntwo\nthree\n" || j.TimedOut() {
		t.Fatalf("ExitCode %d, Output %q, TimedOut %v", j.ExitCode(), j.Output(), j.TimedOut())
	}
	if _, err := j.WaitLine(ctx, func(l Line) bool { return l.Text == "never" }); !errors.Is(err, ErrEnded) {
		t.Fatalf("WaitLine for a line never written after the end: %v, want ErrEnded", err)
	}
}

// TestJobSplitStderrAndBound: stderr apart, and a job that outlives its
// bound is stopped with SIGTERM.
func TestJobSplitStderrAndBound(t *testing.T) {
	needSh(t)
	j, err := Start(JobConfig{SplitStderr: true, Bound: 200 * time.Millisecond},
		exec.Command("sh", "-c", "echo out; echo err >&2; exec sleep 60"))
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	var out, errs []string
	for _, l := range j.Lines() {
		if l.Stderr {
			errs = append(errs, l.Text)
		} else {
			out = append(out, l.Text)
		}
	}
	if !slices.Equal(out, []string{"out"}) || !slices.Equal(errs, []string{"err"}) {
		t.Fatalf("stdout %q, stderr %q", out, errs)
	}
	if _, sig, _, _ := j.Procs()[0].Exit(); sig != syscall.SIGTERM || !j.TimedOut() {
		t.Fatalf("signal %v, TimedOut %v; want SIGTERM and true", sig, j.TimedOut())
	}
}

// TestJobStartFails: a command that cannot start fails Start, and the
// processes started before it are killed.
func TestJobStartFails(t *testing.T) {
	needSh(t)
	first := exec.Command("sh", "-c", "exec sleep 60")
	_, err := Start(JobConfig{}, first, exec.Command("/nonexistent/program"))
	if err == nil || !strings.Contains(err.Error(), "process 1") {
		t.Fatalf("Start = %v, want an error naming process 1", err)
	}
	if first.ProcessState == nil || first.ProcessState.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("the process started first was not killed: %v", first.ProcessState)
	}
}

// TestJobLongLine: a line over 1 MiB is cut at 1 MiB, and the lines after
// it still arrive (the writer never blocks on a full pipe).
func TestJobLongLine(t *testing.T) {
	needSh(t)
	j, err := Start(JobConfig{}, exec.Command("sh", "-c", `head -c 1572864 /dev/zero | tr '\0' x; echo; echo after`))
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	var lens []int
	for _, l := range j.Texts() {
		lens = append(lens, len(l))
	}
	if want := []int{1 << 20, 1572864 - 1<<20, len("after")}; !slices.Equal(lens, want) {
		t.Fatalf("line lengths %v, want %v", lens, want)
	}
}

// Rule: Run returns a command's output, and an error with the output when
// it does not exit 0 or outlives its bound.
func TestRun(t *testing.T) {
	out, err := Run(time.Minute, exec.Command("sh", "-c", "echo out; echo err >&2"))
	if err != nil || out != "out\nerr\n" {
		t.Fatalf("Run = %q, %v", out, err)
	}
	out, err = Run(time.Minute, exec.Command("sh", "-c", "echo why; exit 3"))
	if err == nil || !strings.Contains(err.Error(), "exit 3") || !strings.Contains(err.Error(), "why") || out != "why\n" {
		t.Fatalf("a failing command: %q, %v", out, err)
	}
	if _, err := Run(200*time.Millisecond, exec.Command("sleep", "30")); err == nil || !strings.Contains(err.Error(), "still running") {
		t.Fatalf("a command past its bound: %v", err)
	}
}
