package chaos

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/internal/netfault"
	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
)

var bins struct {
	gaspirun, kmeans, terasort string
	err                        error
}

func TestMain(m *testing.M) {
	os.Exit(proctest.Main(m, "chaos", proctest.Race,
		[]string{"./cmd/gaspirun", "./apps/kmeans/cmd/kmeans", "./apps/terasort/cmd/terasort"},
		func(dir string, skip error) {
			bins.err = skip
			bins.gaspirun = filepath.Join(dir, "gaspirun")
			bins.kmeans = filepath.Join(dir, "kmeans")
			bins.terasort = filepath.Join(dir, "terasort")
		}))
}

const (
	// jobDeadline is gaspirun's --timeout: far beyond any schedule (the
	// longest takes a few seconds of faults plus detection), so that only
	// a hang reaches it.
	jobDeadline = 90 * time.Second
	// goneWait bounds the wait for a job's processes after gaspirun ended.
	goneWait = 15 * time.Second
	grace    = time.Second
)

// The workloads. K-means iterations are the logical clock faults are
// aimed at; a fault at iteration I is applied when rank 0 reports I.
type kmeansLoad struct {
	points, maxIter, ckptEvery int
	dim, k                     int // 0: the normal 10 and 20
}

func kmWorkload() kmeansLoad {
	if proctest.Race {
		return kmeansLoad{points: 60000, maxIter: 120, ckptEvery: 10}
	}
	return kmeansLoad{points: 200000, maxIter: 200, ckptEvery: 10}
}

// kmWorkloadFor is the K-means workload of a job of ranks ranks: the
// normal one, or for the scale mode a small problem per rank, so that
// hundreds of processes on two cores still iterate a few times a second.
func kmWorkloadFor(ranks int) kmeansLoad {
	if ranks == Ranks {
		return kmWorkload()
	}
	return kmeansLoad{points: 1000 * ranks, maxIter: 60, ckptEvery: 10, dim: 4, k: 8}
}

func (w kmeansLoad) args() []string {
	dim, k := 10, 20
	if w.dim > 0 {
		dim, k = w.dim, w.k
	}
	return []string{"--generate", strconv.Itoa(w.points), "--dim", strconv.Itoa(dim), "--k", strconv.Itoa(k), "--seed", "11",
		"--max-iter", strconv.Itoa(w.maxIter), "--tol", "0", "--ckpt-every", strconv.Itoa(w.ckptEvery)}
}

// lastAt: faults land in the first 70% of the iterations.
func (w kmeansLoad) lastAt() int { return w.maxIter * 7 / 10 }

// tsRecords is the TeraSort input: large enough that the sort lasts a
// couple of seconds, so that faults land in every phase of it.
func tsRecords() int {
	if proctest.Race {
		return 200000
	}
	return 2000000
}

// tsLastAt is the latest TeraSort fault point, in per mille of the job's
// logical progress (tsProgress): Draw puts TeraSort's faults between a
// quarter and three quarters of it, from the second half of rank 0's
// sending to the first half of its writing, whatever the machine's speed,
// its load and the race detector make of the job. (Points in time, as
// fractions of a failure-free run's duration, fell past the end of a job
// that a fluctuating load made faster than that run: the fault found the
// job over and was not applied.)
func tsLastAt() int { return 1000 }

// tsProgress is a TeraSort job's logical progress in per mille, once rank
// 0 has sent sent of its n input records and written wrote records of its
// part (its progress lines: apps/terasort DistConfig.Stdout). Every record
// is sent once and written once, and rank 0's part holds about n records:
// the sending is the first half of the job, the writing the second.
func tsProgress(sent, wrote, n int64) int {
	if n <= 0 {
		return 0
	}
	return int(min(1000, (min(sent, n)+min(wrote, n))*500/n))
}

// line is one output line, when the harness read it, and its record
// (nil for a line that holds none: a program's output, a harness note).
type line struct {
	text string
	at   time.Time
	rec  Record
}

// msg is the message of the line's record, "" for none.
func (l line) msg() string { return l.rec.Msg() }

