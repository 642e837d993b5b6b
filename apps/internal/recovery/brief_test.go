package recovery

import (
	"errors"
	"fmt"
	"testing"

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
		{other, "kmeans: disk full"},
	} {
		if got := Brief(c.err); got != c.want {
			t.Errorf("Brief(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}
