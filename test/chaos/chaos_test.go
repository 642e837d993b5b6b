package chaos

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/internal/testkit/stats"
)

var (
	flagSchedules = flag.Int("chaos.schedules", 0, "run seeds 1..N instead of the fixed sample (the long sweep)")
	flagSeeds     = flag.String("chaos.seeds", "", "comma-separated seeds to run instead of the sample (replay)")
	flagSummary   = flag.String("chaos.summary", "", "also write the summary table to this file")
	flagKeep      = flag.String("chaos.keep", "", "write the whole output of every failed schedule to DIR/seed-N.log (multi-host: DIR/hosts-seed-N.log)")
)

// sampleSeeds is the fixed CI sample: chosen so that it covers every
// fault kind at least once (TestSampleCoversEveryKind checks it).
var sampleSeeds = []uint64{1, 2, 3, 4, 6, 7, 10, 33, 44, 50}

// WorkloadOf is the workload of a seed: one seed in four runs TeraSort.
func WorkloadOf(seed uint64) Workload {
	if seed%4 == 3 {
		return TeraSort
	}
	return KMeans
}

// ScheduleOf draws the schedule of seed with the workload sizes in force.
func ScheduleOf(seed uint64) Schedule {
	w := WorkloadOf(seed)
	if w == TeraSort {
		return Draw(seed, w, tsLastAt())
	}
	return Draw(seed, w, kmWorkload().lastAt())
}

func seeds(t *testing.T) []uint64 {
	switch {
	case *flagSeeds != "":
		var out []uint64
		for _, f := range strings.Split(*flagSeeds, ",") {
			s, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
			if err != nil {
				t.Fatalf("-chaos.seeds: %q is not a seed (want e.g. -chaos.seeds=7,12)", f)
			}
			out = append(out, s)
		}
		return out
	case *flagSchedules > 0:
		out := make([]uint64, *flagSchedules)
		for i := range out {
			out[i] = uint64(i + 1)
		}
		return out
	}
	return sampleSeeds
}

// summary aggregates a sweep.
type summary struct {
	mu         sync.Mutex
	schedules  int
	byWorkload map[Workload]int
	faults     map[Kind]int
	skipped    map[Kind]int
	recoveries int // membership changes the ranks recovered through (epochs after the first)
	recMS      []float64
	wrong      int
	hangs      int
	leftovers  int
	violations int
	exhausted  int
	overrun    int // survivable schedules that lost more processes than spares to false suspicion
	declared   int // processes declared failed, over all schedules
	resumed    int
	failedRuns []string
}

// TestChaos runs seeded fault schedules over real processes and checks
// the invariants after each (see doc.go). Without flags it runs the fixed
// sample; -chaos.schedules=N runs seeds 1..N; -chaos.seeds=S replays.
func TestChaos(t *testing.T) {
	if bins.err != nil {
		t.Skip(bins.err)
	}
	sum := &summary{byWorkload: map[Workload]int{}, faults: map[Kind]int{}, skipped: map[Kind]int{}}
	refs := &references{}
	for _, seed := range seeds(t) {
		s := ScheduleOf(seed)
		t.Run(fmt.Sprintf("%s/seed=%d", s.Workload, seed), func(t *testing.T) {
			runSchedule(t, s, refs, sum)
		})
	}
	table := sum.table()
	t.Logf("chaos summary:\n%s", table)
	if *flagSummary != "" {
		if err := os.WriteFile(*flagSummary, []byte(table), 0o644); err != nil {
			t.Errorf("write -chaos.summary: %v", err)
		}
	}
}

