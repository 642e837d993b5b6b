package topk

// Real-process tests: gaspirun and topk run as jobs of 3 ranks.

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
)

var bins = proctest.Program{Pkg: "./apps/topk/cmd/topk"}

func TestMain(m *testing.M) {
	code := m.Run()
	bins.Cleanup()
	os.Exit(code)
}

var windowRE = regexp.MustCompile(`^window=\d+ records=\d+ top=`)

// rawCauseRE finds a recovery line that shows an error chain instead of
// saying the cause in words (recovery.Brief).
var rawCauseRE = regexp.MustCompile(`\] recovery: [^\n]*(pgas|kvshuffle|ckpt|shm|tcp): `)

// streamJob runs the job and returns rank 0's window reports, checking
// that the report files hold the same lines.
func streamJob(t *testing.T, args ...string) []string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "reports")
	code, log := bins.Job(t, 3, 1, append([]string{"run", "--out", out}, args...)...)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, log)
	}
	lines := proctest.RankZeroLines(log, windowRE)
	var files []string
	entries, _ := os.ReadDir(out)
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(out, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, strings.TrimSuffix(string(b), "\n"))
	}
	if !slices.Equal(lines, files) {
		t.Fatalf("rank 0 printed %q, the report files hold %q\n%s", lines, files, log)
	}
	if slices.Contains(args, "--inject") {
		proctest.LogContains(t, log, "inject: SIGKILL rank", "restored checkpoint")
		if raw := rawCauseRE.FindString(log); raw != "" {
			t.Errorf("a recovery line shows the error chain: %q\n%s", raw, log)
		}
	}
	return lines
}

// A rank killed mid-window (between two of the window's checkpoints):
// every window is reported exactly once, with the failure-free counts,
// which are the one-process reference's; for count and time windows.
func TestTopKKill(t *testing.T) {
	for _, c := range []struct {
		name   string
		stream []string
		kill   string
	}{
		// Window 2 is records [6000, 9000) per rank, checkpoints every 750.
		{"count", []string{"--window-records", "3000", "--ckpts", "4"}, "kill:rank=1,record=7900"},
		// Rank 0 emits 1000 records per second of event time: window 2
		// is its records [4000, 6000), checkpoints every 667.
		{"time", []string{"--window-span", "2s", "--ckpts", "3"}, "kill:rank=0,record=5100"},
	} {
		t.Run(c.name, func(t *testing.T) {
			stream := append([]string{"--windows", "4", "--k", "5", "--keys", "5000"}, c.stream...)
			code, out := bins.Run(t, append([]string{"ref", "--ranks", "3"}, stream...)...)
			want := strings.Split(strings.TrimSpace(out), "\n")
			if code != 0 || len(want) != 4 {
				t.Fatalf("ref: exit %d: %s", code, out)
			}
			if got := streamJob(t, stream...); !slices.Equal(got, want) {
				t.Fatalf("failure-free job reported %q, reference %q", got, want)
			}
			if got := streamJob(t, append(stream, "--inject", c.kill)...); !slices.Equal(got, want) {
				t.Fatalf("job with a kill reported %q, want each window once: %q", got, want)
			}
		})
	}
}

func TestTopKUsage(t *testing.T) {
	bins.Usage(t, "--windows", "run", "--window-records", "10", "--out", "x")
	bins.Usage(t, "--window-records N or --window-span D", "run", "--windows", "2", "--out", "x")
	bins.Usage(t, "--window-records N or --window-span D", "run", "--windows", "2", "--window-records", "5", "--window-span", "1s", "--out", "x")
	bins.Usage(t, "--out DIR", "run", "--windows", "2", "--window-records", "5")
	bins.Usage(t, "--ranks", "ref", "--windows", "2", "--window-records", "5")
	bins.Usage(t, "record=N", "run", "--windows", "2", "--window-records", "5", "--out", "x", "--inject", "kill:rank=0,at=0.5")
}
