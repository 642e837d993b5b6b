package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gaspigo/gaspigo/internal/testkit/mhjob"
	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
	"github.com/gaspigo/gaspigo/internal/testkit/simhost"
)

// record is one parsed output line of a job.
type record struct {
	recv  time.Time // when the tool read the line
	at    time.Time // the log record's own time; recv for plain lines
	label string    // gaspirun's prefix without brackets (r2, s5, p1), "" for gaspirun's own lines
	kind  string    // "log" for slog records, else the first word (pid, rank, result, leader, progress, gaspirun)
	msg   string    // slog message
	kv    map[string]string
	raw   string
}

// proc is the process id the record is about: the first proc= attribute
// (the runtime and the membership put the emitting process first).
func (r record) proc() int {
	p, err := strconv.Atoi(r.kv["proc"])
	if err != nil {
		return -1
	}
	return p
}

func (r record) int(key string) int64 {
	v, err := strconv.ParseInt(r.kv[key], 10, 64)
	if err != nil {
		return -1
	}
	return v
}

// parseLine turns one line of gaspirun's output into a record. Lines are
// "[label] text" for the processes and "gaspirun: text" for the launcher.
func parseLine(raw string, recv time.Time) record {
	r := record{recv: recv, at: recv, raw: raw, kv: map[string]string{}}
	s := raw
	if strings.HasPrefix(s, "[") {
		if i := strings.Index(s, "] "); i > 0 {
			r.label, s = s[1:i], s[i+2:]
		}
	}
	if strings.HasPrefix(s, "gaspirun: ") {
		r.kind = "gaspirun"
		return r
	}
	if strings.HasPrefix(s, "time=") {
		r.kind = "log"
		proctest.ParseKV(s, r.kv)
		r.msg = r.kv["msg"]
		if t, err := time.Parse(time.RFC3339Nano, r.kv["time"]); err == nil {
			r.at = t
		}
		return r
	}
	r.kind, s, _ = strings.Cut(s, " ")
	switch r.kind {
	case "pid": // pid <pid> proc <p>
		f := strings.Fields(s)
		if len(f) == 3 && f[1] == "proc" {
			r.kv["pid"], r.kv["proc"] = f[0], f[2]
		}
	case "rank": // rank <r> epoch <e>, or rank <r>: ...
		f := strings.Fields(s)
		if len(f) == 3 && f[1] == "epoch" {
			r.kind = "init"
			r.kv["rank"], r.kv["epoch"] = f[0], f[2]
		}
	default:
		proctest.ParseKV(s, r.kv)
	}
	return r
}

// job is one gaspirun run, or one bare-contract job over simulated hosts
// (mh), whose output is parsed as it arrives.
type job struct {
	cmd  *exec.Cmd
	mh   *mhjob.Job
	logw io.Writer // raw output copy, may be nil

	mu      proctest.Cond // guards recs and code; changes at each line and at the end
	recs    []record
	code    int
	readers sync.WaitGroup
}

// startJob runs gaspirun with flags, then PROGRAM ARGS.
func startJob(gaspirun string, flags []string, prog string, args []string, env []string, logw io.Writer) (*job, error) {
	argv := append(append(append([]string{}, flags...), "--", prog), args...)
	cmd := exec.Command(gaspirun, argv...)
	cmd.Env = append(os.Environ(), env...)
	j := &job{cmd: cmd, logw: logw}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	errp, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", gaspirun, err)
	}
	for _, r := range []io.Reader{out, errp} {
		j.readers.Add(1)
		go func() {
			defer j.readers.Done()
			j.read(r)
		}()
	}
	go func() {
		j.readers.Wait()
		err := cmd.Wait()
		j.mu.Lock()
		j.code = cmd.ProcessState.ExitCode()
		if err != nil && j.code == 0 {
			j.code = -1
		}
		j.mu.EndLocked()
		j.mu.Unlock()
	}()
	return j, nil
}

// startHostJob runs prog with args as a job of the bare PGAS_* contract
// over the simulated hosts of c, process p on host hosts[p], the last
// spares processes spares. Lines read "[pN] ..." as under gaspirun.
func startHostJob(c *simhost.Cluster, hosts []int, spares int, prog string, args []string, env []string, logw io.Writer) (*job, error) {
	j := &job{logw: logw}
	mh, err := mhjob.Start(context.Background(), mhjob.Config{Cluster: c, Program: prog, Args: args, Hosts: hosts, Spares: spares,
		Env: env, OnLine: func(l mhjob.Line) { j.add(l.String(), l.Time) }})
	if err != nil {
		return nil, err
	}
	j.mh = mh
	go func() {
		mh.Wait(context.Background())
		j.mu.Lock()
		for _, p := range mh.Procs() {
			if code, sig, _, _ := p.Exit(); code != 0 || sig != 0 {
				j.code = 1
			}
		}
		j.mu.EndLocked()
		j.mu.Unlock()
	}()
	return j, nil
}

func (j *job) read(r io.Reader) {
	proctest.ScanLines(r, func(line string) { j.add(line, time.Now()) })
}

// add parses one output line read at recv.
func (j *job) add(line string, recv time.Time) {
	rec := parseLine(line, recv)
	j.mu.Lock()
	defer j.mu.Unlock()
	j.recs = append(j.recs, rec)
	if j.logw != nil {
		fmt.Fprintln(j.logw, line)
	}
	j.mu.ChangedLocked()
}

// wait blocks until cond holds over the records (checked under the lock),
// the job ends (then cond is checked once more) or ctx ends.
func (j *job) wait(ctx context.Context, cond func(recs []record) bool) bool {
	return j.mu.Wait(ctx, func() bool { return cond(j.recs) })
}

// snapshot returns a copy of the records so far.
func (j *job) snapshot() []record {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]record(nil), j.recs...)
}

// pids maps process id to OS pid from the "pid" lines.
func pids(recs []record) map[int]int {
	m := map[int]int{}
	for _, r := range recs {
		if r.kind == "pid" {
			pid, err := strconv.Atoi(r.kv["pid"])
			if err == nil && r.proc() >= 0 {
				m[r.proc()] = pid
			}
		}
	}
	return m
}

// stop ends the job: SIGTERM to gaspirun (which tears its process groups
// down), SIGKILL to every known process after grace, then waits.
func (j *job) stop(grace time.Duration) int {
	ended := j.mu.Ended()
	if j.mh != nil {
		j.mh.Kill() // the processes' own groups: SIGKILL, then wait
		return 0
	}
	if !ended {
		j.cmd.Process.Signal(syscall.SIGTERM)
	}
	if !j.mu.WaitEnd(grace) {
		j.cmd.Process.Kill()
	}
	for _, pid := range pids(j.snapshot()) {
		if proctest.Alive(pid) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	j.mu.WaitEnd(30 * time.Second)
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.code
}

// expectedSum is ftstep's result for n ranks and steps steps: step i
// contributes sum over r of (r*i+1).
func expectedSum(n, steps int64) int64 {
	return n*steps + n*(n-1)/2*(steps*(steps-1)/2)
}