// runSchedule runs one schedule and checks it.
func runSchedule(t *testing.T, s Schedule, refs *references, sum *summary) {
	t.Logf("schedule:\n%s", s)
	ref := refs.get(t, s.Workload)
	var (
		res Result
		j   *job
		out = t.TempDir()
	)
	if s.Expect == ResumeOrRefuse {
		j, res = diskSchedule(t, s)
	} else {
		j, res = run(t, build(t, s, out))
		if s.Workload == TeraSort && res.Code == 0 {
			res.Answer = validate(t, out)
		}
	}
	j.run.Lock()
	for _, l := range j.lines {
		if strings.HasPrefix(l.text, "chaos: skipped ") || strings.HasPrefix(l.text, "chaos: fault not applied") {
			res.Skipped++
		}
	}
	j.run.Unlock()
	viol := Violations(s, res, ref)
	ended := time.Now()
	left := j.leftovers()
	t.Logf("checks after the job took %v", time.Since(ended).Round(time.Millisecond))
	if len(left) > 0 {
		viol = append(viol, fmt.Sprintf("processes left running after gaspirun ended: pids %v", left))
	}
	recoveries := recoveryTimes(j)
	sum.add(s, res, ref, viol, left, recoveries, j)
	if len(viol) > 0 {
		keep(t, fmt.Sprintf("seed-%d.log", s.Seed), s.String(), res.Lines)
	}
	if len(viol) > 0 {
		t.Errorf("chaos schedule failed:\n%s\nviolations:\n  %s\nreplay: %s\nlast output:\n%s",
			s, strings.Join(viol, "\n  "), s.Replay(), tail(res.Lines, 40))
	}
}

// build turns a schedule into a gaspirun job and the function that applies
// its faults.
func build(t *testing.T, s Schedule, out string) spec {
	sp := spec{ranks: s.Ranks, spares: s.Spares}
	if s.RanksPerHost > 0 {
		sp.launcher = append(sp.launcher, "--ranks-per-host", strconv.Itoa(s.RanksPerHost))
	}
	switch s.Workload {
	case KMeans:
		w := kmWorkloadFor(s.Ranks)
		sp.program = append([]string{bins.kmeans}, w.args()...)
		if s.Ranks != Ranks {
			sp.gaspirun, sp.program[0] = scaleBins.gaspirun, scaleBins.kmeans
		}
		sp.program = append(sp.program, "--mirrors", strconv.Itoa(s.Mirrors))
		for _, f := range s.Faults {
			switch f.Kind {
			case KillCommit:
				at := max(w.ckptEvery, f.At/w.ckptEvery*w.ckptEvery)
				sp.program = append(sp.program, "--inject", fmt.Sprintf("kill:rank=%d,iter=%d,phase=commit", f.Rank, at))
			case KillMirror:
				sp.program = append(sp.program, "--inject", fmt.Sprintf("kill:rank=%d,iter=%d", f.Rank, f.At),
					"--inject", fmt.Sprintf("kill:mirror-of=%d,iter=%d", f.Rank, f.At+2*w.ckptEvery))
			}
		}
	case TeraSort:
		in := tsInput(t)
		sp.program = []string{bins.terasort, "sort", "--in", in, "--out", out, "--ckpt-records", strconv.Itoa(tsRecords() / 40),
			"--mirrors", strconv.Itoa(s.Mirrors)}
	}
	sp.apply = func(j *job) {
		for _, f := range s.Faults {
			if !apply(j, s, f) {
				j.run.Lock()
				j.lines = append(j.lines, line{text: "chaos: fault not applied (the job ended first): " + f.String(), at: time.Now()})
				j.run.Unlock()
			}
		}
	}
	return sp
}

// programKills reports whether the program injects kills of its own
// (at fixed iterations, not waiting for the harness).
func (s Schedule) programKills() bool {
	for _, f := range s.Faults {
		if f.Kind == KillCommit || f.Kind == KillMirror {
			return true
		}
	}
	return false
}

// lateBy is how many iterations past its point a K-means fault may still
// be applied: two checkpoint intervals.
const lateBy = 20

// settledLocked reports whether the job has no recovery under way: every
// failure a survivor confirmed was followed by rank 0's recovery line, and
// since that line the job went on long enough to have committed a new
// checkpoint with the new process in it (K-means: a checkpoint interval
// and one more iteration; TeraSort: half a second). A schedule's faults
// are meant one at a time (kill-in-recovery excepted, which makes its own
// overlap): two losses in one recovery window can take a rank together with
// its only mirror, which no survivable schedule means to do. Called with
// run's lock held.
func (j *job) settledLocked(s Schedule) bool {
	lastRec, lastConfirm, lastLoss := -1, -1, -1
	for i, l := range j.lines {
		switch {
		case recoveryRE.MatchString(l.text):
			lastRec = i
		case confirmRE.MatchString(l.text):
			lastConfirm = i
		case strings.HasPrefix(l.text, "chaos: applied ") && causesRecovery(l.text):
			lastLoss = i
		}
	}
	// A fault applied a moment ago may not be confirmed yet: its recovery
	// must have been seen too.
	if lastConfirm > lastRec || lastLoss > lastRec {
		return false
	}
	if lastRec < 0 {
		return true
	}
	if s.Workload == TeraSort {
		return time.Since(j.lines[lastRec].at) > 500*time.Millisecond
	}
	iters := 0
	for _, l := range j.lines[lastRec:] {
		if iterRE.MatchString(l.text) {
			iters++
		}
	}
	return iters > kmWorkloadFor(s.Ranks).ckptEvery
}

