package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
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
// (mh), on proctest's runner, whose output is parsed as it arrives.
type job struct {
	run  *proctest.Job
	mh   *mhjob.Job // or nil
	logw io.Writer  // raw output copy, may be nil
	recs []record   // guarded by run's lock: built by add, its OnLine
}

// startJob runs gaspirun with flags, then PROGRAM ARGS.
func startJob(gaspirun string, flags []string, prog string, args []string, env []string, logw io.Writer) (*job, error) {
	argv := append(append(append([]string{}, flags...), "--", prog), args...)
	cmd := exec.Command(gaspirun, argv...)
	cmd.Env = append(os.Environ(), env...)
	j := &job{logw: logw}
	run, err := proctest.Start(proctest.JobConfig{OnLine: func(l proctest.Line) { j.add(l.Text, l.Time) }}, cmd)
	if err != nil {
		return nil, err
	}
	j.run = run
	return j, nil
}

// startHostJob runs prog with args as a job of the bare PGAS_* contract
// over the simulated hosts of c, process p on host hosts[p], the last
// spares processes spares. Lines read "[pN] ..." as under gaspirun.
func startHostJob(c *simhost.Cluster, hosts []int, spares int, prog string, args []string, env []string, logw io.Writer) (*job, error) {
	j := &job{logw: logw}
	mh, err := mhjob.Start(context.Background(), mhjob.Config{Cluster: c, Program: prog, Args: args, Hosts: hosts, Spares: spares,
		Env: env, OnLine: func(l proctest.Line) { j.add(l.String(), l.Time) }})
	if err != nil {
		return nil, err
	}
	j.run, j.mh = mh.Job, mh
	return j, nil
}

// add parses one output line read at recv; the job's lock is held.
func (j *job) add(line string, recv time.Time) {
	j.recs = append(j.recs, parseLine(line, recv))
	if j.logw != nil {
		fmt.Fprintln(j.logw, line)
	}
}

// wait blocks until cond holds over the records (checked under the lock),
// the job ends (then cond is checked once more) or ctx ends.
func (j *job) wait(ctx context.Context, cond func(recs []record) bool) bool {
	return j.run.WaitCond(ctx, func() bool { return cond(j.recs) })
}

// snapshot returns a copy of the records so far.
func (j *job) snapshot() []record {
	j.run.Lock()
	defer j.run.Unlock()
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

// stop ends the job and returns its exit code (non-zero when a process
// failed): a bare-contract job's processes get SIGKILL (their own groups),
// gaspirun SIGTERM (it tears its process groups down) and SIGKILL after
// grace, and then every known process of the job SIGKILL.
func (j *job) stop(grace time.Duration) int {
	if j.mh != nil {
		j.mh.Kill()
		return j.run.ExitCode()
	}
	j.run.Stop(grace)
	for _, pid := range pids(j.snapshot()) {
		if proctest.Alive(pid) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	j.run.WaitEnd(30 * time.Second)
	return j.run.ExitCode()
}

// expectedSum is ftstep's result for n ranks and steps steps: step i
// contributes sum over r of (r*i+1).
func expectedSum(n, steps int64) int64 {
	return n*steps + n*(n-1)/2*(steps*(steps-1)/2)
}
