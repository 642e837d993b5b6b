package job

import (
	"errors"
	"fmt"
	"testing"

	"github.com/gaspigo/gaspigo/internal/bootstrap"
	"github.com/gaspigo/gaspigo/pgas"
	"github.com/gaspigo/gaspigo/spares"
)

// ExitCode is the one mapping from a program's final error to its exit
// code; wrapped errors map as their sentinels do.
func TestExitCode(t *testing.T) {
	wrap := func(errs ...error) error { return fmt.Errorf("ended: %w", errors.Join(errs...)) }
	for _, c := range []struct {
		name string
		err  error
		want int
	}{
		{"success", nil, 0},
		{"a spare never needed", wrap(pgas.ErrNotPromoted), 0},
		{"the job finished during a recovery", wrap(pgas.ErrFinished), 0},
		{"no spare left, seen by a waiting spare", wrap(pgas.ErrNotPromoted, spares.ErrSparesExhausted), ExitSparesExhausted},
		{"no spare left", wrap(spares.ErrSparesExhausted), ExitSparesExhausted},
		{"the job failed", wrap(spares.ErrJobFailed), ExitJobFailed},
		{"fenced", wrap(pgas.ErrFenced), ExitDeclaredFailed},
		{"declared failed", wrap(spares.ErrDeclaredFailed), ExitDeclaredFailed},
		{"cut off", wrap(spares.ErrCutOff), ExitCutOff},
		{"no rendezvous", wrap(bootstrap.ErrRendezvousTimeout), ExitNoRendezvous},
		{"shrinks under a launcher that aborts", wrap(ErrShrinkAborts), ExitUsage},
		{"anything else", errors.New("boom"), 1},
	} {
		if got := ExitCode(c.err); got != c.want {
			t.Errorf("%s: ExitCode(%v) = %d, want %d", c.name, c.err, got, c.want)
		}
	}
	codes := map[int]bool{0: true, 1: true}
	for _, c := range []int{ExitSparesExhausted, ExitJobFailed, ExitDeclaredFailed, ExitNoRendezvous, ExitCutOff} {
		if codes[c] || c >= 126 {
			t.Errorf("exit code %d is not distinct, or in the shell's range", c)
		}
		codes[c] = true
	}
}