// causesRecovery reports whether an applied-fault note is of a kind that
// changes the membership (every kind but the short pause and the slow or
// lossy link).
func causesRecovery(note string) bool {
	for _, k := range []Kind{PauseShort, SlowLink, LossyLink} {
		if strings.HasPrefix(note, "chaos: applied "+string(k)+" ") {
			return false
		}
	}
	return true
}

// reached waits until the job reaches a fault's trigger point.
func reached(j *job, s Schedule, at int) bool {
	if s.Workload == KMeans {
		return j.waitUntil(jobDeadline, func() bool { return j.iter >= at })
	}
	// TeraSort's time counts from the first view applied: the rendezvous
	// is over (every process registered) and the job runs. Counted from
	// gaspirun's start, a fault could land on a process that a starved
	// machine had not yet brought to the rendezvous, which then waits for
	// it in vain: no schedule means that.
	var begin time.Time
	if !j.waitUntil(jobDeadline, func() bool {
		for _, l := range j.lines {
			if viewRE.MatchString(l.text) {
				begin = l.at
				return true
			}
		}
		return false
	}) {
		return false
	}
	d := time.Until(begin.Add(time.Duration(at) * time.Millisecond))
	if d > 0 {
		j.waitUntil(d, func() bool { return false })
	}
	return !j.run.Ended()
}

// apply applies one fault; false if the job ended before it could.
func apply(j *job, s Schedule, f Fault) bool {
	note := func(format string, a ...any) {
		j.run.Lock()
		j.lines = append(j.lines, line{text: "chaos: " + fmt.Sprintf(format, a...), at: time.Now()})
		j.run.Unlock()
	}
	if f.Kind == KillCommit || f.Kind == KillMirror {
		return true // injected by the program itself
	}
	if !reached(j, s, f.At) {
		return false
	}
	if !j.waitUntil(jobDeadline, func() bool { return j.settledLocked(s) }) {
		return false
	}
	if f.Kind == KillLeader {
		j.waitUntil(10*time.Second, func() bool { return j.leader >= 0 })
	}
	if s.Workload == KMeans && s.programKills() {
		// An earlier fault's duration can make this one late. Late, it
		// could land inside the recovery from a kill the program injects
		// itself (kill-commit, kill-mirror) and lose a rank together with
		// its only mirror, which no schedule means to do: skip it.
		j.run.Lock()
		iter := j.iter
		j.run.Unlock()
		if iter > f.At+lateBy {
			note("skipped %s: late, the job was at iteration %d", f, iter)
			return false
		}
	}
	switch f.Kind {
	case KillRank:
		p := j.holder(f.Rank)
		_, ok := j.signal(p, syscall.SIGKILL)
		note("applied %s: SIGKILL process %d", f, p)
		return ok
	case KillSpare:
		idle := j.idleSpares(s.Ranks, s.Spares)
		for _, p := range idle {
			if _, ok := j.signal(p, syscall.SIGKILL); ok {
				note("applied %s: SIGKILL spare process %d", f, p)
				return true
			}
		}
		note("skipped %s: no idle spare alive", f)
		return false
	case KillLeader:
		j.run.Lock()
		p := j.leader
		j.run.Unlock()
		if p < 0 {
			note("skipped %s: no raft leader known", f)
			return false
		}
		_, ok := j.signal(p, syscall.SIGKILL)
		note("applied %s: SIGKILL raft leader process %d", f, p)
		return ok
	case KillInRecovery:
		p := j.holder(f.Rank)
		from := j.mark()
		if _, ok := j.signal(p, syscall.SIGKILL); !ok {
			return false
		}
		note("applied %s: SIGKILL process %d", f, p)
		if !j.waitUntil(jobDeadline, func() bool { _, ok := j.findAfter(from, confirmRE); return ok }) {
			return false
		}
		q := j.holder((f.Rank + 2) % s.Ranks)
		_, ok := j.signal(q, syscall.SIGKILL)
		note("applied %s: then, in the recovery, SIGKILL process %d (rank %d)", f, q, (f.Rank+2)%s.Ranks)
		return ok
	case PauseShort, PauseLong:
		p := j.holder(f.Rank)
		pid, ok := j.signal(p, syscall.SIGSTOP)
		if !ok {
			return false
		}
		j.run.Lock()
		j.stopped[pid] = true
		j.run.Unlock()
		note("applied %s: SIGSTOP process %d", f, p)
		time.Sleep(f.Dur) // the fault's own duration, in real time
		syscall.Kill(pid, syscall.SIGCONT)
		note("SIGCONT process %d", p)
		return true
	case SlowLink, LossyLink, Partition:
		p := j.holder(f.Rank)
		rule := map[Kind]string{
			SlowLink:  fmt.Sprintf("proc=%d delay=%gms", p, f.Param),
			LossyLink: fmt.Sprintf("proc=%d loss=%g", p, f.Param),
			Partition: fmt.Sprintf("proc=%d partition", p),
		}[f.Kind]
		j.setRule(rule + "\n")
		note("applied %s: netfault %q", f, rule)
		time.Sleep(f.Dur) // the fault's own duration, in real time
		j.setRule("")
		note("healed %s", f)
		return true
	case HostLoss:
		host := fmt.Sprintf("host%d", f.Rank/2)
		var hit []int
		for _, p := range j.pids.OnHost(host) {
			if _, ok := j.signal(p, syscall.SIGKILL); ok {
				hit = append(hit, p)
			}
		}
		slices.Sort(hit)
		note("applied %s: SIGKILL processes %v of %s", f, hit, host)
		return len(hit) > 0
	}
	return false
}

