package pgas_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"testing"
	"testing/synctest"

	"github.com/gaspigo/gaspigo/health"
	"github.com/gaspigo/gaspigo/pgas"
	"github.com/gaspigo/gaspigo/transport"
	"github.com/gaspigo/gaspigo/transport/mem"
)

// joinRound is one round of the ranks' work in the program's epoch: each
// rank writes (epoch, k) into its right neighbour's segment and waits for
// it to land, a barrier, each checks what its left neighbour wrote, and an
// allreduce of rank+1 over every rank.
func joinRound(ctx context.Context, rt *pgas.Runtime, k int) error {
	seg, err := rt.Segment(1)
	if err != nil {
		return err
	}
	me, n := rt.Rank(), rt.Size()
	epoch := uint64(pgas.AppEpoch(rt))
	binary.LittleEndian.PutUint64(seg.Bytes()[0:], epoch<<32|uint64(k))
	if err := rt.Write(ctx, 0, (me+1)%n, pgas.Loc{Seg: 1, Off: 8}, pgas.Loc{Seg: 1, Off: 0}, 8); err != nil {
		return err
	}
	if err := rt.Wait(ctx, 0); err != nil {
		return err
	}
	if err := rt.Barrier(ctx, nil); err != nil {
		return err
	}
	if got, want := binary.LittleEndian.Uint64(seg.Bytes()[8:]), epoch<<32|uint64(k); got != want {
		return fmt.Errorf("rank %d: round %d of epoch %d: the left neighbour's write holds %#x, want %#x", me, k, epoch, got, want)
	}
	x := []int64{int64(me + 1)}
	if err := pgas.Allreduce(ctx, rt, nil, x, pgas.OpSum); err != nil {
		return err
	}
	if want := int64(n * (n + 1) / 2); x[0] != want {
		return fmt.Errorf("rank %d: round %d of epoch %d: allreduce gave %d, want %d", me, k, epoch, x[0], want)
	}
	return nil
}

// progress is a round done by a rank in an epoch.
type progress struct {
	rank  int
	epoch uint32
}

// joinWork runs rounds until the program's epoch reaches stopAt,
// recovering (and creating its segment again) whenever the membership
// changes under it, and reports each round done on done (never
// blocking).
func joinWork(ctx context.Context, rt *pgas.Runtime, stopAt uint32, done chan<- progress) error {
	k, setup := 0, true
	for pgas.AppEpoch(rt) < stopAt {
		var err error
		if setup {
			_, err = rt.SegmentCreate(ctx, 1, 64, nil)
		} else {
			err = joinRound(ctx, rt, k)
		}
		switch {
		case err == nil && setup:
			setup = false
		case err == nil:
			k++
			select {
			case done <- progress{rt.Rank(), pgas.AppEpoch(rt)}:
			default:
			}
		case pgas.NeedsRecovery(err):
			if err := rt.Recover(ctx); err != nil {
				return fmt.Errorf("rank %d: recover: %w", rt.Rank(), err)
			}
			k, setup = 0, true
		default:
			return fmt.Errorf("rank %d: %w", rt.Rank(), err)
		}
	}
	return nil
}

