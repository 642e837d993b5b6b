package proctest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Line is one line of a job's output.
type Line struct {
	Proc   int       // the index of the process that wrote it (in the commands given to Start)
	Time   time.Time // when it arrived
	Text   string    // without the newline
	Stderr bool      // from the process's stderr (JobConfig.SplitStderr only)
}

// String is the line as gaspirun prints a process's line, "[pN] text".
func (l Line) String() string { return "[p" + strconv.Itoa(l.Proc) + "] " + l.Text }

// JobConfig shapes a Job.
type JobConfig struct {
	// OnLine, if set, is called with every line as it arrives, with the
	// job's lock held (see Job.Lock) and before waiters wake: a harness
	// builds its reading of the output there (parsed records, pids) and
	// reads it in the conditions of Job.WaitCond and under Job.Lock. It
	// must not call the Job's methods.
	OnLine func(Line)
	// SplitStderr reads a process's stderr apart from its stdout, its
	// lines marked Line.Stderr. By default both streams share one pipe, so
	// the lines keep the order the process wrote them in.
	SplitStderr bool
	// Bound, if not zero, bounds the job from its start: once it passes,
	// Stop(DefaultWaitDelay) ends whatever still runs, and TimedOut
	// reports it.
	Bound time.Duration
}

// Proc is one process of a Job.
type Proc struct {
	ID  int       // its index in the commands given to Start
	Cmd *exec.Cmd // the command, started

	done chan struct{}
	code int            // exit code; -1 if a signal killed it or Wait failed
	sig  syscall.Signal // the signal that killed it, or 0
	err  error          // Wait's error
	end  time.Time
}

// Done is closed when the process has ended and its output is read.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exit returns how the process ended: its exit code (-1 when a signal
// killed it or its output outlived it beyond Cmd.WaitDelay), the signal,
// when it ended; ok is false while it runs.
func (p *Proc) Exit() (code int, sig syscall.Signal, end time.Time, ok bool) {
	select {
	case <-p.done:
		return p.code, p.sig, p.end, true
	default:
		return 0, 0, time.Time{}, false
	}
}

// Err is the error of the process's Wait (nil while it runs, or for exit
// 0): an *exec.ExitError for a process that exited non-zero or was
// killed, else a failure to wait for it or to read its output.
func (p *Proc) Err() error {
	select {
	case <-p.done:
		return p.err
	default:
		return nil
	}
}

// Job runs the processes of one test job (gaspirun, or the processes of a
// job started without it) and records every line they write with its
// time and process. Tests wait for a line or a condition over what they
// read, with a bound, and for the processes' end; every wait wakes at each
// new line or exit, never polls. Each process is watched by a goroutine
// owned by the Job, which ends once the process has ended and its output
// is read. Methods are safe for concurrent use.
//
//	j, err := proctest.Start(proctest.JobConfig{}, exec.Command(gaspirun, args...))
//	defer j.Stop(30 * time.Second)
//	l, err := j.WaitLine(ctx, func(l proctest.Line) bool { return strings.HasPrefix(l.Text, "[r0] iter") })
//	j.WaitEnd(time.Minute)
//	code := j.ExitCode()
type Job struct {
	cfg   JobConfig
	n     int // processes to start
	begin time.Time
	wg    sync.WaitGroup
	bound *time.Timer // Bound's, or nil
	hung  atomic.Bool // Bound passed

	mu    cond // guards lines, procs and what OnLine builds; changes at each line and exit, ends with the last process
	lines []Line
	procs []*Proc
}

// DefaultWaitDelay is the Cmd.WaitDelay that Start sets on a command
// without one: how long after a process's end its output may stay open
// (held by a child it left behind) before the pipes are closed.
const DefaultWaitDelay = 20 * time.Second

