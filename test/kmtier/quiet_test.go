package kmtier

import (
	"strings"
	"testing"
)

// Acceptance of issue 12: at the default log level (PGAS_LOG unset), a
// failure-free job prints no runtime record at all, and a job with a
// SIGKILLed rank reports the failure, the new epoch and the restore once
// each, and no warning either (a recovery that works is no cause for
// one).
func TestQuietLogs(t *testing.T) {
	defaultLevel := []string{"-x", "PGAS_LOG="} // the harness sets PGAS_LOG=info
	count := func(r *result, sub string) int {
		n := 0
		for _, l := range r.lines {
			if strings.Contains(l, sub) {
				n++
			}
		}
		return n
	}
	clean := run(t, spec{spares: 1, launcher: defaultLevel})
	if clean.code != 0 {
		t.Fatalf("failure-free job exited %d\n%s", clean.code, clean.text())
	}
	if n := count(clean, "level="); n != 0 {
		t.Errorf("failure-free job printed %d runtime records, want none\n%s", n, clean.text())
	}
	killed := run(t, spec{spares: 1, launcher: defaultLevel, extra: []string{"--inject", "kill:rank=2,iter=12"}})
	if killed.code != 0 {
		t.Fatalf("job with a kill exited %d\n%s", killed.code, killed.text())
	}
	for _, c := range []struct{ what, sub string }{
		{"the failure", "gaspirun: rank 2 (process 2) was killed by signal 9 (SIGKILL)"},
		{"the new epoch", "now holds rank 2 (epoch 2)"},
		{"the restore", "] recovery: epoch 2 in force after "},
	} {
		if n := count(killed, c.sub); n != 1 {
			t.Errorf("%s (%q) reported %d times, want once\n%s", c.what, c.sub, n, killed.text())
		}
	}
	if n := count(killed, "level=WARN") + count(killed, "level=ERROR"); n != 0 {
		t.Errorf("a recovered job printed %d warnings or errors, want none\n%s", n, killed.text())
	}
	if clean.final(t) != killed.final(t) {
		t.Errorf("the recovered job's answer differs from the failure-free one")
	}
}
