package mhtier

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
	"github.com/gaspigo/gaspigo/internal/testkit/simhost"
)

// gaspirun --hostfile --respawn across the three hosts: the spare pool
// refills with processes started on the hosts that are left. The job is
// the tier's K-means with 4 ranks and 1 spare from a hostfile of three
// hosts with 2 slots each, so gaspirun places ranks 0 and 1 on node1,
// ranks 2 and 3 on node2 and the spare on node3. node2 crashes for good:
// one spare cannot cover its two ranks, so a replacement, which gaspirun
// starts on node1 or node3, must take one (joined before the failures
// are confirmed, or waited for).
//
// gaspirun reaches the hosts through hostExec (below), its --ssh: the
// processes run in the hosts' namespaces exactly as over ssh (gaspirun
// --remote-exec reading the program, its environment and the token from
// stdin), without an sshd per host, which test/sshtier covers.

const (
	// respawnJobWait bounds gaspirun from its start to its exit: the
	// failure-free job takes seconds, a replacement's start and join a few
	// more, on a busy 2-core machine many times that.
	respawnJobWait = 4 * time.Minute
	// refillWait is gaspirun's --refill-wait: how long the rank the
	// spare could not take waits for its replacement. Generous, for a
	// replacement started on a starved machine.
	refillWait = 2 * time.Minute
	// respawnProcs is the job's processes as started, -n 4 --spares 1:
	// replacements get ids from it up.
	respawnProcs = 5
)

var (
	respawnFinalRE  = regexp.MustCompile(`^\[r0\] (centroids sha256=[0-9a-f]{64} sse=\S+ iterations=\d+)$`)
	respawnIterRE   = regexp.MustCompile(`^\[r0\] iter\s+(\d+)\s`)
	respawnedRE     = regexp.MustCompile(`^gaspirun: respawned s(\d+) on host (\S+) for lost (\S+) \(\d+ of \d+\)$`)
	joinedSpareRE   = regexp.MustCompile(`^gaspirun: s(\d+) joined the job as a spare \(pid \d+ on (\S+)\)$`)
	nowHoldsRE      = regexp.MustCompile(`^gaspirun: spare process (\d+)(?: on \S+)? now holds rank (\d+) \(epoch \d+\)$`)
	placementSuffix = "placement: node1: r0-1; node2: r2-3; node3: s4"
)

// respawnWorkload is the tier's K-means with 600 iterations whatever the
// convergence (a few seconds on a quiet machine): the crash, which comes
// after iteration 10 as fast as a busy machine lets the test cut and
// kill, leaves most of the job to do with the replacements.
func respawnWorkload() []string { return append(withMaxIter(workload, 600), "--tol", "0") }

// hostExec writes gaspirun's --ssh for the hosts of c into dir and
// returns its path and the directory of the hosts the test took down.
// Called as gaspirun calls a connector whose program is not named ssh,
// "hostExec HOST COMMAND", it runs COMMAND with a shell in HOST's
// namespace, as sshd would. A host with a file of its name in the down
// directory fails like ssh to a host that is off (exit 255), at once
// rather than after ssh's ConnectTimeout.
func hostExec(t *testing.T, c *simhost.Cluster, dir string) (path, down string) {
	t.Helper()
	ip, err := exec.LookPath("ip")
	if err != nil {
		t.Skipf("no ip on PATH (iproute2): %v", err)
	}
	down = filepath.Join(dir, "down")
	if err := os.Mkdir(down, 0o755); err != nil {
		t.Fatal(err)
	}
	var cases strings.Builder
	for _, h := range c.Hosts() {
		fmt.Fprintf(&cases, "%s) ns=%s ;;\n", h.Name(), h.Namespace())
	}
	script := fmt.Sprintf(`#!/bin/sh
# hostExec HOST COMMAND: COMMAND on the simulated host HOST, as over ssh.
host=$1
shift
case "$host" in
%s*) echo "hostExec: no simulated host $host" >&2; exit 255 ;;
esac
if [ -e %q/"$host" ]; then
	echo "ssh: connect to host $host port 22: Connection timed out" >&2
	exit 255
fi
exec %s netns exec "$ns" /bin/sh -c "$*"
`, cases.String(), down, ip)
	path = filepath.Join(dir, "hostexec")
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path, down
}

