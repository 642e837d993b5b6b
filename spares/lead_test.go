package spares

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
)

// TestTransferLeadership: the leadership moves to a named voter and, with
// noProc, to the lowest live voter that holds a rank, asked from a process
// that does not lead (in the voters-only mode a client, which goes through
// the leader's control RPC); a target that is no voter is refused.
func TestTransferLeadership(t *testing.T) {
	for _, votersOnly := range []bool{true, false} {
		t.Run(fmt.Sprintf("votersOnly=%v", votersOnly), func(t *testing.T) {
			c := newCluster(t, 4, 2, 3, func(cfg *Config) { cfg.VotersOnly = votersOnly })
			ctx, cancel := context.WithTimeout(context.Background(), phase)
			defer cancel()
			l := c.leader(ctx)
			st := l.view()
			var asker *Node // a non-voter when there is one
			for _, n := range c.live() {
				if n != l && (asker == nil || !st.IsVoter(n.proc())) {
					asker = n
				}
			}
			// First onto a voter that holds no rank, as an idle spare that
			// won the election would be.
			idle := noProc
			for _, v := range st.Voters {
				if _, ok := st.RankOf(v); !ok && v != l.proc() {
					idle = v
				}
			}
			if idle == noProc {
				t.Fatalf("no voter without a rank among %v: the cluster was meant to have one", st.Voters)
			}
			if got, err := asker.transferLeadership(ctx, idle); err != nil || got != idle {
				t.Fatalf("TransferLeadership(%d) from %d = %d, %v", idle, asker.proc(), got, err)
			}
			if p := c.leader(ctx).proc(); p != idle {
				t.Fatalf("proc %d leads, want %d", p, idle)
			}
			// Then back onto a rank, chosen by the node.
			voters := slices.Sorted(slices.Values(st.Voters))
			want := voters[slices.IndexFunc(voters, func(v uint32) bool { _, ok := st.RankOf(v); return ok })]
			if got, err := asker.transferLeadership(ctx, noProc); err != nil || got != want {
				t.Fatalf("TransferLeadership(NoProc) from %d = %d, %v; want %d", asker.proc(), got, err, want)
			}
			if p := c.leader(ctx).proc(); p != want {
				t.Fatalf("proc %d leads, want %d", p, want)
			}
			// A leader on a rank stays.
			if got, err := c.other(want).transferLeadership(ctx, noProc); err != nil || got != want {
				t.Fatalf("TransferLeadership(NoProc) with rank %d's proc leading = %d, %v", want, got, err)
			}
			// The membership still commits.
			if _, err := asker.propose(ctx, setVoters{Voters: st.Voters}); err != nil {
				t.Fatalf("proposal after the transfers: %v", err)
			}
			if _, err := asker.transferLeadership(ctx, 99); !errors.Is(err, errBadCommand) {
				t.Fatalf("TransferLeadership to a process that is no voter: %v, want ErrBadCommand", err)
			}
		})
	}
}
