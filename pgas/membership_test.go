package pgas

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gaspigo/gaspigo/health"
	"github.com/gaspigo/gaspigo/transport"
	"github.com/gaspigo/gaspigo/transport/mem"
)

// fakeMembership stands in for the Raft membership: one shared state, and
// a reported failure is turned at once into a new epoch in which the first
// spare takes the failed rank.
type fakeMembership struct {
	mu      sync.Mutex
	cur     View
	spares  []transport.Proc
	handles []*fakeHandle
	reports []transport.Proc
	// shrink: with no spare left, a failed rank becomes vacant instead of
	// failing the job.
	shrink   bool
	finished []transport.Proc // who called Finish
}

type fakeHandle struct {
	f      *fakeMembership
	proc   transport.Proc
	ch     chan View
	paused bool
	held   *View

	lost    chan struct{} // closed by lose
	lostErr error
}

var _ MembershipLoss = (*fakeHandle)(nil)

func (h *fakeHandle) Lost() <-chan struct{} { return h.lost }
func (h *fakeHandle) LostErr() error        { return h.lostErr }

// lose makes the membership give up on this process with err, as package
// spares does for a process cut off from its quorum.
func (h *fakeHandle) lose(err error) {
	h.lostErr = err
	close(h.lost)
}

func newFakeMembership(ranks, procs int) *fakeMembership {
	f := &fakeMembership{}
	for r := 0; r < ranks; r++ {
		f.cur.Ranks = append(f.cur.Ranks, transport.Proc(r))
	}
	for p := ranks; p < procs; p++ {
		f.spares = append(f.spares, transport.Proc(p))
	}
	return f
}

func (f *fakeMembership) handle() *fakeHandle {
	f.mu.Lock()
	defer f.mu.Unlock()
	h := &fakeHandle{f: f, ch: make(chan View, 1), lost: make(chan struct{})}
	f.handles = append(f.handles, h)
	return h
}

func (h *fakeHandle) Current() View {
	h.f.mu.Lock()
	defer h.f.mu.Unlock()
	return h.f.cur
}

func (h *fakeHandle) Watch() <-chan View { return h.ch }

func (h *fakeHandle) ReportFailure(ctx context.Context, proc transport.Proc, epoch uint64) error {
	f := h.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if slices.Contains(f.cur.Failed, proc) {
		return nil
	}
	f.reports = append(f.reports, proc)
	v := View{Epoch: f.cur.Epoch + 1, Ranks: slices.Clone(f.cur.Ranks), Failed: append(slices.Clone(f.cur.Failed), proc)}
	for r, p := range v.Ranks {
		if p == proc {
			if len(f.spares) == 0 && f.shrink {
				v.Ranks[r] = transport.NoProc
				break
			}
			if len(f.spares) == 0 {
				v.Err = errors.New("no spares left")
				break
			}
			v.Ranks[r] = f.spares[0]
			f.spares = f.spares[1:]
		}
	}
	f.cur = v
	for _, x := range f.handles {
		x.push(v)
	}
	return nil
}

// Finish records that the job finished and which process said so.
func (h *fakeHandle) Finish(ctx context.Context) error {
	h.f.mu.Lock()
	defer h.f.mu.Unlock()
	h.f.finished = append(h.f.finished, h.proc)
	h.f.cur.Finished = true
	return nil
}

// push delivers v with latest-value semantics, or holds it while paused.
func (h *fakeHandle) push(v View) {
	if h.paused {
		h.held = &v
		return
	}
	select {
	case <-h.ch:
	default:
	}
	h.ch <- v
}

func (h *fakeHandle) setPaused(p bool) {
	h.f.mu.Lock()
	defer h.f.mu.Unlock()
	h.paused = p
	if !p && h.held != nil {
		v := *h.held
		h.held = nil
		h.push(v)
	}
}

// newFTJob starts ranks+spares processes with the detector and the fake
// membership. Spares' Init blocks until promotion, so it runs in the
// background; promoted spares arrive on the returned channel.
func newFTJob(t *testing.T, ranks, spares int) ([]*Runtime, chan *Runtime, *mem.Network, *fakeMembership, []*fakeHandle) {
	t.Helper()
	return newFTJobOn(t, ranks, spares, nil)
}

