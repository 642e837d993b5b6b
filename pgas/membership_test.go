package pgas_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gaspigo/gaspigo/health"
	"github.com/gaspigo/gaspigo/pgas"
	"github.com/gaspigo/gaspigo/pgas/pgastest"
	"github.com/gaspigo/gaspigo/transport"
	"github.com/gaspigo/gaspigo/transport/mem"
)

// newFTJob starts ranks+spares processes with the detector and the
// membership of package pgastest. Spares' Init blocks until promotion, so
// it runs in the background; promoted spares arrive on the returned
// channel.
func newFTJob(t *testing.T, ranks, spares int) ([]*pgas.Runtime, chan *pgas.Runtime, *mem.Network, *pgastest.Membership, []*pgastest.Handle) {
	t.Helper()
	return newFTJobOn(t, ranks, spares, nil)
}

// newFTJobOn is newFTJob with host labels (Config.Hosts, by process).
// Each mut, when given, adjusts every process's configuration before Init.
func newFTJobOn(t *testing.T, ranks, spares int, hosts []string, mut ...func(*pgas.Config)) ([]*pgas.Runtime, chan *pgas.Runtime, *mem.Network, *pgastest.Membership, []*pgastest.Handle) {
	t.Helper()
	n := ranks + spares
	nw, err := mem.New(n, mem.Config{Seed: 42})
	if err != nil {
		t.Fatal(err)
	}
	fm := pgastest.New(ranks, n)
	hc := health.LocalConfig()
	handles := make([]*pgastest.Handle, n)
	rts := make([]*pgas.Runtime, ranks)
	promoted := make(chan *pgas.Runtime, spares)
	var all []*pgas.Runtime
	var mu sync.Mutex
	for i := 0; i < n; i++ {
		cfg := pgas.LocalConfig()
		cfg.Proc = transport.Proc(i)
		cfg.NumProcs, cfg.NumRanks = n, ranks
		cfg.Transport = nw.Endpoint(transport.Proc(i))
		cfg.Hosts = hosts
		handles[i] = fm.Handle(transport.Proc(i))
		cfg.Membership = handles[i]
		cfg.Health = &hc
		for _, m := range mut {
			m(&cfg)
		}
		if i >= ranks {
			go func() {
				rt, err := pgas.Init(context.Background(), cfg)
				if err == nil {
					mu.Lock()
					all = append(all, rt)
					mu.Unlock()
					promoted <- rt
				}
			}()
			continue
		}
		rt, err := pgas.Init(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		rts[i] = rt
		all = append(all, rt)
	}
	t.Cleanup(func() {
		mu.Lock()
		for _, rt := range all {
			rt.Close()
		}
		mu.Unlock()
		nw.Close()
	})
	return rts, promoted, nw, fm, handles
}

// A killed rank is detected, the spare is promoted, survivors Recover into
// the new epoch, and the job goes on with a collective that includes the
// promoted spare.
func TestDetectPromoteRecover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rts, promoted, nw, fm, _ := newFTJob(t, 3, 1)
		ctx := context.Background()
		pgas.Each(t, rts, func(rt *pgas.Runtime) error { return rt.Barrier(ctx, nil) })
		nw.Kill(1)
		survivors := []*pgas.Runtime{rts[0], rts[2]}
		pgas.Each(t, survivors, func(rt *pgas.Runtime) error {
			// Depending on timing the barrier meets the dead rank or the
			// new epoch first: either way the program must recover.
			err := rt.Barrier(ctx, nil)
			if !pgas.NeedsRecovery(err) {
				t.Errorf("barrier with a dead rank returned %v, want an error needing recovery", err)
			}
			return rt.Recover(ctx)
		})
		spare := <-promoted
		if spare.Rank() != 1 || spare.Epoch() != 1 || spare.Proc() != 3 {
			t.Fatalf("promoted spare: rank %d epoch %d proc %d", spare.Rank(), spare.Epoch(), spare.Proc())
		}
		if !slices.Equal(fm.Reports(), []transport.Proc{1}) {
			t.Fatalf("failures reported: %v", fm.Reports())
		}
		job := []*pgas.Runtime{rts[0], spare, rts[2]}
		pgas.Each(t, job, func(rt *pgas.Runtime) error {
			if rt.Epoch() != 1 {
				t.Errorf("rank %d in epoch %d", rt.Rank(), rt.Epoch())
			}
			sv := rt.StateVector()
			for r, e := range sv {
				if e.State != health.Healthy {
					t.Errorf("rank %d sees rank %d as %v", rt.Rank(), r, e.State)
				}
			}
			x := []float64{float64(rt.Rank())}
			if err := pgas.Allreduce(ctx, rt, nil, x, pgas.OpSum); err != nil {
				return err
			}
			if x[0] != 3 {
				t.Errorf("sum after recovery = %v", x[0])
			}
			return nil
		})
	})
}