// Rule (docs/design.md §3, processes that join): processes that join a
// running job refill its spare pool. Four ranks run one-sided writes and
// collectives without pause while three processes join (ids 4, 6 and 7;
// id 5 was handed out but never joined); every join is a new epoch, which
// the ranks recover into. Then a rank's process is killed: the first
// joiner takes its rank, the survivors recover, and collectives and
// writes over every rank, the joiner among them (on a host of its own),
// give the right answers. The idle joiners leave when the job finishes.
func TestJoinersRefillThePool(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ranks = 4
		hosts := []string{"a", "a", "b", "b"}
		rts, _, nw, fm, _ := newFTJobOn(t, ranks, 0, hosts)
		ctx := context.Background()
		jctx, cancel := context.WithCancel(ctx)
		hc := health.LocalConfig()

		type started struct {
			proc transport.Proc
			rt   *pgas.Runtime
			err  error
		}
		inits := make(chan started, 3)
		var joined []*pgas.Runtime
		t.Cleanup(func() {
			cancel()
			for _, rt := range joined {
				rt.Close()
			}
		})
		eps := map[transport.Proc]*mem.Transport{}
		for range 4 { // ids 4..7; 5 is never used
			ep, err := nw.AddEndpoint()
			if err != nil {
				t.Fatal(err)
			}
			eps[ep.Self()] = ep
		}
		join := func(p transport.Proc) {
			epoch, err := fm.Join(p, eps[p].Addr(), fmt.Sprintf("host-of-%d", p))
			if err != nil {
				t.Fatal(err)
			}
			cfg := pgas.LocalConfig()
			cfg.Proc, cfg.NumProcs, cfg.NumRanks = p, ranks, ranks
			cfg.Transport, cfg.Hosts = eps[p], hosts
			cfg.Membership, cfg.Health = fm.Handle(p), &hc
			go func() {
				rt, err := pgas.Init(jctx, cfg)
				inits <- started{p, rt, err}
			}()
			t.Logf("proc %d joined in epoch %d", p, epoch)
		}

		// Phase 1: the ranks work while the processes join. The last join
		// will be epoch 3: the ranks stop once they recovered into it.
		done := make(chan progress, 256)
		errs := make(chan error, ranks)
		for _, rt := range rts {
			go func() { errs <- joinWork(ctx, rt, 3, done) }()
		}
		for i, p := range []transport.Proc{4, 6, 7} {
			// Some rounds in the current epoch first (none in epoch 0
			// is needed: joining must not wait for quiet).
			for seen := 0; i > 0 && seen < 2*ranks; {
				select {
				case pr := <-done:
					if uint64(pr.epoch) == fm.Current().Epoch {
						seen++
					}
				case err := <-errs:
					t.Fatalf("a rank stopped while processes joined: %v", err)
				}
			}
			join(p)
		}
		for range ranks {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		if e := fm.Current().Epoch; e != 3 {
			t.Fatalf("epoch %d after three joins, want 3", e)
		}
		for _, rt := range rts {
			live, spares := pgas.ViewProcs(rt)
			if !slices.Equal(live, []transport.Proc{0, 1, 2, 3, 4, 6, 7}) || !slices.Equal(spares, []transport.Proc{4, 6, 7}) {
				t.Fatalf("proc %d: live %v, spares %v; want the joiners as spares, id 5 in neither", rt.Proc(), live, spares)
			}
			if got, want := rt.HostLabels(), []string{"a", "a", "b", "b", "host-of-4", "", "host-of-6", "host-of-7"}; !slices.Equal(got, want) {
				t.Fatalf("proc %d: host labels %q, want %q", rt.Proc(), got, want)
			}
		}

		// Phase 2: rank 2's process dies; joiner 4 takes rank 2.
		nw.Kill(2)
		survivors := []*pgas.Runtime{rts[0], rts[1], rts[3]}
		for _, rt := range survivors {
			go func() { errs <- joinWork(ctx, rt, 4, done) }()
		}
		for range survivors {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		st := <-inits
		if st.err != nil || st.proc != 4 {
			t.Fatalf("the first joiner to return from Init: proc %d, %v; want proc 4 promoted", st.proc, st.err)
		}
		joined = append(joined, st.rt)
		if st.rt.Rank() != 2 || !st.rt.StartedAsSpare() || pgas.AppEpoch(st.rt) != 4 {
			t.Fatalf("joiner 4: rank %d in epoch %d, want rank 2 in epoch 4", st.rt.Rank(), pgas.AppEpoch(st.rt))
		}
		if !slices.Equal(fm.Reports(), []transport.Proc{2}) {
			t.Fatalf("failures reported: %v, want [2]", fm.Reports())
		}
		job := []*pgas.Runtime{rts[0], rts[1], st.rt, rts[3]}
		pgas.Each(t, job, func(rt *pgas.Runtime) error {
			if _, err := rt.SegmentCreate(ctx, 1, 64, nil); err != nil {
				return err
			}
			for k := range 3 {
				if err := joinRound(ctx, rt, k); err != nil {
					return err
				}
			}
			procs, err := pgas.Allgather(ctx, rt, nil, []uint32{uint32(rt.Proc())})
			if err != nil {
				return err
			}
			if !slices.Equal(procs, []uint32{0, 1, 4, 3}) {
				return fmt.Errorf("rank %d: ranks held by %v, want [0 1 4 3]", rt.Rank(), procs)
			}
			if h := rt.Host(2); h != "host-of-4" {
				return fmt.Errorf("rank %d: rank 2's host %q, want the joiner's label", rt.Rank(), h)
			}
			for r, e := range rt.StateVector() {
				if e.State != health.Healthy {
					return fmt.Errorf("rank %d sees rank %d as %v", rt.Rank(), r, e.State)
				}
			}
			return nil
		})

		// The job ends: the idle joiners learn it and leave.
		pgas.Each(t, job, func(rt *pgas.Runtime) error { return rt.Finalize(ctx) })
		fm.Publish()
		for range 2 {
			st := <-inits
			if !errors.Is(st.err, pgas.ErrNotPromoted) {
				t.Errorf("idle joiner %d: Init returned %v, want ErrNotPromoted", st.proc, st.err)
			}
		}
	})
}
