package kmtier

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/internal/netfault"
	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
)

var (
	storeLineRE = regexp.MustCompile(`^\[[rsp]\d+\] inject: store rank (\d+) \(proc (\d+)\) into rank (\d+): stores=(\d+) direct=(\d+) attempts=(\d+) `)
	firstLookRE = regexp.MustCompile(`^\[[rsp]\d+\] inject: store check rank (\d+) \(proc (\d+)\): first look in epoch (\d+)$`)
	checkedRE   = regexp.MustCompile(`^\[[rsp]\d+\] inject: store check rank (\d+) \(proc (\d+)\): epoch (\d+): looks=(\d+) older_seen=(\d+)$`)
)

// storeCount is one of the writer's count lines, as the test read it.
type storeCount struct {
	at                       time.Time
	stores, direct, attempts int
}

// TestPartitionedWriterIsFenced is the same-host fencing contract
// (docs/design.md §3, pgas/doc.go) over real processes through job.Init:
// four ranks and a spare on one host, shared memory on (the default),
// and rank 1 (process 1) storing all the time into rank 2's memory, a
// record and a notification (kmeans --inject store:rank=1,iter=3: every
// half millisecond, whatever its calls return). Then process 1 is
// partitioned (internal/netfault: no frame in or out, but its direct
// stores go on) until it was declared failed, the spare took rank 1 and
// rank 2 recovered, and for 2 s more while rank 2 iterates, looking at the
// record and the notification after every iteration. Process 1 must have
// stored into rank 2's memory after the partition began, must still be
// trying during rank 2's looks after its Recover (its count lines say
// so), and rank 2 must see nothing of it then: no record of the older
// epoch changing, no notification of it set (the program fails the run
// otherwise, and reports older_seen). Healed, process 1 learns it was
// replaced and exits 77 by itself; the job ends with the failure-free
// result.
func TestPartitionedWriterIsFenced(t *testing.T) {
	if bins.err != nil {
		t.Skip(bins.err)
	}
	const writer, watcher, spare = 1, 2, ranks
	// Enough iterations to outlast the partition, its detection, the
	// recovery and 2 s of looks on a busy machine (an iteration takes a
	// few milliseconds, ten times that under the race detector).
	iters := 3000
	if proctest.Race {
		iters = 1000
	}
	args := []string{"--generate", "200000", "--dim", "10", "--k", "20", "--max-iter", strconv.Itoa(iters), "--ckpt-every", "10",
		"--inject", fmt.Sprintf("store:rank=%d,iter=3", writer)}
	rules := t.TempDir()
	setRule := func(s string) {
		tmp := filepath.Join(rules, "rules.tmp")
		if err := os.WriteFile(tmp, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(rules, netfault.RulesFile)); err != nil {
			t.Fatal(err)
		}
		t.Logf("netfault rules now %q", strings.TrimSpace(s))
	}
	jobID := fmt.Sprintf("kmtier-fence-%d-%x", os.Getpid(), rand.Uint64())
	gargs := []string{"-n", strconv.Itoa(ranks), "--spares", "1", "--timeout", (3 * jobDeadline).String(), "--grace", grace.String(),
		"--job-id", jobID, "--collapse", "0", "--", bins.kmeans}
	gargs = append(gargs, args...)
	cmd := exec.Command(bins.gaspirun, gargs...)
	// The writer must outlive the survivor's Recover to be fenced there:
	// a partitioned process gives up after the cut-off (10 s), and on a
	// busy machine the failure detector's local health can take most of
	// that to declare it failed, so the writer had gone before rank 2
	// looked. It gives up at the heal instead (fenced).
	cmd.Env = append(os.Environ(), "PGAS_LOG=info", netfault.EnvVar+"="+rules, "PGAS_CUTOFF=2m")
	var (
		lines   []proctest.Line
		counts  []storeCount // process writer's, in order
		looks   = map[int]time.Time{}
		checked []string
	)
	onLine := func(l proctest.Line) {
		lines = append(lines, l)
		if m := storeLineRE.FindStringSubmatch(l.Text); m != nil && m[2] == strconv.Itoa(writer) {
			n := func(i int) int { v, _ := strconv.Atoi(m[i]); return v }
			counts = append(counts, storeCount{l.Time, n(4), n(5), n(6)})
		}
		if m := firstLookRE.FindStringSubmatch(l.Text); m != nil && m[1] == strconv.Itoa(watcher) {
			e, _ := strconv.Atoi(m[3])
			looks[e] = l.Time
		}
		if checkedRE.MatchString(l.Text) {
			checked = append(checked, l.Text)
		}
	}
	t.Logf("gaspirun %s", strings.Join(gargs, " "))
	j, err := proctest.Start(proctest.JobConfig{OnLine: onLine, Bound: 3*jobDeadline + 30*time.Second}, cmd)
	if err != nil {
		t.Fatalf("start gaspirun: %v", err)
	}
	pids := proctest.NewProcs()
	stopWatch := pids.Watch(jobID, cmd.Process.Pid, 20*time.Millisecond)
	text := func() string {
		j.Lock()
		defer j.Unlock()
		var b strings.Builder
		for _, l := range lines {
			b.WriteString(l.Text + "\n")
		}
		return b.String()
	}
	wait := func(what string, d time.Duration, cond func() bool) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		if !j.WaitCond(ctx, cond) {
			j.Stop(10 * time.Second)
			t.Fatalf("timed out after %v (or the job ended) waiting for %s\n%s", d, what, text())
		}
	}
	wait("the writer's stores into rank 2's memory", jobDeadline, func() bool { return len(counts) >= 3 && counts[len(counts)-1].direct > 0 })
	setRule(fmt.Sprintf("proc=%d partition\n", writer))
	j.Lock()
	partitioned := time.Now()
	j.Unlock()
	wait("process 1 to put the partition in force", 10*time.Second, func() bool {
		for _, l := range lines {
			if strings.Contains(l.Text, "netfault: rule in force") && strings.Contains(l.Text, fmt.Sprintf("proc=%d ", writer)) && strings.Contains(l.Text, "rule=partition") {
				return true
			}
		}
		return false
	})
	j.Lock()
	for _, l := range lines {
		if strings.Contains(l.Text, "netfault: rule in force") && strings.Contains(l.Text, fmt.Sprintf("proc=%d ", writer)) && strings.Contains(l.Text, "rule=partition") {
			partitioned = l.Time
		}
	}
	j.Unlock()
	wait("rank 2's first look in epoch 2, after its Recover", jobDeadline, func() bool { _, ok := looks[2]; return ok })
	// Rank 2 looks after every iteration; process 1 goes on meanwhile.
	time.Sleep(2 * time.Second) // a real-process test: a span of real time
	j.Lock()
	healed := time.Now()
	j.Unlock()
	setRule("")
	if !j.WaitEnd(3 * jobDeadline) {
		j.Stop(10 * time.Second)
		t.Fatalf("the job did not end within %v\n%s", 3*jobDeadline, text())
	}
	stopWatch()
	pids.Scan(jobID, cmd.Process.Pid)
	checkGone(t, pids, jobID, ranks)
	out := text()
	if code := j.ExitCode(); code != 0 || !strings.Contains(out, "[r0] centroids sha256=") {
		t.Fatalf("gaspirun exited %d, want 0 with rank 0's result\n%s", code, out)
	}
	j.Lock()
	looked := looks[2]
	var atPart, atLook, atHeal, last storeCount
	for _, c := range counts {
		if c.at.Before(partitioned) || atPart.at.IsZero() {
			atPart = c // the last count before the partition (or the first)
		}
		if !c.at.After(looked) {
			atLook = c
		}
		if !c.at.After(healed) {
			atHeal = c
		}
		last = c
	}
	j.Unlock()
	afterPart := last.direct - atPart.direct
	during := atHeal.attempts - atLook.attempts
	t.Logf("process %d: %d direct stores before the partition, %d after it began (%d in all); %d attempts during rank %d's %v of looks after its Recover (until the heal)",
		writer, atPart.direct, afterPart, last.direct, during, watcher, healed.Sub(looked).Round(time.Millisecond))
	if afterPart <= 0 {
		t.Fatalf("process %d made no direct store after the partition began: the test shows nothing\n%s", writer, out)
	}
	if during <= 0 {
		t.Fatalf("process %d made no attempt to store while rank %d looked after its Recover: nothing was there to fence\n%s", writer, watcher, out)
	}
	seen := false
	for _, c := range checked {
		m := checkedRE.FindStringSubmatch(c)
		t.Logf("%s", strings.TrimSpace(c))
		if m[1] == strconv.Itoa(watcher) && m[3] == "2" {
			seen = true
			if m[5] != "0" {
				t.Errorf("rank %d saw a store of the older epoch after its Recover: %s", watcher, c)
			}
			if n, _ := strconv.Atoi(m[4]); n < 10 {
				t.Errorf("rank %d looked only %d times in epoch 2: %s", watcher, n, c)
			}
		}
	}
	if !seen {
		t.Fatalf("rank %d reported no looks in epoch 2\n%s", watcher, out)
	}
	if !strings.Contains(out, fmt.Sprintf("gaspirun: process %d (formerly rank %d) exited with code 77", writer, writer)) &&
		!strings.Contains(out, fmt.Sprintf("gaspirun: process %d (formerly rank %d) exited with code 74", writer, writer)) {
		t.Fatalf("process %d did not end by itself, fenced (77) or cut off (74)\n%s", writer, out)
	}
	if !strings.Contains(out, fmt.Sprintf("spare process %d now holds rank %d", spare, writer)) {
		t.Fatalf("spare process %d did not take rank %d\n%s", spare, writer, out)
	}
	t.Logf("rank %d's looks began %v after the partition", watcher, looked.Sub(partitioned).Round(time.Millisecond))
}
