package tcptier

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// jobDeadline bounds every job: generous, for a busy 2-core host.
const jobDeadline = 60 * time.Second

var bins struct {
	gaspirun, prog string
	err            error // why the binaries are missing
}

func TestMain(m *testing.M) {
	os.Exit(proctest.Main(m, "tcptier", proctest.Race, []string{"./cmd/gaspirun", "./test/tcptier/testprog/semantics"}, func(dir string, skip error) {
		bins.err = skip
		bins.gaspirun = filepath.Join(dir, "gaspirun")
		bins.prog = filepath.Join(dir, "semantics")
	}))
}

func needBinaries(t *testing.T) {
	t.Helper()
	if bins.err != nil {
		t.Skip(bins.err)
	}
}

// job is one gaspirun run of the test program.
type job struct {
	t    *testing.T
	run  *proctest.Job
	wall time.Duration // gaspirun's run time, once wait returned

	// Guarded by run's lock (built by read, its OnLine).
	lines  []line       // stdout lines of the processes
	stderr bytes.Buffer // gaspirun's stderr
	pids   map[int]int  // process id (PGAS_PROC) -> OS pid, from PID lines
	extra  []int        // other pids the program reported (children)
}

// line is one output line of a process: "[r1] KIND k=v ... [PASS|FAIL ...]".
type line struct {
	label string // r1, s3, ...
	kind  string
	kv    map[string]string
	rest  string // what follows the key=value pairs (PASS, FAIL reason)
	raw   string
}

func parseLine(raw string) line {
	l := line{raw: raw, kv: map[string]string{}}
	s := raw
	if strings.HasPrefix(s, "[") {
		if i := strings.Index(s, "] "); i > 0 {
			l.label, s = s[1:i], s[i+2:]
		}
	}
	l.kind, s, _ = strings.Cut(s, " ")
	for s != "" {
		tok, rest, _ := strings.Cut(s, " ")
		k, v, ok := strings.Cut(tok, "=")
		if !ok {
			l.rest = s
			break
		}
		if k == "err" { // the last field; quoted, may hold spaces
			if u, err := strconv.Unquote(s[len("err="):]); err == nil {
				v = u
			} else {
				v = s[len("err="):]
			}
			l.kv[k] = v
			break
		}
		l.kv[k] = v
		s = rest
	}
	return l
}

func (l line) int(key string) int {
	v, err := strconv.Atoi(l.kv[key])
	if err != nil {
		return -1
	}
	return v
}

// startJob runs gaspirun with flags, then the test program with args.
func startJob(t *testing.T, flags []string, args ...string) *job {
	t.Helper()
	needBinaries(t)
	argv := append(append(append([]string{}, flags...), "--", bins.prog), args...)
	cmd := exec.Command(bins.gaspirun, argv...)
	cmd.WaitDelay = 15 * time.Second
	if proctest.Race {
		// The race runtime sleeps 1 s at every exit by default; gaspirun
		// passes the variable on to the processes.
		cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=50")
	}
	j := &job{t: t, pids: map[int]int{}}
	run, err := proctest.Start(proctest.JobConfig{OnLine: j.read, SplitStderr: true, Bound: jobDeadline}, cmd)
	if err != nil {
		t.Fatalf("start gaspirun: %v", err)
	}
	j.run = run
	t.Cleanup(func() { j.cleanup() })
	return j
}

// read takes one line: stdout lines are parsed, stderr kept as text;
// run's lock is held.
func (j *job) read(pl proctest.Line) {
	if pl.Stderr {
		j.stderr.WriteString(pl.Text + "\n")
		return
	}
	l := parseLine(pl.Text)
	switch l.kind {
	case "PID":
		j.pids[l.int("proc")] = l.int("pid")
	case "CHILD", "SLEEPER":
		j.extra = append(j.extra, l.int("pid"))
	}
	j.lines = append(j.lines, l)
}

// waitLines waits until count lines of the given kind match (nil: all of
// that kind) and returns them. It fails the test when the job ends first
// or after d.
func (j *job) waitLines(kind string, match func(line) bool, count int, d time.Duration) []line {
	j.t.Helper()
	var got []line
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	ok := j.run.WaitCond(ctx, func() bool {
		got = got[:0]
		for _, l := range j.lines {
			if l.kind == kind && (match == nil || match(l)) {
				got = append(got, l)
			}
		}
		return len(got) >= count
	})
	if !ok && j.run.Ended() {
		j.t.Fatalf("the job ended with %d of %d %s lines", len(got), count, kind)
	}
	if !ok {
		j.t.Fatalf("%d of %d %s lines after %v", len(got), count, kind, d)
	}
	return got
}

