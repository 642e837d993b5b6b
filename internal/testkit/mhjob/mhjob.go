package mhjob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gaspigo/gaspigo/internal/auth"
	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
	"github.com/gaspigo/gaspigo/internal/testkit/simhost"
)

// RendezvousPort is the port process 0 serves the rendezvous on when
// Config.Rendezvous is empty. Every cluster has its own namespaces, so a
// fixed port never collides.
const RendezvousPort = 29400

// Config describes one job.
type Config struct {
	// Cluster holds the hosts; required.
	Cluster *simhost.Cluster
	// Program is the path of the program every process runs, with Args.
	Program string
	Args    []string
	// Hosts[p] is the index of the host that runs process p; its length
	// is the number of processes (PGAS_NPROCS). Process 0 serves the
	// rendezvous.
	Hosts []int
	// Spares is PGAS_SPARES: the last Spares processes start as spares.
	Spares int
	// Rendezvous is PGAS_RENDEZVOUS. Empty: the address of process 0's
	// host and RendezvousPort. A host name (e.g. "node1:29400") is
	// resolved by each process through its own host's /etc/hosts.
	Rendezvous string
	// JobID is PGAS_JOB_ID; empty: a fresh one.
	JobID string
	// Env is added to every process's environment (PGAS_LOG=info, ...),
	// after the machine's own minus any PGAS_* variable but PGAS_TLS. EnvOf, if set,
	// adds per-process variables after that.
	Env   []string
	EnvOf func(proc int) []string
	// OnLine, if set, is called with every line as it arrives (from the
	// reading goroutines, one call at a time per stream).
	OnLine func(Line)
}

// Line is one line of a process's output.
type Line struct {
	Proc int       // the process id that wrote it
	Time time.Time // when it arrived
	Text string    // without the prefix and the newline
}

// String is the line as gaspirun would print it, "[pN] text".
func (l Line) String() string { return "[p" + strconv.Itoa(l.Proc) + "] " + l.Text }

// Proc is one process of the job.
type Proc struct {
	ID   int
	Host *simhost.Host
	Cmd  *exec.Cmd

	done chan struct{}
	code int            // exit code, -1 if killed by a signal
	sig  syscall.Signal // the signal that killed it, or 0
	end  time.Time
}

// Done is closed when the process has ended and its output is read.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exit returns how the process ended: its exit code (-1 when a signal
// killed it), the signal, when it ended; ok is false while it runs.
func (p *Proc) Exit() (code int, sig syscall.Signal, end time.Time, ok bool) {
	select {
	case <-p.done:
		return p.code, p.sig, p.end, true
	default:
		return 0, 0, time.Time{}, false
	}
}

// Job is a started job.
type Job struct {
	cfg   Config
	procs []*Proc
	begin time.Time
	wg    sync.WaitGroup

	mu    proctest.Cond // guards lines, and procs while Start runs; changes at every new line and every exit, ends with the last process
	lines []Line
}

// Start starts every process of the job. On error the processes already
// started are killed.
func Start(ctx context.Context, cfg Config) (*Job, error) {
	if cfg.Cluster == nil || cfg.Program == "" || len(cfg.Hosts) == 0 {
		return nil, errors.New("mhjob: Config needs a Cluster, a Program and at least one entry in Hosts")
	}
	if cfg.Spares < 0 || cfg.Spares >= len(cfg.Hosts) {
		return nil, fmt.Errorf("mhjob: Spares = %d with %d processes: want 0..%d", cfg.Spares, len(cfg.Hosts), len(cfg.Hosts)-1)
	}
	hosts := cfg.Cluster.Hosts()
	for p, h := range cfg.Hosts {
		if h < 0 || h >= len(hosts) {
			return nil, fmt.Errorf("mhjob: Hosts[%d] = %d: the cluster has hosts 0..%d", p, h, len(hosts)-1)
		}
	}
	if cfg.Rendezvous == "" {
		cfg.Rendezvous = net.JoinHostPort(hosts[cfg.Hosts[0]].Addr().String(), strconv.Itoa(RendezvousPort))
	}
	if cfg.JobID == "" {
		cfg.JobID = fmt.Sprintf("mh-%d-%s", os.Getpid(), auth.FormatToken(auth.NewToken())[:8])
	}
	token := auth.FormatToken(auth.NewToken())
	var base []string
	for _, kv := range os.Environ() {
		// PGAS_TLS passes, so that PGAS_TLS=1 go test runs the tiers under TLS.
		if !strings.HasPrefix(kv, "PGAS_") || strings.HasPrefix(kv, "PGAS_TLS=") {
			base = append(base, kv)
		}
	}
	j := &Job{cfg: cfg, begin: time.Now()}
	for p, hi := range cfg.Hosts {
		h := hosts[hi]
		cmd := h.Command(context.WithoutCancel(ctx), cfg.Program, cfg.Args...)
		cmd.Env = append(append([]string(nil), base...),
			"PGAS_PROC="+strconv.Itoa(p),
			"PGAS_NPROCS="+strconv.Itoa(len(cfg.Hosts)),
			"PGAS_SPARES="+strconv.Itoa(cfg.Spares),
			"PGAS_RENDEZVOUS="+cfg.Rendezvous,
			"PGAS_TOKEN="+token,
			"PGAS_HOST="+h.Name(),
			"PGAS_JOB_ID="+cfg.JobID,
		)
		if p == 0 {
			cmd.Env = append(cmd.Env, "PGAS_SERVE_RENDEZVOUS=1")
		}
		cmd.Env = append(cmd.Env, cfg.Env...)
		if cfg.EnvOf != nil {
			cmd.Env = append(cmd.Env, cfg.EnvOf(p)...)
		}
		// Its own process group: a signal meant for the test (Ctrl-C)
		// does not reach the job, which the test ends itself.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		pr := &Proc{ID: p, Host: h, Cmd: cmd, done: make(chan struct{})}
		stdout, err := cmd.StdoutPipe()
		if err == nil {
			var stderr io.ReadCloser
			if stderr, err = cmd.StderrPipe(); err == nil {
				if err = cmd.Start(); err == nil {
					j.mu.Lock() // a process that already ended reads procs (ended)
					j.procs = append(j.procs, pr)
					j.mu.Unlock()
					j.wg.Add(1)
					go j.watch(pr, stdout, stderr)
					continue
				}
			}
		}
		j.Kill()
		return nil, fmt.Errorf("mhjob: start process %d on %s: %w", p, h.Name(), err)
	}
	return j, nil
}