// TestRespawnHostCrash: gaspirun --hostfile --respawn, and node2 (ranks 2
// and 3) crashes for good once the job has done 10 iterations: it drops
// off the network silently and everything on it is SIGKILLed, and it
// stays down. node3's spare takes one of the two ranks, the other waits
// for a replacement; gaspirun starts one replacement per lost process,
// each on node1 or node3, never on node2, and one of them takes the
// waiting rank over TCP across the hosts. The job exits 0 with the
// failure-free answer, no runtime applied a frame from a stale epoch, and
// nothing of the job is left on any host once gaspirun has exited.
func TestRespawnHostCrash(t *testing.T) {
	args := respawnWorkload()
	ref := "[r0] " + referenceOf(t, args)
	c := newCluster(t)
	dir := t.TempDir()
	connector, down := hostExec(t, c, dir)
	hostfile := filepath.Join(dir, "hostfile")
	if err := os.WriteFile(hostfile, []byte("node1 slots=2\nnode2 slots=2\nnode3 slots=2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// --collapse 0: every line as it comes, so that the crash follows
	// iteration 10 closely.
	gargs := []string{"-n", "4", "--spares", "1", "--respawn", "--refill-wait", refillWait.String(),
		"--hostfile", hostfile, "--ssh", connector, "--rendezvous-addr", c.FrontAddr().String(),
		"--timeout", respawnJobWait.String(), "--grace", "1s", "--collapse", "0", "--", bins.kmeans}
	cmd := exec.Command(bins.gaspirun, append(gargs, args...)...)
	cmd.Env = append(os.Environ(), "PGAS_LOG=info", "GOMAXPROCS=1", "GORACE=atexit_sleep_ms=0")
	j, err := proctest.Start(proctest.JobConfig{Bound: respawnJobWait + 30*time.Second}, cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(j.Kill)
	t.Logf("gaspirun %s on %s (%v)", strings.Join(cmd.Args[1:], " "), c.ID(), c.Subnet())

	waitGaspirun(t, j, "the placement", func(l string) bool {
		return strings.HasPrefix(l, "gaspirun: ssh launch, rendezvous "+c.FrontAddr().String()+":") && strings.HasSuffix(l, placementSuffix)
	})
	waitGaspirun(t, j, fmt.Sprintf("iteration %d", triggerIter), func(l string) bool {
		m := respawnIterRE.FindStringSubmatch(l)
		if m == nil {
			return false
		}
		i, _ := strconv.Atoi(m[1])
		return i >= triggerIter
	})
	node2 := c.Host(1)
	crashForGood(t, c, node2, down)

	if !j.WaitEnd(respawnJobWait) {
		t.Fatalf("gaspirun still running %v after its start\n%s", respawnJobWait, gaspirunOutput(j))
	}
	_, _, ended, _ := j.Procs()[0].Exit()
	out := gaspirunOutput(j)
	if code := j.ExitCode(); code != 0 {
		t.Fatalf("gaspirun exited %d, want 0 (the lost ranks taken over)\n%s", code, out)
	}
	checkRespawnEnd(t, j.Texts(), ref, node2.Name(), out)
	checkSummary(t, lastText(j.Texts()), 2)
	if t.Failed() {
		t.Logf("gaspirun's output:\n%s", out)
	}
	t.Logf("gaspirun exited 0 after %v", ended.Sub(j.Begin()).Round(time.Millisecond))
	waitHostsEmpty(t, c, ended)
}

// summaryRE is gaspirun's last line: how many processes, and how they
// ended.
var summaryRE = regexp.MustCompile(`^gaspirun: (\d+) processes \([^)]*\): (.*); \d+ replacements? started`)

// checkSummary checks gaspirun's summary: lost processes (the crashed
// host's, "lost (no exit status from its host)"), and every other one
// exited 0 by itself, or, an idle spare that had not ended a --grace
// after the ranks, was stopped by gaspirun (logged: known to happen, as
// in test/kmtier).
func checkSummary(t *testing.T, summary string, lost int) {
	t.Helper()
	m := summaryRE.FindStringSubmatch(summary)
	if m == nil {
		t.Fatalf("gaspirun's last line %q is not its summary", summary)
	}
	total, _ := strconv.Atoi(m[1])
	counted, gone := 0, 0
	for _, part := range strings.Split(m[2], ", ") {
		n, how, _ := strings.Cut(part, " ")
		c, err := strconv.Atoi(n)
		switch {
		case err != nil:
			t.Errorf("gaspirun's summary %q: cannot read %q", summary, part)
		case how == "lost (no exit status from its host)":
			gone = c
		case how == "stopped by gaspirun":
			t.Logf("known: %d idle spares were stopped by gaspirun after --grace", c)
		case how != "exited 0":
			t.Errorf("gaspirun's summary %q: %d processes %s; want every process of the hosts left to end with exit 0", summary, c, how)
		}
		counted += c
	}
	if gone != lost || counted != total {
		t.Errorf("gaspirun's summary %q: want %d lost, the crashed host's, among %d processes", summary, lost, total)
	}
	t.Logf("%s", summary)
}

// crashForGood takes h off the network silently, as a host that lost
// power, SIGKILLs everything on it, and marks it down for hostExec: no
// process of the job may ever run there again.
func crashForGood(t *testing.T, c *simhost.Cluster, h *simhost.Host, down string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(down, h.Name()), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := c.Cut(h, simhost.Silent); err != nil {
		t.Fatalf("cut %s: %v", h.Name(), err)
	}
	killed, err := c.Crash(h)
	if err != nil {
		t.Fatalf("crash of %s: %v", h.Name(), err)
	}
	// Two ranks, each under its gaspirun --remote-exec.
	if len(killed) < 2 {
		t.Fatalf("the crash of %s killed %v, want at least its two ranks", h.Name(), killed)
	}
	t.Logf("%s crashed for good (cut off, %d processes SIGKILLed)", h.Name(), len(killed))
}

// checkRespawnEnd checks a finished job's output (lines, as gaspirun
// printed them): the answer ref, printed once after a recovery; one
// replacement per process of the lost host, each started and joined on
// another host; both of its ranks taken over, one by a replacement; no
// start tried on the lost host; no stale frame applied.
func checkRespawnEnd(t *testing.T, lines []string, ref, lost, out string) {
	t.Helper()
	var finals []string
	recovered := false
	for _, l := range lines {
		if respawnFinalRE.MatchString(l) {
			finals = append(finals, l)
		}
		recovered = recovered || (len(finals) == 0 && strings.HasPrefix(l, "[r0] recovery: epoch "))
		if strings.Contains(l, `msg="runtime closed"`) && !strings.Contains(l, "stale_applied=0") {
			t.Errorf("a runtime applied frames from a stale epoch: %s", l)
		}
		if strings.Contains(l, "on host "+lost) {
			t.Errorf("gaspirun started or tried a process on the lost host %s: %s", lost, l)
		}
	}
	if len(finals) != 1 || finals[0] != ref {
		t.Fatalf("answers %q, want exactly the failure-free %q\n%s", finals, ref, out)
	}
	if !recovered {
		t.Errorf("rank 0 printed its answer without a recovery: the crash came too late\n%s", out)
	}
	started := map[int]string{}
	for _, l := range lines {
		if m := respawnedRE.FindStringSubmatch(l); m != nil {
			p, _ := strconv.Atoi(m[1])
			started[p] = m[2]
		}
	}
	if len(started) < 2 {
		t.Fatalf("gaspirun started %d replacements (%v), want one for each of %s's two processes\n%s", len(started), started, lost, out)
	}
	for p, h := range started {
		if p < respawnProcs {
			t.Errorf("replacement s%d has the id of one of the job's first processes: an id is never reused", p)
		}
		if h == lost {
			t.Errorf("replacement s%d started on the lost host %s", p, h)
		}
	}
	joined := map[int]string{}
	for _, l := range lines {
		if m := joinedSpareRE.FindStringSubmatch(l); m != nil {
			p, _ := strconv.Atoi(m[1])
			joined[p] = m[2]
		}
	}
	holders := map[int]int{}
	for _, l := range lines {
		if m := nowHoldsRE.FindStringSubmatch(l); m != nil {
			p, _ := strconv.Atoi(m[1])
			r, _ := strconv.Atoi(m[2])
			holders[r] = p
		}
	}
	byJoiner := false
	for _, r := range []int{2, 3} {
		p, ok := holders[r]
		if !ok {
			t.Fatalf("nobody took over rank %d of the lost host (holders %v)\n%s", r, holders, out)
		}
		if _, mine := started[p]; mine {
			byJoiner = true
			if joined[p] == "" || joined[p] == lost {
				t.Errorf("rank %d is held by replacement s%d, which joined on %q, want another host than %s", r, p, joined[p], lost)
			}
		}
	}
	if !byJoiner {
		t.Errorf("no replacement took a rank of the lost host (holders %v, replacements %v): one spare cannot cover two ranks\n%s", holders, started, out)
	}
	t.Logf("replacements started (id: host) %v, joined %v; ranks 2 and 3 now held by processes %d and %d", started, joined, holders[2], holders[3])
}

// waitGaspirun waits up to stepWait for a line of gaspirun's output that
// match accepts.
func waitGaspirun(t *testing.T, j *proctest.Job, what string, match func(string) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), stepWait)
	defer cancel()
	if _, err := j.WaitLine(ctx, func(l proctest.Line) bool { return match(l.Text) }); err != nil {
		if j.Ended() {
			t.Fatalf("gaspirun exited (%d) before %s\n%s", j.ExitCode(), what, gaspirunOutput(j))
		}
		t.Fatalf("no %s within %v\n%s", what, stepWait, gaspirunOutput(j))
	}
}

// waitHostsEmpty fails the test unless every host's namespace is empty
// within endWait of gaspirun's exit (at ended): nothing of the job
// outlives it, the replacements included.
func waitHostsEmpty(t *testing.T, c *simhost.Cluster, ended time.Time) {
	t.Helper()
	deadline := ended.Add(endWait)
	for {
		var left []string
		for _, h := range c.Hosts() {
			pids, _ := h.PIDs()
			for _, pid := range pids {
				argv, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
				left = append(left, fmt.Sprintf("%s: %d %s", h.Name(), pid, strings.ReplaceAll(strings.TrimRight(string(argv), "\x00"), "\x00", " ")))
			}
		}
		if len(left) == 0 {
			t.Logf("every host empty %v after gaspirun's exit", time.Since(ended).Round(time.Millisecond))
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still running %v after gaspirun's exit:\n%s", endWait, strings.Join(left, "\n"))
		}
		time.Sleep(100 * time.Millisecond) // real processes: poll with a deadline
	}
}

// gaspirunOutput is gaspirun's output without the Raft library's chatter.
func gaspirunOutput(j *proctest.Job) string {
	var b strings.Builder
	for _, l := range j.Lines() {
		if !strings.Contains(l.Text, "component=raft") {
			fmt.Fprintf(&b, "%s %s\n", l.Time.Format("15:04:05.000"), l.Text)
		}
	}
	return b.String()
}

// lastText is the last of lines, or "".
func lastText(lines []string) string {
	if len(lines) == 0 {
		return ""
	}
	return lines[len(lines)-1]
}
