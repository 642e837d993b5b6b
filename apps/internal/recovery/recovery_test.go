package recovery

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gaspigo/gaspigo/ckpt"
	"github.com/gaspigo/gaspigo/pgas"
	"github.com/gaspigo/gaspigo/pgas/pgastest"
	"github.com/gaspigo/gaspigo/transport"
	"github.com/gaspigo/gaspigo/transport/mem"
)

// The tests declare live processes failed through the fake membership
// (as a partition would have the detector do): the process is fenced, the
// others go on without it, and nothing dies under a send (no late
// PeerDown).

// membership declares processes failed, as a report from process 0 would.
type membership struct{ h *pgastest.Handle }

func (m membership) fail(proc transport.Proc) {
	m.h.ReportFailure(context.Background(), proc, 0)
}

// steps is the length of the test program; step s adds s*(sum of rank+1)
// to every rank's accumulator, so the answer is known.
const steps = 8

func want(ranks int) uint64 {
	var sum uint64
	for s := uint64(1); s <= steps; s++ {
		sum += s * uint64(ranks*(ranks+1)/2)
	}
	return sum
}

// rank is one process of the test program: a step counter and an
// accumulator, checkpointed after every step.
type rank struct {
	rt    *pgas.Runtime
	ck    *ckpt.Checkpointer
	state []byte // step, accumulator (u64 each)
	loop  *Loop
	// hooks, for the failures a test injects (all on the process that
	// declares them, so they happen once).
	beforeStep     func(step uint64)
	beforeRestore  func(a Attempt)
	beforeFinalize func()
	finalizing     bool
	restores       []Attempt
	restoredStep   []uint64
}

func (r *rank) step() uint64 { return binary.LittleEndian.Uint64(r.state) }
func (r *rank) acc() uint64  { return binary.LittleEndian.Uint64(r.state[8:]) }

// run is the usage loop of the package doc.
func (r *rank) run(ctx context.Context) error {
	r.loop = &Loop{RT: r.rt, Restore: func(ctx context.Context, a Attempt) error {
		if r.beforeRestore != nil {
			r.beforeRestore(a)
		}
		r.restores = append(r.restores, a)
		id, err := r.ck.Restore(ctx)
		if err != nil {
			return err
		}
		if id != r.step()+1 {
			return fmt.Errorf("restored checkpoint %d holds step %d", id, r.step())
		}
		r.restoredStep = append(r.restoredStep, r.step())
		return nil
	}}
	var err error
	if r.rt.StartedAsSpare() {
		err = r.loop.Rejoin(ctx, nil)
	} else if err = r.commit(ctx); Needed(err) {
		err = r.loop.Rejoin(ctx, err)
	}
	for err == nil && r.step() < steps {
		err = r.next(ctx)
		if Needed(err) {
			err = r.loop.Rejoin(ctx, err)
		}
	}
	if err != nil {
		return err
	}
	if r.beforeFinalize != nil {
		r.beforeFinalize()
	}
	r.finalizing = true
	return r.loop.Finalize(ctx, func(ctx context.Context) error {
		for r.step() < steps {
			if err := r.next(ctx); Needed(err) {
				return r.loop.Rejoin(ctx, err) // the next Finalize round redoes the rest
			} else if err != nil {
				return err
			}
		}
		return nil
	})
}

// next does one step and checkpoints its result.
func (r *rank) next(ctx context.Context) error {
	s := r.step() + 1
	if r.beforeStep != nil {
		r.beforeStep(s)
	}
	v := []int64{int64(s) * int64(r.rt.Rank()+1)}
	if err := pgas.Allreduce(ctx, r.rt, nil, v, pgas.OpSum); err != nil {
		return err
	}
	binary.LittleEndian.PutUint64(r.state, s)
	binary.LittleEndian.PutUint64(r.state[8:], r.acc()+uint64(v[0]))
	return r.commit(ctx)
}