// wait waits for gaspirun to exit and returns its exit code.
func (j *job) wait() int {
	j.t.Helper()
	j.run.Wait(context.Background()) // the job's bound (jobDeadline) bounds this
	p := j.run.Procs()[0]
	_, _, end, _ := p.Exit()
	j.wall = end.Sub(j.run.Begin())
	var ee *exec.ExitError
	if err := p.Err(); err != nil && !errors.As(err, &ee) {
		j.t.Fatalf("gaspirun: %v", err)
	}
	return j.run.ExitCode()
}

// waitEnded waits at most d for gaspirun to exit and reports whether it did.
func (j *job) waitEnded(d time.Duration) bool { return j.run.WaitEnd(d) }

// all returns the lines of one kind.
func (j *job) all(kind string) []line {
	j.run.Lock()
	defer j.run.Unlock()
	var out []line
	for _, l := range j.lines {
		if l.kind == kind {
			out = append(out, l)
		}
	}
	return out
}

func (j *job) stderrText() string {
	j.run.Lock()
	defer j.run.Unlock()
	return j.stderr.String()
}

func (j *job) pid(proc int) int {
	j.run.Lock()
	defer j.run.Unlock()
	p, ok := j.pids[proc]
	if !ok {
		j.t.Fatalf("no PID line from process %d", proc)
	}
	return p
}

// allPids returns every pid the job's processes reported.
func (j *job) allPids() []int {
	j.run.Lock()
	defer j.run.Unlock()
	seen := map[int]bool{}
	var out []int
	for _, p := range j.pids {
		seen[p] = true
		out = append(out, p)
	}
	for _, p := range j.extra {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out
}

// requirePass checks one "RESULT case=name rank=r PASS" line per rank.
func (j *job) requirePass(name string, ranks ...int) {
	j.t.Helper()
	got := map[int]string{}
	for _, l := range j.all("RESULT") {
		if l.kv["case"] == name {
			got[l.int("rank")] = l.rest
		}
	}
	for _, r := range ranks {
		res, ok := got[r]
		switch {
		case !ok:
			j.t.Errorf("case %s: no result from rank %d", name, r)
		case !strings.HasPrefix(res, "PASS"):
			j.t.Errorf("case %s, rank %d: %s", name, r, res)
		}
	}
}

// requireGone checks that no process of the job is left: neither the
// processes nor anything in their process groups.
func (j *job) requireGone() {
	j.t.Helper()
	pids := j.allPids()
	if len(pids) == 0 {
		j.t.Errorf("the job reported no pids")
		return
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		left := livePids(pids)
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			j.t.Errorf("processes left behind after gaspirun exited: %v", left)
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// livePids returns the processes among pids, or in their process groups,
// that still run (zombies count as gone: they are dead).
func livePids(pids []int) []string {
	groups := map[int]bool{}
	for _, p := range pids {
		groups[p] = true
	}
	var left []string
	for _, p := range pids {
		if alive(p) {
			left = append(left, fmt.Sprintf("pid %d", p))
		}
	}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		state, pgrp, ok := procStat(p)
		if ok && groups[pgrp] && state != "Z" && state != "X" {
			left = append(left, fmt.Sprintf("pid %d in group %d", p, pgrp))
		}
	}
	return left
}

func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	state, _, ok := procStat(pid)
	return ok && state != "Z" && state != "X"
}

// procStat reads the state and process group of pid from /proc.
func procStat(pid int) (state string, pgrp int, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", 0, false
	}
	// pid (comm) state ppid pgrp ...; comm may hold spaces and parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return "", 0, false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 3 {
		return "", 0, false
	}
	pgrp, err = strconv.Atoi(f[2])
	return f[0], pgrp, err == nil
}

// cleanup stops a job that is still running (a failed test) and kills what
// is left of the processes it reported, by pid. On failure it logs the
// job's output.
func (j *job) cleanup() {
	j.run.Stop(20 * time.Second) // SIGTERM to gaspirun, which tears the job down
	for _, p := range j.allPids() {
		if alive(p) {
			syscall.Kill(p, syscall.SIGKILL)
		}
	}
	if j.t.Failed() {
		args := j.run.Procs()[0].Cmd.Args[1:] // before Lock: Procs takes it
		j.run.Lock()
		var out strings.Builder
		for _, l := range j.lines {
			if len(l.raw) > 300 {
				l.raw = l.raw[:300] + "..."
			}
			out.WriteString(l.raw + "\n")
		}
		j.t.Logf("gaspirun %s\n--- stdout ---\n%s--- stderr ---\n%s", strings.Join(args, " "), out.String(), j.stderr.String())
		j.run.Unlock()
	}
}

// touch opens a gate of the test program.
func touch(t *testing.T, dir, name string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// checkNoRace fails the test if a process reported a data race.
func (j *job) checkNoRace() {
	j.t.Helper()
	if strings.Contains(j.stderrText(), "WARNING: DATA RACE") {
		j.t.Errorf("a process reported a data race")
	}
}
