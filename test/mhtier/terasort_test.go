package mhtier

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/gaspigo/gaspigo/internal/testkit/mhjob"
	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
)

// TeraSort across the three hosts, 4 ranks and 2 spares as in the K-means
// scenarios (node1: ranks 0 and 1; node2: rank 2 and spare 4; node3: rank
// 3 and spare 5), every host with its own spill directory (--spill
// DIR/%h, %h being PGAS_HOST). A whole host is crashed after the second
// key-count checkpoint and its spill directory removed: its ranks' spares,
// on other hosts, must get the checkpointed spill files from the mirror
// holders (also on other hosts), never from the lost directory, and the
// sort must end with the input's checksum.

// tsRecords is the input: 60,000 records per rank, checkpoints every
// 10,000, so the crash after checkpoint 20,000 leaves work to redo.
const tsRecords = 240000

var (
	tsInput struct {
		dir, sum string
	}
	checkpointRE = regexp.MustCompile(`msg="checkpoint taken" .*checkpoint=(\d+) `)
	fetchedRE    = regexp.MustCompile(`^sort: rank \d+ .* fetched_bytes=([1-9]\d*) `)
)

// terasortInput generates the input once per test binary and returns it
// with its summary line.
func terasortInput(t *testing.T) (string, string) {
	t.Helper()
	if tsInput.dir == "" {
		dir, err := os.MkdirTemp("", "mhtier-terasort-")
		if err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(bins.terasort, "gen", "--records", strconv.Itoa(tsRecords), "--parts", "4", "--out", dir, "--quiet").CombinedOutput()
		if err != nil {
			t.Fatalf("terasort gen: %v\n%s", err, out)
		}
		sum, err := exec.Command(bins.terasort, "sum", dir).Output()
		if err != nil {
			t.Fatalf("terasort sum: %v", err)
		}
		lines := strings.Split(strings.TrimSpace(string(sum)), "\n")
		tsInput.dir, tsInput.sum = dir, lines[len(lines)-1]
	}
	return tsInput.dir, tsInput.sum
}

// terasortHostLoss crashes host lose once a process logged checkpoint
// 20,000, with extra sort flags, and checks the end.
func terasortHostLoss(t *testing.T, lose int, extra ...string) {
	if bins.err != nil {
		t.Skip(bins.err)
	}
	in, want := terasortInput(t)
	c := newCluster(t)
	spill, out := t.TempDir(), t.TempDir()
	args := append([]string{"sort", "--in", in, "--out", out, "--ckpt-records", "10000", "--spill", filepath.Join(spill, "%h"), "-v"}, extra...)
	j := start(t, c, func(cfg *mhjob.Config) {
		cfg.Program, cfg.Args = bins.terasort, args
	})
	ctx, cancel := context.WithTimeout(context.Background(), stepWait)
	defer cancel()
	if _, err := j.WaitLine(ctx, func(l proctest.Line) bool {
		m := checkpointRE.FindStringSubmatch(l.Text)
		return m != nil && m[1] == "20000"
	}); err != nil {
		t.Fatalf("no checkpoint 20000: %v\n%s", err, output(j))
	}
	h := c.Host(lose)
	if killed, err := c.Crash(h); err != nil || len(killed) != 2 {
		t.Fatalf("crash of %s killed %v (%v), want its two processes", h.Name(), killed, err)
	}
	lost := filepath.Join(spill, h.Name())
	if err := os.RemoveAll(lost); err != nil {
		t.Fatal(err)
	}
	want2 := map[int]end{}
	for p, host := range layout {
		if host == lose {
			want2[p] = killedBy9
		}
	}
	finish(t, j, want2, want)
	fetched := false
	for _, l := range j.Lines() {
		fetched = fetched || fetchedRE.MatchString(l.Text)
	}
	if !fetched {
		t.Errorf("no spare fetched checkpointed spill files from a holder\n%s", output(j))
	}
	if _, err := os.Stat(lost); !os.IsNotExist(err) {
		t.Errorf("the lost host's spill directory %s is back: %v", lost, err)
	}
	validate(t, out, want)
}

// validate checks the order of the sorted parts and their checksum.
func validate(t *testing.T, out, want string) {
	t.Helper()
	got, err := exec.Command(bins.terasort, "validate", out).Output()
	lines := strings.Split(strings.TrimSpace(string(got)), "\n")
	if err != nil || lines[len(lines)-1] != want {
		t.Errorf("terasort validate %s: %v, %q; want %q", out, err, lines[len(lines)-1], want)
	}
}

// TestTeraSortHostCrash: node2 (rank 2 and an idle spare) is lost with its
// disk, with the default --memory (the files are the checkpoints' own
// spills).
func TestTeraSortHostCrash(t *testing.T) {
	terasortHostLoss(t, 1)
}

// TestTeraSortHostCrashSpilling: the same with a --memory that forces
// spills between checkpoints.
func TestTeraSortHostCrashSpilling(t *testing.T) {
	terasortHostLoss(t, 1, "--memory", "2097152")
}

// TestTeraSortRendezvousHostCrash: node1 (ranks 0 and 1, the rendezvous)
// is lost with its disk; the spares on node2 and node3 take both ranks.
func TestTeraSortRendezvousHostCrash(t *testing.T) {
	terasortHostLoss(t, 0)
}
