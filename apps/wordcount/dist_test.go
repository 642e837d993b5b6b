package wordcount

// Real-process tests: gaspirun and wordcount run as jobs of 3 ranks.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
)

var bins = proctest.Program{Pkg: "./apps/wordcount/cmd/wordcount"}

func TestMain(m *testing.M) {
	code := m.Run()
	bins.Cleanup()
	os.Exit(code)
}

var resultRE = regexp.MustCompile(`^words=\d+ total=\d+ digest=[0-9a-f]{16}$`)

// rawCauseRE finds a recovery line that shows an error chain instead of
// saying the cause in words (recovery.Brief).
var rawCauseRE = regexp.MustCompile(`\] recovery: [^\n]*(pgas|kvshuffle|ckpt|shm|tcp): `)

// The job's answer equals the one-process reference, without and with a
// SIGKILL of a rank (a reducer, half-way through its lines), on
// generated text and on a file.
func TestWordCountKill(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "text")
	if code, out := bins.Run(t, "gen", "--generate", "12000", "--seed", "5", "--out", text); code != 0 {
		t.Fatalf("gen: exit %d: %s", code, out)
	}
	// A line with no newline at the end, and words of other scripts.
	f, _ := os.OpenFile(text, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("Ünïcode WORDS, Ünicode-words 日本語")
	f.Close()
	want := bins.Reference(t, resultRE, "ref", "--in", text)
	args := []string{"run", "--in", text, "--ckpts", "6", "--reducers", "2", "--out", filepath.Join(dir, "out")}
	if code, log := bins.Job(t, 3, 0, args...); proctest.JobResult(t, code, log, resultRE) != want {
		t.Fatalf("failure-free job: %q, reference %q", proctest.JobResult(t, code, log, resultRE), want)
	}
	code, log := bins.Job(t, 3, 1, append(args, "--inject", "kill:rank=1,at=0.5", "--check")...)
	if got := proctest.JobResult(t, code, log, resultRE); got != want {
		t.Fatalf("job with a kill: %q, reference %q\n%s", got, want, log)
	}
	proctest.LogContains(t, log, "[r1] inject: SIGKILL rank 1", "restored checkpoint", "[r0] reference: match")
	if raw := rawCauseRE.FindString(log); raw != "" {
		t.Errorf("a recovery line shows the error chain: %q\n%s", raw, log)
	}
	// Key routing: the table is checkpointed before anything is sent, so
	// the recovered ranks route alike.
	// With one runnable rank per host too: the killed rank held a slot,
	// which its death frees.
	code, log = bins.Job(t, 3, 1, append(args, "--route", "--runnable", "1", "--runnable-dir", filepath.Join(dir, "slots"), "--inject", "kill:rank=2,at=0.6", "--check")...)
	if got := proctest.JobResult(t, code, log, resultRE); got != want {
		t.Fatalf("routed job with a kill: %q, reference %q\n%s", got, want, log)
	}
	proctest.LogContains(t, log, "[r0] route: ", "[r2] inject: SIGKILL rank 2", "[r0] reference: match")
	// The part files hold every word once, with the counts summing up.
	var total int
	for _, p := range []string{"part-00000", "part-00001"} {
		b, err := os.ReadFile(filepath.Join(dir, "out", p))
		if err != nil {
			t.Fatal(err)
		}
		total += strings.Count(string(b), "\n")
	}
	if wantWords := strings.Fields(strings.ReplaceAll(want, "=", " "))[1]; wantWords != strconv.Itoa(total) {
		t.Fatalf("the part files list %d words, the result %s", total, wantWords)
	}
}