var (
	iterRE     = regexp.MustCompile(`^\[r0\] iter\s+(\d+)\s`)
	recoveryRE = regexp.MustCompile(`^\[r0\] recovery: epoch`)
	finalKMRE  = regexp.MustCompile(`^\[r0\] (centroids sha256=[0-9a-f]{64} sse=\S+ iterations=\d+)$`)
	finalTSRE  = regexp.MustCompile(`^\[r0\] (records=\d+ checksum=[0-9a-f]{16})$`)
	// TeraSort's progress lines, printed by the process holding rank 0
	// (a promoted spare's label starts with s).
	tsSentRE  = regexp.MustCompile(`^\[[rs]\d+\] sort: sent (\d+) of (\d+) records; `)
	tsWroteRE = regexp.MustCompile(`^\[[rs]\d+\] sort: wrote (\d+) records of its part$`)
	// progressRE is the first sign of work after a recovery: a K-means
	// iteration, or a TeraSort progress line.
	progressRE = regexp.MustCompile(`^\[r0\] iter\s+\d+\s|^\[[rs]\d+\] sort: (sent \d+ of \d+ records; |wrote \d+ records of its part$)`)
	// gaspirun's lines about replacements (--respawn) and about ranks
	// changing hands (cmd/gaspirun's doc): a replacement started with its
	// new process id; a spare, started with the job or joined since,
	// that now holds a rank.
	respawnRE = regexp.MustCompile(`^gaspirun: respawned s(\d+) .*for lost \S+ \(\d+ of \d+\)$`)
	holdsRE   = regexp.MustCompile(`^gaspirun: (?:rank \d+ \()?(?:spare )?process (\d+)\b.* now holds rank (\d+) \(epoch (\d+)\)$`)
)

// job is one running gaspirun job and what the harness learns from its
// output.
type job struct {
	t      *testing.T
	id     string
	start  time.Time
	faults string // the netfault directory
	// deadline is gaspirun's --timeout and the bound of the harness's
	// waits for a fault's point or its effect.
	deadline time.Duration

	run *proctest.Job
	// Guarded by run's lock (built by onLine, its OnLine; notes added
	// under it).
	lines    []line
	iter     int          // highest iteration rank 0 reported
	progress int          // TeraSort: highest progress rank 0 reported, per mille (tsProgress)
	tsInput  int64        // TeraSort: rank 0's input records, from its progress lines
	done     bool         // rank 0 printed the result: the job is ending
	leader   int          // proc of the latest Raft leader, -1 none (or gone since)
	failed   map[int]bool // processes the membership declared failed
	stretch  int          // the membership's timeout factor on an oversubscribed host (0 or 1: none logged)
	// joined holds the processes that joined the running job (new ids:
	// replacements, --respawn), from the runtime's record that a view
	// lists a new process; respawned the ids of the replacements gaspirun
	// said it started, in order.
	joined    map[int]bool
	respawned []int

	pids     *proctest.Procs
	launcher int          // gaspirun's pid, which the pid watcher leaves out
	stopped  map[int]bool // pids under SIGSTOP

	// outcomes says, for each fault of the schedule, whether the harness
	// (or the program) applied it, and why not; guarded by run's lock.
	outcomes []outcome
}

// outcome is what became of one fault of a schedule.
type outcome struct {
	set     bool // the harness decided (false: the schedule stopped before it could)
	applied bool
	why     string // why it was not applied: a short reason, the same in every schedule it happens in
	detail  string // what exactly happened, for the schedule's log
}

