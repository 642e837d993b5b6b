package kmeans

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// A kill:leader whose leader is an idle spare moves the leadership onto a
// rank; when the ranks never see the leader it was moved to (under a
// flood of connections the leadership flapped for a minute), each waits
// moveWait for it, not leaderWait, then the ranks agree on the leader they
// know and move again, at most leaderMoves times, and the job goes on
// without a kill. The wait for each move counted leaderWait before, and
// the three moves held the job three minutes.
func TestKillLeaderMovedButNeverSeen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		opt := shrinkOptions()
		opt.Injects = []Inject{{Rank: -1, MirrorOf: -1, Leader: true, Iter: 2}}
		opt.Leader = func() (int, bool) { return 4, true } // an idle spare leads, whatever moved
		var moves atomic.Int32
		opt.MoveLeader = func(context.Context) (int, error) { moves.Add(1); return 3, nil }
		opt.Kill = func(k Kill) { t.Errorf("killed: %+v", k) }
		start := time.Now()
		got, out := runShrinkJob(t, opt, nil)
		took := time.Since(start)
		if got.Iterations != opt.MaxIter || got.Recoveries != 0 {
			t.Fatalf("%d iterations and %d recoveries, want %d and 0\n%s", got.Iterations, got.Recoveries, opt.MaxIter, out)
		}
		if m := moves.Load(); m != leaderMoves {
			t.Fatalf("the leadership was moved %d times, want %d", m, leaderMoves)
		}
		// leaderMoves x moveWait, and the job's own time, well below one
		// leaderWait.
		if took >= leaderWait {
			t.Fatalf("the job took %v (fake time) with a moved leader never seen, want less than %v", took, leaderWait)
		}
	})
}