// recoveryTimes measures, for every fault the harness applied that cost a
// process, the time from the fault to the job's next progress after the
// recovery: for K-means the first iteration rank 0 completes after its
// recovery line; for TeraSort the last "recovered" line of the epoch
// that followed.
func recoveryTimes(j *job) []time.Duration {
	j.run.Lock()
	defer j.run.Unlock()
	var out []time.Duration
	for i, l := range j.lines {
		if !strings.HasPrefix(l.text, "chaos: applied ") || strings.Contains(l.text, "pause-short") ||
			strings.Contains(l.text, "slow-link") || strings.Contains(l.text, "lossy-link") || strings.Contains(l.text, "kill-spare") {
			continue
		}
		if strings.Contains(l.text, "then, in the recovery") {
			continue // the second kill of kill-in-recovery joins the first's recovery
		}
		rec, ok := j.findAfter(i, recoveryRE)
		if ok {
			k := slices.IndexFunc(j.lines, func(x line) bool { return x == rec })
			if it, ok := j.findAfter(k, iterRE); ok {
				out = append(out, it.at.Sub(l.at))
			}
			continue
		}
		var last time.Time
		for _, x := range j.lines[i:] {
			if strings.Contains(x.text, "msg=recovered") {
				last = x.at
			}
		}
		if !last.IsZero() {
			out = append(out, last.Sub(l.at))
		}
	}
	return out
}

func (s *summary) add(sc Schedule, res Result, ref string, viol []string, left []int, recs []time.Duration, j *job) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.schedules++
	s.byWorkload[sc.Workload]++
	j.run.Lock()
	for _, l := range j.lines {
		for _, k := range Kinds {
			if strings.HasPrefix(l.text, "chaos: applied "+string(k)+" ") && !strings.Contains(l.text, "then, in the recovery") {
				s.faults[k]++
			}
			if strings.HasPrefix(l.text, "chaos: fault not applied (the job ended first): "+string(k)+" ") ||
				strings.HasPrefix(l.text, "chaos: skipped "+string(k)+" ") {
				s.skipped[k]++
			}
		}
	}
	j.run.Unlock()
	for _, f := range sc.Faults {
		if f.Kind == KillCommit || f.Kind == KillMirror {
			s.faults[f.Kind]++ // applied by the program itself, or between runs
		}
	}
	s.recoveries += Epochs(res.Lines) - 1
	for _, r := range recs {
		s.recMS = append(s.recMS, float64(r)/float64(time.Millisecond))
	}
	if res.Answer != "" && res.Answer != ref {
		s.wrong++
	}
	if res.Hung {
		s.hangs++
	}
	if len(left) > 0 {
		s.leftovers++
	}
	if sc.Expect == Exhaust {
		s.exhausted++
	}
	s.declared += DeclaredFailed(res.Lines)
	if sc.Expect == Succeed && res.Code == ExitSparesExhausted && len(viol) == 0 {
		s.overrun++
	}
	if sc.Expect == ResumeOrRefuse && res.Answer == ref {
		s.resumed++
	}
	if len(viol) > 0 {
		s.violations++
		s.failedRuns = append(s.failedRuns, fmt.Sprintf("seed %d: %s", sc.Seed, viol[0]))
	}
}

