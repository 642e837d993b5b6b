package recovery

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"testing"

	"github.com/gaspigo/gaspigo/kvshuffle"
	"github.com/gaspigo/gaspigo/pgas"
)

// Rule: Brief names the failed rank of a RankError however deeply it is
// wrapped, and returns errors a recovery does not settle whole.
func TestBrief(t *testing.T) {
	deep := fmt.Errorf("ckpt: commit 16: agreement: %w", &pgas.RankError{Rank: 2, Op: "allreduce", Err: fmt.Errorf("%w: tcp: peer 2 down", pgas.ErrRankFailed)})
	other := errors.New("kmeans: disk full")
	for _, c := range []struct {
		err  error
		want string
	}{
		{deep, "rank 2 failed"},
		{fmt.Errorf("x: %w", pgas.ErrRankFailed), "a rank failed"},
		{fmt.Errorf("x: %w", pgas.ErrStaleEpoch), "the membership changed (a new epoch)"},
		{fmt.Errorf("kvshuffle: recv: %w", &kvshuffle.AbortError{Rank: 1}), "the exchange on rank 1 failed"},
		{other, "kmeans: disk full"},
	} {
		if got := Brief(c.err); got != c.want {
			t.Errorf("Brief(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

// printingRT is the runtime Printing needs: Recover succeeds at once.
type printingRT struct {
	epoch uint64
	log   *slog.Logger
}

func (p *printingRT) Recover(context.Context) error  { p.epoch++; return nil }
func (p *printingRT) Finalize(context.Context) error { return nil }
func (p *printingRT) Epoch() uint64                  { return p.epoch }
func (p *printingRT) Logger() *slog.Logger           { return p.log }

// Rule: Printing's lines say the cause in words (Brief), one sentence
// each; the whole error chain is at info level in the runtime's log
// (gaspirun -v).
func TestPrintingSentences(t *testing.T) {
	var log bytes.Buffer
	rt := &printingRT{epoch: 1, log: slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	var lines []string
	printf := func(format string, args ...any) { lines = append(lines, fmt.Sprintf(format, args...)) }
	chain := func(rank int) error {
		return fmt.Errorf("kvshuffle: pump: %w", &pgas.RankError{Rank: rank, Op: "write_notify", Err: fmt.Errorf("%w: shm: connection closed by peer", pgas.ErrRankFailed)})
	}
	restores := 0
	l := Printing(rt, false, printf, func(context.Context) (string, error) {
		if restores++; restores == 1 {
			return "", chain(3) // another failure during the restore
		}
		return "restored checkpoint 4", nil
	})
	if err := l.Rejoin(context.Background(), chain(2)); err != nil {
		t.Fatal(err)
	}
	want := []*regexp.Regexp{
		regexp.MustCompile(`^recovery: rank 2 failed; every rank goes back to the last checkpoint\n$`),
		regexp.MustCompile(`^recovery: interrupted by another failure \(rank 3 failed\); recovering again\n$`),
		regexp.MustCompile(`^recovery: epoch 3 in force after \S+; restored checkpoint 4 after \S+\n$`),
	}
	if len(lines) != len(want) {
		t.Fatalf("lines %q, want %d", lines, len(want))
	}
	for i, re := range want {
		if !re.MatchString(lines[i]) {
			t.Errorf("line %d = %q, want it to match %s", i, lines[i], re)
		}
	}
	if n := strings.Count(log.String(), "shm: connection closed by peer"); n != 2 {
		t.Errorf("the log holds the chain %d times, want 2:\n%s", n, log.String())
	}
}