// onLine takes one line of gaspirun's; run's lock is held. Records are
// parsed once, here, by key.
func (j *job) onLine(l proctest.Line) {
	s := l.Text
	rec, _ := ParseRecord(s)
	j.lines = append(j.lines, line{s, l.Time, rec})
	if m := iterRE.FindStringSubmatch(s); m != nil {
		n, _ := strconv.Atoi(m[1])
		j.iter = max(j.iter, n)
	}
	if m := tsSentRE.FindStringSubmatch(s); m != nil {
		sent, _ := strconv.ParseInt(m[1], 10, 64)
		j.tsInput, _ = strconv.ParseInt(m[2], 10, 64)
		j.progress = max(j.progress, tsProgress(sent, 0, j.tsInput))
	}
	if m := tsWroteRE.FindStringSubmatch(s); m != nil {
		// Writing follows the whole sending.
		wrote, _ := strconv.ParseInt(m[1], 10, 64)
		j.progress = max(j.progress, tsProgress(j.tsInput, wrote, j.tsInput))
	}
	if finalKMRE.MatchString(s) || finalTSRE.MatchString(s) {
		j.done = true
	}
	if m := respawnRE.FindStringSubmatch(s); m != nil {
		p, _ := strconv.Atoi(m[1])
		j.respawned = append(j.respawned, p)
	}
	switch rec.Msg() {
	case msgJoined:
		if p, ok := rec.Int(attrJoiner); ok {
			j.joined[p] = true
		}
	case msgStretched:
		if f, ok := rec.Int("factor"); ok {
			j.stretch = max(j.stretch, f)
		}
	case msgBecameLeader:
		if p, ok := rec.Int("proc"); ok {
			j.leader = p
		}
	case msgFailureCommitted:
		p, ok := rec.Int(attrFailedProc)
		if !ok {
			break
		}
		j.failed[p] = true
		// The leader was declared failed: it leads no more, and the
		// next election's winner says so.
		if p == j.leader {
			j.leader = -1
		}
	}
}

// over reports whether the job ended or is ending (rank 0 printed its
// result; its processes are on their way out).
func (j *job) over() bool {
	if j.run.Ended() {
		return true
	}
	j.run.Lock()
	defer j.run.Unlock()
	return j.done
}

// note adds a harness note to the job's lines ("chaos: " and the text).
func (j *job) note(format string, a ...any) {
	j.run.Lock()
	j.lines = append(j.lines, line{text: "chaos: " + fmt.Sprintf(format, a...), at: time.Now()})
	j.run.Unlock()
}

// decide records the outcome of fault i of schedule s, once, and notes it
// when the fault was not applied.
func (j *job) decide(i int, f Fault, applied bool, why, detail string) {
	j.run.Lock()
	if j.outcomes[i].set {
		j.run.Unlock()
		return
	}
	j.outcomes[i] = outcome{set: true, applied: applied, why: why, detail: detail}
	j.run.Unlock()
	if !applied {
		if detail != "" {
			why += " (" + detail + ")"
		}
		j.note("not applied %s: %s", f, why)
	}
}

// withdraw turns fault i's outcome into not applied, for why: a check
// after the job found that what the harness applied did not test the
// fault's kind (a kill beyond the spares that no replacement refilled).
func (j *job) withdraw(i int, f Fault, why, detail string) {
	j.run.Lock()
	if d := j.outcomes[i].detail; d != "" {
		detail = d + "; " + detail
	}
	j.outcomes[i] = outcome{set: true, why: why, detail: detail}
	j.run.Unlock()
	j.note("not applied %s: %s (%s)", f, why, detail)
}

// waitUntil blocks until cond holds (checked under run's lock after every line),
// the job ends (false) or d passes (false).
func (j *job) waitUntil(d time.Duration, cond func() bool) bool {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return j.run.WaitCond(ctx, cond)
}

// linesSince returns how many lines had been read at the call, for later
// searches past that point.
func (j *job) mark() int {
	j.run.Lock()
	defer j.run.Unlock()
	return len(j.lines)
}

// findAfter returns the first line at index >= from that matches re.
func (j *job) findAfter(from int, re *regexp.Regexp) (line, bool) {
	for i := from; i < len(j.lines); i++ {
		if re.MatchString(j.lines[i].text) {
			return j.lines[i], true
		}
	}
	return line{}, false
}