// A process cut off long enough to be replaced (as SIGSTOP would) is
// fenced: what it sent is refused, and it learns that it must exit.
func TestPausedProcessIsFenced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rts, promoted, nw, _, handles := newFTJob(t, 3, 1)
		ctx := context.Background()
		pgas.Each(t, rts, func(rt *pgas.Runtime) error {
			_, err := rt.SegmentCreate(ctx, 1, 64, nil)
			return err
		})
		// "Pause" proc 2: no frames in or out, no membership news.
		handles[2].Pause(true)
		nw.Partition([]transport.Proc{0, 1, 3}, []transport.Proc{2})
		seg2, _ := rts[2].Segment(1)
		copy(seg2.Bytes(), "stale data from the paused process")
		if err := rts[2].Write(ctx, 0, 0, pgas.Loc{Seg: 1, Off: 0}, pgas.Loc{Seg: 1, Off: 0}, 34); err != nil {
			t.Fatal(err)
		}
		// The others detect it and the spare takes rank 2.
		spare := <-promoted
		if spare.Rank() != 2 {
			t.Fatalf("spare holds rank %d", spare.Rank())
		}
		pgas.Each(t, []*pgas.Runtime{rts[0], rts[1]}, func(rt *pgas.Runtime) error { return rt.Recover(ctx) })
		// "Resume": the held write arrives with the old epoch.
		before := rts[0].Stats().FramesRejected
		nw.Heal()
		err := rts[2].Wait(ctx, 0)
		if !errors.Is(err, pgas.ErrFenced) && !errors.Is(err, pgas.ErrRankFailed) {
			t.Fatalf("paused process's Wait = %v, want it fenced or cut off", err)
		}
		synctest.Wait()
		seg0, _ := rts[0].Segment(1)
		for _, b := range seg0.Bytes()[:34] {
			if b != 0 {
				t.Fatalf("rank 0 memory was written by the fenced process: %q", seg0.Bytes()[:34])
			}
		}
		if rts[0].Stats().FramesRejected <= before {
			t.Fatalf("rank 0 did not count the refused frame")
		}
		handles[2].Pause(false)
		synctest.Wait()
		if !rts[2].Fenced() {
			t.Fatal("the replaced process does not know it is fenced")
		}
		if err := rts[2].Barrier(ctx, nil); !errors.Is(err, pgas.ErrFenced) {
			t.Fatalf("fenced process's Barrier = %v, want ErrFenced", err)
		}
	})
}