func (r *rank) commit(ctx context.Context) error {
	id := r.step() + 1
	if err := r.ck.Start(ctx, id); err != nil {
		return err
	}
	return r.ck.Commit(ctx, id)
}

// job runs the test program on ranks+spares processes over transport/mem
// inside the caller's synctest bubble; setup installs the hooks (by
// process). It returns each process's rank state and error.
func job(t *testing.T, ranks, spares int, setup func(m membership, procs []*rank)) ([]*rank, []error) {
	t.Helper()
	n := ranks + spares
	nw, err := mem.New(n, mem.Config{Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer nw.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fm := pgastest.New(ranks, n)
	m := membership{h: fm.Handle(0)}
	procs := make([]*rank, n)
	for p := range procs {
		procs[p] = &rank{state: make([]byte, 16)}
	}
	setup(m, procs)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for p := range n {
		wg.Go(func() {
			c := pgas.LocalConfig()
			c.Proc, c.NumProcs, c.NumRanks = transport.Proc(p), n, ranks
			c.Transport = nw.Endpoint(transport.Proc(p))
			c.Membership = fm.Handle(transport.Proc(p))
			rt, err := pgas.Init(ctx, c)
			if err != nil {
				if !errors.Is(err, pgas.ErrNotPromoted) {
					errs[p] = err
				}
				return
			}
			defer rt.Close()
			cfg := ckpt.LocalConfig()
			cfg.MaxBytes = 1 << 10
			cfg.Mirrors = 2 // two failures at once lose no checkpoint
			ck, err := ckpt.New(ctx, rt, cfg)
			if ck == nil {
				errs[p] = err
				return
			}
			defer ck.Close()
			if rerr := ck.Register("state", procs[p].state); rerr != nil {
				errs[p] = rerr
				return
			}
			procs[p].rt, procs[p].ck = rt, ck
			if err != nil { // a failure during the setup: Restore finishes it
				errs[p] = procs[p].loop.Rejoin(ctx, err)
			}
			if errs[p] == nil {
				errs[p] = procs[p].run(ctx)
			}
		})
	}
	wg.Wait()
	return procs, errs
}

// checkDone checks that the processes holding ranks at the end computed
// the failure-free answer and that the fenced ones got ErrFenced.
func checkDone(t *testing.T, procs []*rank, errs []error, fenced ...int) {
	t.Helper()
	for p, err := range errs {
		if slices.Contains(fenced, p) {
			// Replaced under Finalize, the process ends as pgas Finalize
			// ends on any outcome but a recovery: with its runtime closed.
			if !errors.Is(err, pgas.ErrFenced) && !(procs[p].finalizing && errors.Is(err, pgas.ErrClosed)) {
				t.Errorf("process %d (replaced): %v, want ErrFenced", p, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("process %d: %v", p, err)
			continue
		}
		if procs[p].rt == nil {
			continue // a spare the job did not need
		}
		if got, w := procs[p].acc(), want(len(procs)-len(fenced)-countIdle(procs)); got != w || procs[p].step() != steps {
			t.Errorf("process %d: step %d accumulator %d, want step %d accumulator %d", p, procs[p].step(), got, steps, w)
		}
	}
}

func countIdle(procs []*rank) int {
	n := 0
	for _, r := range procs {
		if r.rt == nil {
			n++
		}
	}
	return n
}

// A failure during a step: the survivors recover, every rank (the
// promoted spare too) restores the last committed checkpoint, and the job
// redoes the steps after it, ending with the failure-free answer. The
// process replaced gets ErrFenced.
func TestFailureDuringStep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		procs, errs := job(t, 3, 1, func(m membership, procs []*rank) {
			procs[0].beforeStep = func(s uint64) {
				if s == 4 {
					m.fail(1)
				}
			}
		})
		checkDone(t, procs, errs, 1)
		for _, p := range []int{0, 2, 3} {
			r := procs[p]
			// The failure is declared before rank 0's step 4; the step may
			// still complete (and be committed) before every rank applied
			// the new view, so the restored checkpoint is step 3's or 4's.
			if len(r.restoredStep) != 1 || r.restoredStep[0] < 3 {
				t.Errorf("process %d restored steps %v, want one, at least step 3 (the checkpoint before the failed step)", p, r.restoredStep)
			}
		}
		if a := procs[0].restores[0]; a.Cause == nil || !pgas.NeedsRecovery(a.Cause) || a.Retry {
			t.Errorf("survivor's attempt %+v, want the step's failure as the cause, no retry", a)
		}
		if a := procs[3].restores[0]; a.Cause != nil {
			t.Errorf("promoted spare's attempt %+v, want no cause (it joins)", a)
		}
	})
}

// A failure during the restore: the survivors recover again (Retry) and
// restore with the next spare in the job.
func TestFailureDuringRestore(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		procs, errs := job(t, 3, 2, func(m membership, procs []*rank) {
			procs[0].beforeStep = func(s uint64) {
				if s == 5 {
					m.fail(1)
				}
			}
			procs[0].beforeRestore = func(a Attempt) {
				if !a.Retry {
					m.fail(2)
				}
			}
		})
		checkDone(t, procs, errs, 1, 2)
		r := procs[0]
		if len(r.restores) < 2 || !r.restores[len(r.restores)-1].Retry {
			t.Fatalf("rank 0's attempts %+v, want a retry after the failure during the first", r.restores)
		}
		if len(r.restoredStep) != 1 || r.restoredStep[0] < 4 {
			t.Errorf("rank 0 restored steps %v, want one, at least step 4", r.restoredStep)
		}
	})
}