// findMsgAfter returns the first line at index >= from whose record has
// message msg.
func (j *job) findMsgAfter(from int, msg string) (line, bool) {
	for i := from; i < len(j.lines); i++ {
		if j.lines[i].msg() == msg {
			return j.lines[i], true
		}
	}
	return line{}, false
}

// holder returns the process that holds rank r in the newest epoch the
// job's lines tell of. Three kinds of line say who holds a rank: a view
// line's own rank (the process applied a view in which it holds it), its
// moves (rank, old process, new process) for the ranks of processes the
// view declared failed, and gaspirun's "process P now holds rank R (epoch
// E)". The newest epoch wins; within one, a later line. None: the rank's
// first holder, process r. A rank that awaits a replacement (no spare was
// idle) stays with its failed holder in the moves until a joiner takes
// it, which only the joiner's own view line and gaspirun's line say: the
// others' view lines list moves of newly failed processes only.
func (j *job) holder(r int) int {
	j.run.Lock()
	defer j.run.Unlock()
	best, proc := -1, r
	take := func(e, p int) {
		if e >= best && p >= 0 {
			best, proc = e, p
		}
	}
	for _, l := range j.lines {
		if m := holdsRE.FindStringSubmatch(l.text); m != nil {
			p, _ := strconv.Atoi(m[1])
			rank, _ := strconv.Atoi(m[2])
			e, _ := strconv.Atoi(m[3])
			if rank == r {
				take(e, p)
			}
			continue
		}
		if l.msg() != msgViewApplied {
			continue
		}
		kv := l.rec
		e, err := strconv.Atoi(kv["epoch"])
		if err != nil {
			continue
		}
		if own, ok := kv.Int("rank"); ok && own == r {
			if p, ok := kv.Int("proc"); ok {
				take(e, p)
			}
		}
		f := strings.Fields(strings.Trim(kv["moved"], "[]"))
		for i := 0; i+2 < len(f); i += 3 {
			mr, err1 := strconv.Atoi(f[i])
			p, err2 := strconv.Atoi(f[i+2])
			if err1 == nil && err2 == nil && mr == r {
				take(e, p)
			}
		}
	}
	return proc
}

// idleSpares returns the spare processes holding no rank in the newest
// view and not declared failed: those the job started with (ids ranks to
// ranks+spares-1) and those that joined it since (any id above).
func (j *job) idleSpares(ranks, spares int) []int {
	held := map[int]bool{}
	for r := range ranks {
		held[j.holder(r)] = true
	}
	var cands []int
	for p := ranks; p < ranks+spares; p++ {
		cands = append(cands, p)
	}
	j.run.Lock()
	cands = append(cands, slices.Sorted(maps.Keys(j.joined))...)
	failed := maps.Clone(j.failed)
	j.run.Unlock()
	var out []int
	for _, p := range cands {
		if !held[p] && !failed[p] {
			out = append(out, p)
		}
	}
	return out
}

// signal sends sig to process proc of the job; it reports whether the
// process was found alive. A process the pid watcher has not found yet
// (one scan of /proc reads the environment of every process, which takes
// long on a loaded machine, and a replacement is new) is looked for once
// more before it counts as gone.
func (j *job) signal(proc int, sig syscall.Signal) (int, bool) {
	pid, ok := j.pids.Signal(proc, sig)
	if _, known := j.pids.PIDOf(proc); !ok && !known {
		j.pids.Scan(j.id, j.launcher)
		pid, ok = j.pids.Signal(proc, sig)
	}
	if ok {
		j.t.Logf("chaos: %v to process %d (pid %d) at %v", sig, proc, pid, time.Since(j.start).Round(time.Millisecond))
	}
	if ok && sig == syscall.SIGKILL {
		j.run.Lock()
		if j.leader == proc {
			j.leader = -1 // it leads no more; the next election's winner says so
		}
		j.run.Unlock()
	}
	return pid, ok
}