// A spare waiting for promotion learns that the job ended when every rank
// said goodbye, even if the membership never says so (its voters left).
func TestSpareExitsWhenEveryRankLeaves(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw, err := mem.New(3, mem.Config{Seed: 5})
		if err != nil {
			t.Fatal(err)
		}
		defer nw.Close()
		fm := pgastest.New(2, 3)
		cfgFor := func(p int) pgas.Config {
			cfg := pgas.LocalConfig()
			cfg.Proc = transport.Proc(p)
			cfg.NumProcs, cfg.NumRanks = 3, 2
			cfg.Transport = nw.Endpoint(transport.Proc(p))
			cfg.Membership = fm.Handle(transport.Proc(p))
			return cfg
		}
		spareErr := make(chan error, 1)
		go func() {
			rt, err := pgas.Init(context.Background(), cfgFor(2))
			if rt != nil {
				rt.Close()
			}
			spareErr <- err
		}()
		var rts []*pgas.Runtime
		for p := 0; p < 2; p++ {
			rt, err := pgas.Init(context.Background(), cfgFor(p))
			if err != nil {
				t.Fatal(err)
			}
			rts = append(rts, rt)
		}
		pgas.Each(t, rts, func(rt *pgas.Runtime) error { return rt.Barrier(context.Background(), nil) })
		for _, rt := range rts {
			rt.Close()
		}
		if err := <-spareErr; !errors.Is(err, pgas.ErrNotPromoted) {
			t.Fatalf("spare's Init = %v, want ErrNotPromoted", err)
		}
	})
}

// Rule: a process told by a peer that it was replaced stops waiting in
// Recover: it gets no view from the membership it left.
func TestFenceWakesRecover(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rts, _, _, _, _ := newFTJob(t, 3, 0)
		ctx := context.Background()
		pgas.Each(t, rts, func(rt *pgas.Runtime) error { return rt.Barrier(ctx, nil) })
		pgas.NoteFailure(rts[1], 2) // as if it had seen proc 2 fail: Recover waits for a newer view
		done := make(chan error, 1)
		go func() { done <- rts[1].Recover(ctx) }()
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("Recover returned %v before any view or fence", err)
		default:
		}
		pgas.Fence(rts[1], "a peer refused a frame")
		select {
		case err := <-done:
			if !errors.Is(err, pgas.ErrFenced) {
				t.Fatalf("Recover after the fence: %v, want ErrFenced", err)
			}
		case <-time.After(time.Minute): // fake time
			t.Fatal("Recover still waits a minute after the fence")
		}
	})
}

// Rule: when the membership gives up on a process (cut off from its quorum
// for too long), a call blocked on peers that will never answer returns
// the membership's error, so do Recover and every later call, and a spare
// waiting for promotion stops waiting with it.
func TestMembershipLossStopsTheProcess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rts, promoted, _, _, handles := newFTJob(t, 3, 1)
		ctx := context.Background()
		pgas.Each(t, rts, func(rt *pgas.Runtime) error { return rt.Barrier(ctx, nil) })
		errCut := errors.New("cut off from the membership for 10s")
		done := make(chan error, 1)
		go func() { done <- rts[1].Barrier(ctx, nil) }() // the others never join
		synctest.Wait()
		handles[1].Lose(errCut)
		select {
		case err := <-done:
			if !errors.Is(err, errCut) {
				t.Fatalf("blocked barrier returned %v, want the membership's error", err)
			}
		case <-time.After(time.Minute): // fake time
			t.Fatal("the barrier still waits a minute after the membership gave up")
		}
		if err := rts[1].Recover(ctx); !errors.Is(err, errCut) {
			t.Fatalf("Recover = %v, want the membership's error", err)
		}
		if err := rts[1].Usable(); !errors.Is(err, errCut) || rts[1].Fenced() {
			t.Fatalf("Usable = %v, Fenced = %v; want the membership's error, not fenced", rts[1].Usable(), rts[1].Fenced())
		}
		handles[3].Lose(errCut) // the idle spare
		synctest.Wait()
		select {
		case rt := <-promoted:
			t.Fatalf("the spare was promoted (rank %d) after the membership gave up on it", rt.Rank())
		default:
		}
		pgas.Each(t, []*pgas.Runtime{rts[0], rts[2]}, func(rt *pgas.Runtime) error { return rt.Usable() })
	})
}

