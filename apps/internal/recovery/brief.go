package recovery

import (
	"errors"
	"fmt"

	"github.com/gaspigo/gaspigo/kvshuffle"
	"github.com/gaspigo/gaspigo/pgas"
)

// Brief says in a few words what cause, an error for which Needed holds,
// means for a user: "rank 2 failed" rather than the chain of the
// operations it interrupted (which PGAS_LOG=info shows in the runtime's
// records); also a shuffle a failed peer aborted (kvshuffle.AbortError).
// Other errors are returned whole.
func Brief(cause error) string {
	var re *pgas.RankError
	var ae *kvshuffle.AbortError
	switch {
	case cause == nil:
		return "no cause"
	case errors.As(cause, &re) && errors.Is(cause, pgas.ErrRankFailed):
		return fmt.Sprintf("rank %d failed", re.Rank)
	case errors.Is(cause, pgas.ErrRankFailed):
		return "a rank failed"
	case errors.As(cause, &ae):
		return fmt.Sprintf("the exchange on rank %d failed", ae.Rank)
	case Needed(cause):
		return "the membership changed (a new epoch)"
	}
	return cause.Error()
}