// watch reads pr's output until both streams close, waits for it and
// records how it ended.
func (j *Job) watch(pr *Proc, stdout, stderr io.Reader) {
	defer j.wg.Done()
	var rd sync.WaitGroup
	for _, r := range []io.Reader{stdout, stderr} {
		rd.Add(1)
		go func() {
			defer rd.Done()
			proctest.ScanLines(r, func(line string) { j.add(Line{Proc: pr.ID, Time: time.Now(), Text: line}) })
		}()
	}
	rd.Wait()
	err := pr.Cmd.Wait()
	pr.end = time.Now()
	pr.code = pr.Cmd.ProcessState.ExitCode()
	if ws, ok := pr.Cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		pr.sig = ws.Signal()
	} else if err != nil && pr.code == 0 {
		pr.code = -1
	}
	close(pr.done)
	j.mu.Lock()
	if j.ended() { // every process's lines are in: each closes done after them
		j.mu.EndLocked()
	} else {
		j.mu.ChangedLocked()
	}
	j.mu.Unlock()
}

func (j *Job) add(l Line) {
	if j.cfg.OnLine != nil {
		j.cfg.OnLine(l)
	}
	j.mu.Lock()
	j.lines = append(j.lines, l)
	j.mu.ChangedLocked()
	j.mu.Unlock()
}

// Procs returns the processes, by id.
func (j *Job) Procs() []*Proc { return append([]*Proc(nil), j.procs...) }

// Begin is when Start was called.
func (j *Job) Begin() time.Time { return j.begin }

// JobID is the job's PGAS_JOB_ID.
func (j *Job) JobID() string { return j.cfg.JobID }

// Lines returns every line so far, in arrival order.
func (j *Job) Lines() []Line {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]Line(nil), j.lines...)
}

// Text returns every line so far as gaspirun would print them.
func (j *Job) Text() []string {
	ls := j.Lines()
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = l.String()
	}
	return out
}

// WaitLine returns the first line (from the start of the job) for which
// match is true, waiting for it until ctx ends or every process has
// ended.
func (j *Job) WaitLine(ctx context.Context, match func(Line) bool) (Line, error) {
	found, ok := proctest.WaitFirst(ctx, &j.mu, func() []Line { return j.lines }, match)
	switch {
	case ok:
		return found, nil
	case ctx.Err() != nil:
		return Line{}, ctx.Err()
	}
	return Line{}, errors.New("mhjob: every process ended without the line")
}

// ended reports whether every process has ended; j.mu is held. A process
// may end while Start is still starting the others.
func (j *Job) ended() bool {
	if len(j.procs) < len(j.cfg.Hosts) {
		return false
	}
	for _, p := range j.procs {
		if _, _, _, ok := p.Exit(); !ok {
			return false
		}
	}
	return true
}

// Wait waits until every process has ended or ctx ends.
func (j *Job) Wait(ctx context.Context) error {
	for _, p := range j.procs {
		select {
		case <-p.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// Running lists the processes still running.
func (j *Job) Running() []*Proc {
	var out []*Proc
	for _, p := range j.procs {
		if _, _, _, ok := p.Exit(); !ok {
			out = append(out, p)
		}
	}
	return out
}

// Kill SIGKILLs every process still running and waits (at most 10 s) for
// the watchers to finish.
func (j *Job) Kill() {
	for _, p := range j.procs {
		if _, _, _, ok := p.Exit(); !ok && p.Cmd.Process != nil {
			p.Cmd.Process.Kill()
		}
	}
	done := make(chan struct{})
	go func() { j.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
}
