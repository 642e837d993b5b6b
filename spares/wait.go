package spares

import (
	"context"
	"fmt"
)

// Waiting on the applied state: awaitState, waitEpoch, waitPromotion, and the
// errors a job's status ends them with.

// awaitState blocks until cond holds for the locally applied state and returns
// that state. cond runs on a private copy, under no lock. It returns
// errTimeout (with the context's error) when ctx ends and errClosed after
// Shutdown, each with the last state seen.
func (n *Node) awaitState(ctx context.Context, cond func(*state) bool) (state, error) {
	return n.wait(ctx, func(st *state) (bool, error) { return cond(st), nil })
}

func (n *Node) wait(ctx context.Context, check func(*state) (bool, error)) (state, error) {
	for {
		st, changed := n.fsm.view()
		if done, err := check(&st); done || err != nil {
			return st, err
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return st, fmt.Errorf("%w: waiting at epoch %d: %w", errTimeout, st.Epoch, ctx.Err())
		case <-n.closeCh:
			return st, errClosed
		case <-n.lostCh:
			return st, n.lossErr
		}
	}
}

func statusErr(st *state) error {
	switch {
	case st.Status == statusFailed && st.StatusReason == reasonSparesExhausted:
		return fmt.Errorf("%w in epoch %d", ErrSparesExhausted, st.Epoch)
	case st.Status == statusFailed:
		return fmt.Errorf("%w in epoch %d: %s", ErrJobFailed, st.Epoch, st.StatusReason)
	}
	return nil
}

// waitEpoch blocks until the locally applied epoch is at least min and
// returns that state. When the job has failed it returns the state with
// ErrSparesExhausted (or ErrJobFailed), whatever the epoch; when it finished
// before reaching min, errJobFinished.
func (n *Node) waitEpoch(ctx context.Context, min uint64) (state, error) {
	return n.wait(ctx, func(st *state) (bool, error) { return epochReached(st, min) })
}

func epochReached(st *state, min uint64) (bool, error) {
	if err := statusErr(st); err != nil {
		return true, err
	}
	if st.Epoch >= min {
		return true, nil
	}
	if st.Status == statusFinished {
		return true, fmt.Errorf("%w at epoch %d, before epoch %d", errJobFinished, st.Epoch, min)
	}
	return false, nil
}

// waitPromotion is for spares: it blocks until this process holds a rank
// and returns the rank and the state that gave it. It returns
// ErrSparesExhausted or ErrJobFailed when the job failed, errJobFinished
// when it finished, and ErrDeclaredFailed when this process was itself
// declared failed, all without a rank. A rank holder returns at once.
func (n *Node) waitPromotion(ctx context.Context) (rank int, st state, err error) {
	rank = -1
	st, err = n.wait(ctx, func(st *state) (bool, error) {
		var done bool
		rank, done, err = promotion(st, n.cfg.Proc)
		return done, err
	})
	return rank, st, err
}

func promotion(st *state, self uint32) (rank int, done bool, err error) {
	// A failed process may still hold its rank while the rank awaits a
	// joiner (state.Awaiting): that is no promotion.
	_, failed := st.Failed[self]
	if r, ok := st.RankOf(self); ok && !failed {
		return r, true, nil
	}
	if err := statusErr(st); err != nil {
		return -1, true, err
	}
	if st.Status == statusFinished {
		return -1, true, fmt.Errorf("%w at epoch %d without promoting proc %d", errJobFinished, st.Epoch, self)
	}
	if e, failed := st.Failed[self]; failed {
		return -1, true, fmt.Errorf("%w in epoch %d", ErrDeclaredFailed, e)
	}
	return -1, false, nil
}