func (s *summary) table() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "| schedules | K-means | TeraSort | recoveries | recovery median | recovery p99 | wrong answers | hangs | leftover processes | schedules with violations |\n")
	fmt.Fprintf(&b, "|---|---|---|---|---|---|---|---|---|---|\n")
	fmt.Fprintf(&b, "| %d | %d | %d | %d | %.0f ms | %.0f ms | %d | %d | %d | %d |\n\n",
		s.schedules, s.byWorkload[KMeans], s.byWorkload[TeraSort], s.recoveries,
		stats.Percentile(s.recMS, 50), stats.Percentile(s.recMS, 99), s.wrong, s.hangs, s.leftovers, s.violations)
	fmt.Fprintf(&b, "| fault kind | injected | not applied (job ended first / no target) |\n|---|---|---|\n")
	total := 0
	for _, k := range Kinds {
		fmt.Fprintf(&b, "| %s | %d | %d |\n", k, s.faults[k], s.skipped[k])
		total += s.faults[k]
	}
	fmt.Fprintf(&b, "| all | %d | |\n\n", total)
	fmt.Fprintf(&b, "%d schedules drew more losses than spares (expected: exit 75, or 137 without spares); %d disk-corruption resumes gave the reference result.\n", s.exhausted, s.resumed)
	fmt.Fprintf(&b, "%d processes were declared failed in all; %d survivable schedules ended with exit 75 because more processes were declared failed than they had spares (heartbeats starved on a busy machine).\n", s.declared, s.overrun)
	for _, f := range s.failedRuns {
		fmt.Fprintf(&b, "- %s\n", f)
	}
	return b.String()
}

func tail(lines []string, n int) string {
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// references holds the failure-free answers, computed once per test run.
type references struct {
	mu sync.Mutex
	m  map[Workload]string
}

func (r *references) get(t *testing.T, w Workload) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil {
		r.m = map[Workload]string{}
	}
	if a, ok := r.m[w]; ok {
		return a
	}
	var a string
	switch w {
	case KMeans:
		_, res := run(t, spec{ranks: Ranks, program: append([]string{bins.kmeans}, kmWorkload().args()...)})
		if res.Code != 0 || res.Answer == "" {
			t.Fatalf("failure-free K-means reference failed (exit %d):\n%s", res.Code, tail(res.Lines, 30))
		}
		a = res.Answer
	case TeraSort:
		a = sumInput(t, tsInput(t))
	}
	t.Logf("reference %s: %s", w, a)
	r.m[w] = a
	return a
}

var tsIn struct {
	once sync.Once
	dir  string
}

// tsInput generates the TeraSort input once per test binary.
func tsInput(t *testing.T) string {
	tsIn.once.Do(func() {
		dir, err := os.MkdirTemp("", "chaos-terasort-")
		if err != nil {
			t.Fatal(err)
		}
		out, err := runTool(bins.terasort, "gen", "--records", strconv.Itoa(tsRecords()), "--out", dir, "--quiet")
		if err != nil {
			t.Fatalf("terasort gen: %v\n%s", err, out)
		}
		tsIn.dir = dir
	})
	if tsIn.dir == "" {
		t.Fatal("terasort input could not be generated")
	}
	return tsIn.dir
}

// sumInput is the input's count and checksum, as validate prints them.
func sumInput(t *testing.T, dir string) string {
	out, err := runTool(bins.terasort, "sum", dir)
	if err != nil {
		t.Fatalf("terasort sum: %v\n%s", err, out)
	}
	return lastLine(out)
}