// Start starts cmds, in order, reading their output (it sets Stdout and
// Stderr). A command's own settings stay (a context and Cancel, Env,
// SysProcAttr, Dir, WaitDelay: DefaultWaitDelay if zero). On error the
// processes already started are killed.
func Start(cfg JobConfig, cmds ...*exec.Cmd) (*Job, error) {
	if len(cmds) == 0 {
		return nil, errors.New("proctest: Start needs at least one command")
	}
	j := &Job{cfg: cfg, n: len(cmds), begin: time.Now()}
	for i, cmd := range cmds {
		p := &Proc{ID: i, Cmd: cmd, done: make(chan struct{})}
		if cfg.SplitStderr {
			cmd.Stdout, cmd.Stderr = &lineWriter{j: j, proc: i}, &lineWriter{j: j, proc: i, stderr: true}
		} else {
			w := &lineWriter{j: j, proc: i}
			cmd.Stdout, cmd.Stderr = w, w // one pipe: the order the process wrote in
		}
		if cmd.WaitDelay == 0 {
			cmd.WaitDelay = DefaultWaitDelay
		}
		if err := cmd.Start(); err != nil {
			j.n = i // the job is the processes started so far
			j.Kill()
			return nil, fmt.Errorf("proctest: start process %d (%s): %w", i, cmd.Path, err)
		}
		j.mu.Lock() // a process that already ended reads procs (ended)
		j.procs = append(j.procs, p)
		j.mu.Unlock()
		j.wg.Add(1)
		go j.watch(p)
	}
	if cfg.Bound > 0 {
		j.mu.Lock()
		if !j.mu.EndedLocked() {
			j.bound = time.AfterFunc(cfg.Bound, func() {
				j.hung.Store(true)
				j.Stop(DefaultWaitDelay)
			})
		}
		j.mu.Unlock()
	}
	return j, nil
}

// watch waits for p (exec's goroutines copy its output to the lineWriters
// until then) and records how it ended.
func (j *Job) watch(p *Proc) {
	defer j.wg.Done()
	err := p.Cmd.Wait()
	for _, w := range []any{p.Cmd.Stdout, p.Cmd.Stderr} {
		w.(*lineWriter).flush()
	}
	p.end, p.err = time.Now(), err
	p.code = p.Cmd.ProcessState.ExitCode()
	if ws, ok := p.Cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		p.sig = ws.Signal()
	} else if err != nil && p.code == 0 {
		p.code = -1
	}
	close(p.done)
	j.mu.Lock()
	if j.endedLocked() { // every process's lines are in: each closes done after them
		j.mu.EndLocked()
		if j.bound != nil {
			j.bound.Stop()
		}
	} else {
		j.mu.ChangedLocked()
	}
	j.mu.Unlock()
}

// endedLocked reports whether every process has ended; j.mu is held.
func (j *Job) endedLocked() bool {
	if len(j.procs) < j.n {
		return false
	}
	for _, p := range j.procs {
		if _, _, _, ok := p.Exit(); !ok {
			return false
		}
	}
	return true
}

func (j *Job) add(l Line) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.cfg.OnLine != nil {
		j.cfg.OnLine(l)
	}
	j.lines = append(j.lines, l)
	j.mu.ChangedLocked()
}

// maxLine is the longest line recorded; a longer one is cut into lines of
// this length.
const maxLine = 1 << 20

// lineWriter splits one stream of a process into lines.
type lineWriter struct {
	j       *Job
	proc    int
	stderr  bool
	mu      sync.Mutex
	partial []byte
}

func (w *lineWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.partial = append(w.partial, b...)
	for {
		i, next := bytes.IndexByte(w.partial, '\n'), 0
		switch {
		case i >= 0 && i <= maxLine:
			next = i + 1 // past the newline
		case len(w.partial) >= maxLine:
			i, next = maxLine, maxLine // cut
		default:
			i = -1
		}
		if i < 0 {
			break
		}
		w.j.add(Line{Proc: w.proc, Time: time.Now(), Text: string(w.partial[:i]), Stderr: w.stderr})
		w.partial = w.partial[next:]
	}
	if len(w.partial) == 0 {
		w.partial = nil // let a large buffer go
	}
	return len(b), nil
}

// flush records what is left after the last newline as a line.
func (w *lineWriter) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.partial) > 0 {
		w.j.add(Line{Proc: w.proc, Time: time.Now(), Text: string(w.partial), Stderr: w.stderr})
		w.partial = nil
	}
}

// Begin is when Start was called.
func (j *Job) Begin() time.Time { return j.begin }

// Procs returns the processes, by index.
func (j *Job) Procs() []*Proc {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]*Proc(nil), j.procs...)
}

// Running lists the processes still running.
func (j *Job) Running() []*Proc {
	var out []*Proc
	for _, p := range j.Procs() {
		if _, _, _, ok := p.Exit(); !ok {
			out = append(out, p)
		}
	}
	return out
}

// Lines returns every line so far, in arrival order.
func (j *Job) Lines() []Line {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]Line(nil), j.lines...)
}