// newFTJobOn is newFTJob with host labels (Config.Hosts, by process).
// Each mut, when given, adjusts every process's configuration before Init.
func newFTJobOn(t *testing.T, ranks, spares int, hosts []string, mut ...func(*Config)) ([]*Runtime, chan *Runtime, *mem.Network, *fakeMembership, []*fakeHandle) {
	t.Helper()
	n := ranks + spares
	nw, err := mem.New(n, mem.Config{Seed: 42})
	if err != nil {
		t.Fatal(err)
	}
	fm := newFakeMembership(ranks, n)
	hc := health.LocalConfig()
	handles := make([]*fakeHandle, n)
	rts := make([]*Runtime, ranks)
	promoted := make(chan *Runtime, spares)
	var all []*Runtime
	var mu sync.Mutex
	for i := 0; i < n; i++ {
		cfg := LocalConfig()
		cfg.Proc = transport.Proc(i)
		cfg.NumProcs, cfg.NumRanks = n, ranks
		cfg.Transport = nw.Endpoint(transport.Proc(i))
		cfg.Hosts = hosts
		handles[i] = fm.handle()
		handles[i].proc = transport.Proc(i)
		cfg.Membership = handles[i]
		cfg.Health = &hc
		for _, m := range mut {
			m(&cfg)
		}
		if i >= ranks {
			go func() {
				rt, err := Init(context.Background(), cfg)
				if err == nil {
					mu.Lock()
					all = append(all, rt)
					mu.Unlock()
					promoted <- rt
				}
			}()
			continue
		}
		rt, err := Init(context.Background(), cfg)
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
		each(t, rts, func(rt *Runtime) error { return rt.Barrier(ctx, nil) })
		nw.Kill(1)
		survivors := []*Runtime{rts[0], rts[2]}
		each(t, survivors, func(rt *Runtime) error {
			// Depending on timing the barrier meets the dead rank or the
			// new epoch first: either way the program must recover.
			err := rt.Barrier(ctx, nil)
			if !NeedsRecovery(err) {
				t.Errorf("barrier with a dead rank returned %v, want an error needing recovery", err)
			}
			return rt.Recover(ctx)
		})
		spare := <-promoted
		if spare.Rank() != 1 || spare.Epoch() != 1 || spare.Proc() != 3 {
			t.Fatalf("promoted spare: rank %d epoch %d proc %d", spare.Rank(), spare.Epoch(), spare.Proc())
		}
		if !slices.Equal(fm.reports, []transport.Proc{1}) {
			t.Fatalf("failures reported: %v", fm.reports)
		}
		job := []*Runtime{rts[0], spare, rts[2]}
		each(t, job, func(rt *Runtime) error {
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
			if err := Allreduce(ctx, rt, nil, x, OpSum); err != nil {
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
		each(t, rts, func(rt *Runtime) error {
			_, err := rt.SegmentCreate(ctx, 1, 64, nil)
			return err
		})
		// "Pause" proc 2: no frames in or out, no membership news.
		handles[2].setPaused(true)
		nw.Partition([]transport.Proc{0, 1, 3}, []transport.Proc{2})
		seg2, _ := rts[2].Segment(1)
		copy(seg2.Bytes(), "stale data from the paused process")
		if err := rts[2].Write(ctx, 0, 0, Loc{1, 0}, Loc{1, 0}, 34); err != nil {
			t.Fatal(err)
		}
		// The others detect it and the spare takes rank 2.
		spare := <-promoted
		if spare.Rank() != 2 {
			t.Fatalf("spare holds rank %d", spare.Rank())
		}
		each(t, []*Runtime{rts[0], rts[1]}, func(rt *Runtime) error { return rt.Recover(ctx) })
		// "Resume": the held write arrives with the old epoch.
		before := rts[0].Stats().FramesRejected
		nw.Heal()
		err := rts[2].Wait(ctx, 0)
		if !errors.Is(err, ErrFenced) && !errors.Is(err, ErrRankFailed) {
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
		handles[2].setPaused(false)
		synctest.Wait()
		if !rts[2].Fenced() {
			t.Fatal("the replaced process does not know it is fenced")
		}
		if err := rts[2].Barrier(ctx, nil); !errors.Is(err, ErrFenced) {
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
		fm := newFakeMembership(2, 3)
		cfgFor := func(p int) Config {
			cfg := LocalConfig()
			cfg.Proc = transport.Proc(p)
			cfg.NumProcs, cfg.NumRanks = 3, 2
			cfg.Transport = nw.Endpoint(transport.Proc(p))
			cfg.Membership = fm.handle()
			return cfg
		}
		spareErr := make(chan error, 1)
		go func() {
			rt, err := Init(context.Background(), cfgFor(2))
			if rt != nil {
				rt.Close()
			}
			spareErr <- err
		}()
		var rts []*Runtime
		for p := 0; p < 2; p++ {
			rt, err := Init(context.Background(), cfgFor(p))
			if err != nil {
				t.Fatal(err)
			}
			rts = append(rts, rt)
		}
		each(t, rts, func(rt *Runtime) error { return rt.Barrier(context.Background(), nil) })
		for _, rt := range rts {
			rt.Close()
		}
		if err := <-spareErr; !errors.Is(err, ErrNotPromoted) {
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
		each(t, rts, func(rt *Runtime) error { return rt.Barrier(ctx, nil) })
		rts[1].noteFailure(2) // as if it had seen proc 2 fail: Recover waits for a newer view
		done := make(chan error, 1)
		go func() { done <- rts[1].Recover(ctx) }()
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("Recover returned %v before any view or fence", err)
		default:
		}
		rts[1].fence("a peer refused a frame")
		select {
		case err := <-done:
			if !errors.Is(err, ErrFenced) {
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
		each(t, rts, func(rt *Runtime) error { return rt.Barrier(ctx, nil) })
		errCut := errors.New("cut off from the membership for 10s")
		done := make(chan error, 1)
		go func() { done <- rts[1].Barrier(ctx, nil) }() // the others never join
		synctest.Wait()
		handles[1].lose(errCut)
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
		handles[3].lose(errCut) // the idle spare
		synctest.Wait()
		select {
		case rt := <-promoted:
			t.Fatalf("the spare was promoted (rank %d) after the membership gave up on it", rt.Rank())
		default:
		}
		each(t, []*Runtime{rts[0], rts[2]}, func(rt *Runtime) error { return rt.Usable() })
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
		createSeg(t, rts, 1, 1024)
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
			if err := rts[0].Read(ctx, 0, 1, Loc{1, 0}, Loc{1, 8}, 8); err != nil {
				errs <- err
				return
			}
			errs <- rts[0].Wait(ctx, 0)
		}()
		go func() {
			_, err := rts[0].FetchAdd(ctx, 1, Loc{1, 64}, 1)
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
				if !NeedsRecovery(err) {
					t.Errorf("a request answered in the old epoch returned %v, want an error that needs recovery", err)
				}
			case <-tctx.Done():
				t.Fatal("a request answered in the old epoch is still pending a minute later")
			}
		}
	})
}
