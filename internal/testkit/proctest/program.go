package proctest

// Program runs an application (TeraSort, the key-value programs) as real
// jobs in tests: gaspirun and the program are built once per test binary, and
// Job runs them with ranks and spares and returns the exit status and
// output.

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// JobTimeout bounds one job (gaspirun --timeout): generous for a busy
// 2-core host, where these jobs take a second or two.
const JobTimeout = 90 * time.Second

// Program builds gaspirun and one program.
type Program struct {
	Pkg string // the program's package, module-relative ("./apps/wordcount/cmd/wordcount")

	once sync.Once
	dir  string
	err  error
	done func()
}

// Build returns the paths of gaspirun and the program, building them on
// the first call; it skips the test without Linux or under -short.
func (b *Program) Build(t *testing.T) (gaspirun, prog string) {
	t.Helper()
	if runtime.GOOS != "linux" || testing.Short() {
		t.Skip("real-process tests need Linux and no -short")
	}
	b.once.Do(func() {
		b.dir, b.done, b.err = Build(filepath.Base(b.Pkg), false, "./cmd/gaspirun", b.Pkg)
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return filepath.Join(b.dir, "gaspirun"), filepath.Join(b.dir, filepath.Base(b.Pkg))
}

// Cleanup removes the binaries (call from TestMain after m.Run).
func (b *Program) Cleanup() {
	if b.done != nil {
		b.done()
	}
}

// Job runs gaspirun -n ranks --spares spares -- PROG args... and returns
// its exit status and combined output.
func (b *Program) Job(t *testing.T, ranks, spares int, args ...string) (int, string) {
	t.Helper()
	gaspirun, prog := b.Build(t)
	full := []string{"-n", fmt.Sprint(ranks), "--spares", fmt.Sprint(spares), "--timeout", JobTimeout.String(), "--grace", "1s", "--", prog}
	return Gaspirun(t, gaspirun, JobTimeout, append(full, args...)...)
}

// Gaspirun runs the launcher with args, bounded by timeout (given to it
// as --timeout) plus 30 s, after which it is stopped (see Job.Stop), and
// returns its exit status (-1 when it could not run) and combined output.
func Gaspirun(t *testing.T, gaspirun string, timeout time.Duration, args ...string) (int, string) {
	t.Helper()
	code, out, wall := runToEnd(timeout+30*time.Second, gaspirun, args...)
	t.Logf("gaspirun %s: exit %d in %v (load %s)", strings.Join(args, " "), code, wall.Round(time.Millisecond), LoadAvg())
	return code, out
}

// Run runs the program alone (no gaspirun) and returns its exit status
// and combined output.
func (b *Program) Run(t *testing.T, args ...string) (int, string) {
	t.Helper()
	_, prog := b.Build(t)
	code, out, _ := runToEnd(JobTimeout, prog, args...)
	return code, out
}

// runToEnd runs one process to its end, bounded by bound, and returns
// its exit status (-1 when it could not start or was killed), combined
// output and run time.
func runToEnd(bound time.Duration, prog string, args ...string) (code int, out string, wall time.Duration) {
	j, err := Start(JobConfig{Bound: bound}, exec.Command(prog, args...))
	if err != nil {
		return -1, err.Error(), 0
	}
	j.Wait(context.Background()) // the bound ends it
	_, _, end, _ := j.Procs()[0].Exit()
	return j.ExitCode(), j.Output(), end.Sub(j.Begin())
}

// RankZeroLines returns the lines of log that rank 0 printed (without "[r0] ")
// and that match re.
func RankZeroLines(log string, re *regexp.Regexp) []string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if s, ok := strings.CutPrefix(l, "[r0] "); ok && re.MatchString(s) {
			out = append(out, s)
		}
	}
	return out
}

// LastLine returns the last line of out.
func LastLine(out string) string {
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	return lines[len(lines)-1]
}

// JobResult returns rank 0's one line matching re in a job's log, failing
// the test unless the job exited 0 with exactly one such line.
func JobResult(t *testing.T, code int, log string, re *regexp.Regexp) string {
	t.Helper()
	lines := RankZeroLines(log, re)
	if code != 0 || len(lines) != 1 {
		t.Fatalf("exit %d, result lines %q, want exit 0 and one\n%s", code, lines, log)
	}
	return lines[0]
}

// Reference runs the program alone with args and returns its last line,
// which must match re.
func (b *Program) Reference(t *testing.T, re *regexp.Regexp, args ...string) string {
	t.Helper()
	code, out := b.Run(t, args...)
	if code != 0 || !re.MatchString(LastLine(out)) {
		t.Fatalf("%v: exit %d: %s", args, code, out)
	}
	return LastLine(out)
}

// LogContains fails the test unless log contains every string of want.
func LogContains(t *testing.T, log string, want ...string) {
	t.Helper()
	for _, s := range want {
		if !strings.Contains(log, s) {
			t.Fatalf("the log lacks %q\n%s", s, log)
		}
	}
}

// Usage checks that the program run with args exits 2 with a message
// containing want.
func (b *Program) Usage(t *testing.T, want string, args ...string) {
	t.Helper()
	code, out := b.Run(t, args...)
	if code != 2 || !strings.Contains(out, want) {
		t.Errorf("%v: exit %d, %q; want exit 2 and %q", args, code, out, want)
	}
}