// A process declared failed while it waits for a recovery: Rejoin
// returns ErrFenced (pgas Recover's), not a retry.
func TestFencedRejoin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		procs, errs := job(t, 3, 2, func(m membership, procs []*rank) {
			procs[2].beforeStep = func(s uint64) {
				if s == 3 {
					m.fail(1)
					m.fail(2) // this process itself
				}
			}
		})
		checkDone(t, procs, errs, 1, 2)
	})
}

// A failure while the ranks finalize: Finalize fails on the survivors,
// they recover, restore the final checkpoint (nothing to redo) and
// finalize again.
func TestFinalizeRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		procs, errs := job(t, 3, 1, func(m membership, procs []*rank) {
			procs[0].beforeFinalize = func() { m.fail(2) }
		})
		checkDone(t, procs, errs, 2)
		for _, p := range []int{0, 1, 3} {
			if rs := procs[p].restoredStep; len(rs) != 1 || rs[0] != steps {
				t.Errorf("process %d restored steps %v, want [%d] (the final checkpoint)", p, rs, steps)
			}
		}
	})
}

// Finalize's own failure, one no recovery settles, is a *FinalizeError.
func TestFinalizeError(t *testing.T) {
	boom := errors.New("boom")
	err := Finalize(context.Background(), finalizer(func() error { return boom }), func(context.Context, error) error {
		t.Fatal("recover called for an error no recovery settles")
		return nil
	})
	var fe *FinalizeError
	if !errors.As(err, &fe) || !errors.Is(err, boom) || err.Error() != "boom" {
		t.Fatalf("Finalize = %v, want a *FinalizeError wrapping boom", err)
	}
}

// A recovery under Finalize that finds the job finished meanwhile
// (pgas.ErrFinished) ends it like a successful Finalize.
func TestFinalizeEndsWhenRecoveryFindsJobFinished(t *testing.T) {
	calls := 0
	err := Finalize(context.Background(), finalizer(func() error {
		calls++
		return &pgas.RankError{Rank: 1, Op: "barrier", Err: pgas.ErrRankFailed}
	}), func(context.Context, error) error {
		return fmt.Errorf("pgas: recover: %w", pgas.ErrFinished)
	})
	if err != nil || calls != 1 {
		t.Fatalf("Finalize = %v after %d rounds, want nil after 1", err, calls)
	}
}

type finalizer func() error

func (f finalizer) Finalize(context.Context) error { return f() }