// Rule: a response that was sent in the epoch its request was sent in,
// but lands after the requester applied a newer view, is refused as stale,
// and the request fails with an error that calls for recovery. It must
// not stay pending: Wait would block for ever (a promoted spare fetching
// its checkpoint hung so when a second view followed the first at once).
func TestStaleResponseFailsTheRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rts, _, nw, _, handles := newFTJob(t, 2, 1)
		pgas.CreateSeg(t, rts, 1, 1024)
		ctx := context.Background()
		release := make(chan struct{})
		nw.BeforeFrame(func(from, to transport.Proc, h *transport.Header) mem.Action {
			if from == 1 && to == 0 && (h.Type == transport.FrameReadResp || h.Type == transport.FrameAtomicResp) {
				<-release // rank 1 answered in epoch 0; hold it until rank 0 is in epoch 1
			}
			return mem.Deliver
		})
		errs := make(chan error, 2)
		go func() {
			if err := rts[0].Read(ctx, 0, 1, pgas.Loc{Seg: 1, Off: 0}, pgas.Loc{Seg: 1, Off: 8}, 8); err != nil {
				errs <- err
				return
			}
			errs <- rts[0].Wait(ctx, 0)
		}()
		go func() {
			_, err := rts[0].FetchAdd(ctx, 1, pgas.Loc{Seg: 1, Off: 64}, 1)
			errs <- err
		}()
		synctest.Wait() // both requests answered, the answers held
		// The spare fails: a new view, with the same ranks.
		if err := handles[0].ReportFailure(ctx, 2, 0); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if rts[0].Epoch() != 1 || rts[1].Epoch() != 1 {
			t.Fatalf("epochs %d and %d after the new view, want 1", rts[0].Epoch(), rts[1].Epoch())
		}
		close(release)
		tctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		for range 2 {
			select {
			case err := <-errs:
				if !pgas.NeedsRecovery(err) {
					t.Errorf("a request answered in the old epoch returned %v, want an error that needs recovery", err)
				}
			case <-tctx.Done():
				t.Fatal("a request answered in the old epoch is still pending a minute later")
			}
		}
	})
}

// Rule (Wait: the queue is emptied whatever the outcome): a Wait refused
// because a newer epoch was committed empties its queue all the same, and
// Recover drops what the program posted and never waited for. Left there,
// a write of the old epoch was waited for by the first Wait after
// Recover; its refusal as stale sent the program to recover again within
// the new epoch, out of step with the others' collectives
// (TestJoinersRefillThePool paired a barrier with an allgather so, under
// load: a wrong answer when the sizes agree).
func TestWaitRefusedByANewEpochEmptiesItsQueue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rts, _, nw, fm, _ := newFTJob(t, 2, 0)
		pgas.CreateSeg(t, rts, 1, 1024)
		ctx := context.Background()
		loc := pgas.Loc{Seg: 1}
		hold := make(chan struct{})
		var held atomic.Bool
		nw.BeforeFrame(func(from, to transport.Proc, h *transport.Header) mem.Action {
			if from == 0 && to == 1 && h.Type == transport.FrameWrite && held.CompareAndSwap(false, true) {
				<-hold // stamped with epoch 0, it lands once rank 1 is in epoch 1
			}
			return mem.Deliver
		})
		if err := rts[0].Write(ctx, 0, 1, loc, loc, 8); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		fm.Advance()
		synctest.Wait()
		if err := rts[0].Wait(ctx, 0); !pgas.NeedsRecovery(err) {
			t.Fatalf("Wait after a newer epoch was committed: %v, want an error that needs recovery", err)
		}
		close(hold) // rank 1 refuses it as stale
		synctest.Wait()
		pgas.Each(t, rts, func(rt *pgas.Runtime) error { return rt.Recover(ctx) })
		for k := range 3 {
			if err := rts[0].Write(ctx, 0, 1, loc, loc, 8); err != nil {
				t.Fatal(err)
			}
			if err := rts[0].Wait(ctx, 0); err != nil {
				t.Fatalf("Wait %d of the new epoch: %v, want nil (it waited for the old epoch's refused write)", k, err)
			}
		}
	})
}