// validate checks the sorted output (its _SUCCESS marker, which must list
// exactly the part files, and their order) and returns its count and
// checksum line; a missing marker or a disorder gives a line that cannot
// equal the input's.
func validate(t *testing.T, dir string) string {
	out, err := runTool(bins.terasort, "validate", dir)
	if err != nil {
		return "validate failed: " + lastLine(out)
	}
	return lastLine(out)
}

func lastLine(s string) string {
	s = strings.TrimRight(s, "\n")
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// diskSchedule runs the disk-level scenario: a job with --ckpt-dir and no
// spares is killed at the fault's iteration (it fails, exit 137), one rank
// file of its newest complete disk checkpoint is corrupted or truncated,
// and gaspirun --resume runs the job again without faults. The result is
// the resumed run's.
func diskSchedule(t *testing.T, s Schedule) (*job, Result) {
	f := s.Faults[0]
	w := kmWorkload()
	dir := t.TempDir()
	prog := append([]string{bins.kmeans}, w.args()...)
	prog = append(prog, "--ckpt-dir", dir)
	// The kill comes late enough for two disk checkpoints, so that an
	// older one exists to fall back to.
	at := max(f.At, 3*w.ckptEvery+1)
	_, first := run(t, spec{ranks: Ranks, program: prog, apply: func(j *job) {
		if reached(j, s, at) {
			j.signal(j.holder(f.Rank), syscall.SIGKILL)
		}
	}})
	if first.Code != ExitKilledNoSpares {
		t.Logf("the killed run exited %d (want %d); resuming anyway", first.Code, ExitKilledNoSpares)
	}
	newest, err := newestCheckpoint(dir)
	if err != nil {
		t.Fatalf("disk level after the kill: %v", err)
	}
	victim := filepath.Join(newest, fmt.Sprintf("rank-%d.snap", f.Rank))
	st, err := os.Stat(victim)
	if err != nil {
		t.Fatalf("disk level: %v", err)
	}
	if f.Param == 1 {
		err = os.Truncate(victim, st.Size()/2)
		t.Logf("chaos: truncated %s from %d to %d bytes", victim, st.Size(), st.Size()/2)
	} else {
		var fh *os.File
		if fh, err = os.OpenFile(victim, os.O_RDWR, 0); err == nil {
			b := make([]byte, 8)
			off := st.Size() / 2
			if _, err = fh.ReadAt(b, off); err == nil {
				for i := range b {
					b[i] ^= 0x5a
				}
				_, err = fh.WriteAt(b, off)
			}
			fh.Close()
		}
		t.Logf("chaos: corrupted 8 bytes at offset %d of %s", st.Size()/2, victim)
	}
	if err != nil {
		t.Fatalf("damage %s: %v", victim, err)
	}
	j, res := run(t, spec{ranks: Ranks, launcher: []string{"--resume", dir}, program: prog})
	j.run.Lock()
	j.lines = append(j.lines, line{text: "chaos: applied " + f.String(), at: time.Now()})
	j.run.Unlock()
	return j, res
}

// newestCheckpoint returns the newest complete checkpoint directory (one
// with a manifest) under dir.
func newestCheckpoint(dir string) (string, error) {
	ms, err := filepath.Glob(filepath.Join(dir, "ckpt-*", "manifest.json"))
	if err != nil || len(ms) == 0 {
		return "", fmt.Errorf("no complete checkpoint in %s", dir)
	}
	best, bestID := "", -1
	for _, m := range ms {
		d := filepath.Dir(m)
		id, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), "ckpt-"))
		if err == nil && id > bestID {
			best, bestID = d, id
		}
	}
	return best, nil
}

// runTool runs a command to completion and returns its standard output,
// with its standard error appended when it fails.
func runTool(bin string, args ...string) (string, error) {
	cmd := exec.Command(bin, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out) + stderr.String(), err
	}
	return string(out), nil
}

// keep writes the whole output of a failed schedule to -chaos.keep's
// directory, when it is set.
func keep(t *testing.T, name, schedule string, lines []string) {
	if *flagKeep == "" {
		return
	}
	p := filepath.Join(*flagKeep, name)
	if err := os.WriteFile(p, []byte(schedule+"\n"+strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Errorf("-chaos.keep: %v", err)
	} else {
		t.Logf("whole output: %s", p)
	}
}