// Bad flags are refused with exit status 2 and a message naming the flag.
// A rank killed in the setup, while the others create the checkpointer's
// segments (kvjob.Start, ckpt.New): they recover, the spare joins, and
// the answer is the reference's.
func TestWordCountKillDuringSetup(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "text")
	if code, out := bins.Run(t, "gen", "--generate", "3000", "--seed", "7", "--out", text); code != 0 {
		t.Fatalf("gen: exit %d: %s", code, out)
	}
	want := bins.Reference(t, resultRE, "ref", "--in", text)
	code, log := bins.Job(t, 3, 1, "run", "--in", text, "--ckpts", "3", "--reducers", "2", "--out", filepath.Join(dir, "out"),
		"--inject", "kill:rank=1,phase=ckpt-new", "--check")
	if got := proctest.JobResult(t, code, log, resultRE); got != want {
		t.Fatalf("job with a kill in the setup: %q, reference %q\n%s", got, want, log)
	}
	proctest.LogContains(t, log, "[r1] inject: SIGKILL rank 1", "before the checkpointer's creation", "restored checkpoint 0", "[r0] reference: match")
}

func TestWordCountUsage(t *testing.T) {
	bins.Usage(t, "--in FILE or --generate", "run")
	bins.Usage(t, "fraction", "run", "--generate", "10", "--inject", "kill:rank=1,at=2")
	bins.Usage(t, "give rank=R and at=N", "run", "--generate", "10", "--inject", "kill:rank=1")
	bins.Usage(t, "--in", "run", "--in", "/nonexistent/x")
	bins.Usage(t, "unknown command", "frob")
}

// memoryCgroup creates a cgroup-v1 memory cgroup limited to limit bytes,
// or skips the test saying what is missing.
func memoryCgroup(t *testing.T, limit int64) string {
	t.Helper()
	root := "/sys/fs/cgroup/memory"
	if _, err := os.Stat(filepath.Join(root, "memory.limit_in_bytes")); err != nil {
		t.Skipf("needs the cgroup v1 memory controller at %s: %v", root, err)
	}
	dir := filepath.Join(root, fmt.Sprintf("gaspigo-wordcount-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("needs to create a memory cgroup (root): %v", err)
	}
	t.Cleanup(func() { os.Remove(dir) })
	if err := os.WriteFile(filepath.Join(dir, "memory.limit_in_bytes"), []byte(strconv.FormatInt(limit, 10)), 0); err != nil {
		t.Skipf("cannot set a memory limit: %v", err)
	}
	return dir
}

// BDMPI's bounded runnable ranks: under a memory limit that three ranks
// holding their shares at once exceed, the plain job is killed by the
// kernel, and with --runnable 1 (one rank of the host maps at a time,
// the others wait with their shares dropped) it ends with the reference
// answer.
func TestWordCountRunnableUnderMemoryLimit(t *testing.T) {
	cg := memoryCgroup(t, 220<<20)
	text := filepath.Join(t.TempDir(), "text")
	if code, out := bins.Run(t, "gen", "--generate", "1200000", "--out", text); code != 0 {
		t.Fatalf("gen: exit %d: %s", code, out)
	}
	want := bins.Reference(t, resultRE, "ref", "--in", text)
	gaspirun, prog := bins.Build(t)
	job := func(runnable string) (int, string) {
		// The shell joins the cgroup, then becomes gaspirun: every
		// process of the job is in it.
		script := fmt.Sprintf(`echo $$ > %s/cgroup.procs && exec "$@"`, cg)
		cmd := exec.Command("sh", "-c", script, "sh", gaspirun, "-n", "3", "--timeout", proctest.JobTimeout.String(), "--grace", "1s", "--",
			prog, "run", "--in", text, "--memory", "8388608", "--runnable", runnable)
		out, _ := cmd.CombinedOutput()
		t.Logf("--runnable %s: exit %d (load %s)", runnable, cmd.ProcessState.ExitCode(), proctest.LoadAvg())
		return cmd.ProcessState.ExitCode(), string(out)
	}
	if code, log := job("0"); code == 0 || !strings.Contains(log, "killed by signal 9") {
		t.Fatalf("without --runnable: exit %d, want the kernel to kill a rank (the limit is below the ranks' need)\n%s", code, log)
	}
	code, log := job("1")
	if got := proctest.JobResult(t, code, log, resultRE); got != want {
		t.Fatalf("--runnable 1 under the limit: %q, reference %q", got, want)
	}
	proctest.LogContains(t, log, "slot_wait=")
}