// Texts returns the text of every line so far, in arrival order.
func (j *Job) Texts() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := make([]string, len(j.lines))
	for i, l := range j.lines {
		out[i] = l.Text
	}
	return out
}

// Output returns the text of every line so far, each ended by a newline:
// the combined output.
func (j *Job) Output() string {
	j.mu.Lock()
	defer j.mu.Unlock()
	var b strings.Builder
	for _, l := range j.lines {
		b.WriteString(l.Text)
		b.WriteByte('\n')
	}
	return b.String()
}

// TimedOut reports whether JobConfig.Bound passed before the job ended.
func (j *Job) TimedOut() bool { return j.hung.Load() }

// Lock locks what OnLine builds (and the Job's own state).
func (j *Job) Lock() { j.mu.Lock() }

// Unlock unlocks it.
func (j *Job) Unlock() { j.mu.Unlock() }

// Changed returns a channel closed at the next line or exit.
func (j *Job) Changed() <-chan struct{} { return j.mu.Changed() }

// ErrEnded is WaitLine's error when every process ended without the line.
var ErrEnded = errors.New("proctest: every process ended without the line")

// WaitLine returns the first line (from the start of the job) for which
// match is true, waiting for it until ctx ends (ctx's error) or every
// process has ended (ErrEnded).
func (j *Job) WaitLine(ctx context.Context, match func(Line) bool) (Line, error) {
	found, ok := waitFirst(ctx, &j.mu, func() []Line { return j.lines }, match)
	switch {
	case ok:
		return found, nil
	case ctx.Err() != nil:
		return Line{}, ctx.Err()
	}
	return Line{}, ErrEnded
}

// WaitCond waits for cond, called with the job's lock held at each new
// line and exit, to hold (true); false when ctx ends or every process
// ends without it (cond is checked once more at the end).
func (j *Job) WaitCond(ctx context.Context, cond func() bool) bool { return j.mu.Wait(ctx, cond) }

// Wait waits until every process has ended and its output is read, or
// ctx ends (its error).
func (j *Job) Wait(ctx context.Context) error {
	if j.mu.Wait(ctx, func() bool { return false }); j.mu.Ended() {
		return nil
	}
	return ctx.Err()
}

// WaitEnd waits at most d for every process to end and reports whether
// they did.
func (j *Job) WaitEnd(d time.Duration) bool { return j.mu.WaitEnd(d) }

// Ended reports whether every process has ended and its output is read.
func (j *Job) Ended() bool { return j.mu.Ended() }

// ExitCode is the exit code of the first process (by index) that did not
// exit 0 (-1 for one a signal killed), or 0. Call it once the job ended;
// a process still running counts as 0.
func (j *Job) ExitCode() int {
	for _, p := range j.Procs() {
		if code, _, _, ok := p.Exit(); ok && code != 0 {
			return code
		}
	}
	return 0
}

// Signal sends sig to every process still running.
func (j *Job) Signal(sig syscall.Signal) {
	for _, p := range j.Running() {
		p.Cmd.Process.Signal(sig)
	}
}

// Kill SIGKILLs every process still running and waits (at most 10 s) for
// the watchers to finish.
func (j *Job) Kill() {
	j.Signal(syscall.SIGKILL)
	done := make(chan struct{})
	go func() { j.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
}

// Stop ends the job the way gaspirun wants to be ended (it tears its
// processes down on SIGTERM; SIGKILL would leave them running): SIGTERM to
// every process still running, then Kill after grace. Idempotent.
func (j *Job) Stop(grace time.Duration) {
	if j.Ended() {
		return
	}
	j.Signal(syscall.SIGTERM)
	if !j.WaitEnd(grace) {
		j.Kill()
	}
}

// Run runs cmd to its end, for at most bound (then it is killed), and
// returns its output (stdout and stderr in the order written). The error
// says why it failed, with the output: it could not start, it ran past
// the bound, or it did not exit 0.
func Run(bound time.Duration, cmd *exec.Cmd) (string, error) {
	j, err := Start(JobConfig{Bound: bound}, cmd)
	if err != nil {
		return "", err
	}
	j.Wait(context.Background()) // the bound ends it
	out := j.Output()
	name := strings.Join(cmd.Args, " ")
	switch {
	case j.TimedOut():
		return out, fmt.Errorf("%s: still running after %v; killed\n%s", name, bound, out)
	case j.ExitCode() != 0:
		return out, fmt.Errorf("%s: exit %d\n%s", name, j.ExitCode(), out)
	}
	return out, nil
}