// setRule replaces the netfault rules of the job.
func (j *job) setRule(text string) {
	tmp := filepath.Join(j.faults, "rules.tmp")
	if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
		j.t.Errorf("netfault rules: %v", err)
		return
	}
	if err := os.Rename(tmp, filepath.Join(j.faults, netfault.RulesFile)); err != nil {
		j.t.Errorf("netfault rules: %v", err)
	}
	j.t.Logf("chaos: netfault rules now %q at %v", strings.TrimSpace(text), time.Since(j.start).Round(time.Millisecond))
}

// spec is one gaspirun job.
type spec struct {
	gaspirun string   // the launcher's binary; "" for bins.gaspirun
	ranks    int      // gaspirun -n
	launcher []string // gaspirun flags after -n and --spares
	program  []string // the program and its arguments
	spares   int
	env      []string      // KEY=VALUE for every process (the runtime's fault point)
	faults   int           // the schedule's faults, one outcome each
	apply    func(j *job)  // runs the schedule's faults while the job runs
	deadline time.Duration // gaspirun's --timeout and the harness's waits; 0: jobDeadline
}

// run starts the job, applies its faults, waits (bounded) and checks by
// pid that none of its processes is left.
func run(t *testing.T, sp spec) (*job, Result) {
	t.Helper()
	j := &job{t: t, id: fmt.Sprintf("chaos-%d-%d", os.Getpid(), time.Now().UnixNano()), leader: -1,
		pids: proctest.NewProcs(), stopped: map[int]bool{}, outcomes: make([]outcome, sp.faults),
		failed: map[int]bool{}, joined: map[int]bool{}, deadline: cmp.Or(sp.deadline, jobDeadline)}
	j.faults = t.TempDir()
	// --collapse 0: every line as soon as it is written. Collapsing holds
	// lines back (200 ms by default), and the harness, which aims faults
	// at K-means iterations of a few milliseconds, would see its clock
	// tens of iterations late.
	args := []string{"-n", strconv.Itoa(sp.ranks), "--spares", strconv.Itoa(sp.spares),
		"--timeout", j.deadline.String(), "--grace", grace.String(), "--job-id", j.id, "--collapse", "0"}
	args = append(args, sp.launcher...)
	args = append(args, "--")
	args = append(args, sp.program...)
	launcher := bins.gaspirun
	if sp.gaspirun != "" {
		launcher = sp.gaspirun
	}
	cmd := exec.Command(launcher, args...)
	cmd.Env = append(os.Environ(), "PGAS_LOG=info", netfault.EnvVar+"="+j.faults)
	cmd.Env = append(cmd.Env, sp.env...)
	t.Logf("gaspirun %s", strings.Join(args, " "))
	j.start = time.Now()
	run, err := proctest.Start(proctest.JobConfig{OnLine: j.onLine, Bound: j.deadline + 30*time.Second}, cmd)
	if err != nil {
		t.Fatalf("start gaspirun: %v", err)
	}
	j.run, j.launcher = run, cmd.Process.Pid
	stopWatch := j.pids.Watch(j.id, j.launcher, 10*time.Millisecond)
	applied := make(chan struct{})
	go func() {
		defer close(applied)
		if sp.apply != nil {
			sp.apply(j)
		}
	}()
	run.Wait(context.Background()) // the bound ends it
	<-applied
	stopWatch()
	// A process left under SIGSTOP would never go: continue it first.
	for pid := range j.stopped {
		syscall.Kill(pid, syscall.SIGCONT)
	}
	res := Result{Code: run.ExitCode()}
	res.Hung = run.TimedOut() || res.Code == ExitTimeout
	for _, l := range j.lines {
		res.Lines = append(res.Lines, l.text)
		for _, re := range []*regexp.Regexp{finalKMRE, finalTSRE} {
			if m := re.FindStringSubmatch(l.text); m != nil {
				res.Answer = m[1]
			}
		}
	}
	t.Logf("gaspirun exited %d after %v", res.Code, time.Since(j.start).Round(time.Millisecond))
	j.pids.Scan(j.id, j.launcher)
	return j, res
}

// leftovers returns the job's processes still running goneWait after
// gaspirun ended (and kills them).
func (j *job) leftovers() []int { return j.pids.Leftovers(goneWait) }
