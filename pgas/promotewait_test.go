package pgas_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/pgas"
	"github.com/gaspigo/gaspigo/pgas/pgastest"
	"github.com/gaspigo/gaspigo/transport"
	"github.com/gaspigo/gaspigo/transport/mem"
)

// A process fenced while it waits for a view (a spare for its promotion,
// a survivor in Recover) stops waiting, whenever the fence comes: here
// between its look at the view and its look at the halt, where a fence
// once left it waiting for ever on a channel nobody would close again (a
// fenced spare of a healed partition never exited, in test/mhtier).
func TestFencedWhileWaitingForAViewReturns(t *testing.T) {
	t.Run("spare", func(t *testing.T) {
		cfgs := viewWaitJob(t, 1, 2)
		rank, err := pgas.Init(context.Background(), cfgs[0])
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rank.Close() })
		fencedInViewWait(t, 1, func() error {
			rt, err := pgas.Init(context.Background(), cfgs[1])
			if err == nil {
				rt.Close()
			}
			return err
		})
	})
	t.Run("recover", func(t *testing.T) {
		cfgs := viewWaitJob(t, 2, 2)
		rts := make([]*pgas.Runtime, 2)
		var wg sync.WaitGroup
		for i := range rts {
			wg.Go(func() {
				rt, err := pgas.Init(context.Background(), cfgs[i])
				if err != nil {
					t.Error(err)
					return
				}
				rts[i] = rt
				t.Cleanup(func() { rt.Close() })
			})
		}
		wg.Wait()
		if t.Failed() {
			return
		}
		pgas.NoteFailure(rts[1], 0) // Recover now waits for a view that replaces proc 0
		fencedInViewWait(t, 1, func() error { return rts[1].Recover(context.Background()) })
	})
}

// viewWaitJob is the configurations of a job of ranks ranks and procs
// processes over one in-memory network, with a test membership.
func viewWaitJob(t *testing.T, ranks, procs int) []pgas.Config {
	nw, err := mem.New(procs, mem.Config{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nw.Close() })
	fm := pgastest.New(ranks, procs)
	cfgs := make([]pgas.Config, procs)
	for i := range cfgs {
		p := transport.Proc(i)
		cfgs[i] = pgas.LocalConfig()
		cfgs[i].Proc, cfgs[i].NumProcs, cfgs[i].NumRanks = p, procs, ranks
		cfgs[i].Transport, cfgs[i].Membership = nw.Endpoint(p), fm.Handle(p)
	}
	return cfgs
}

// fencedInViewWait runs wait, fences process proc the first time it is
// between its look at the view and its look at the halt, and fails t
// unless wait returns ErrFenced within 10 s.
func fencedInViewWait(t *testing.T, proc transport.Proc, wait func() error) {
	t.Helper()
	var once sync.Once
	pgas.SetViewWaitHook(t, func(rt *pgas.Runtime) {
		if rt.Proc() == proc {
			once.Do(func() { pgas.Fence(rt, "test: fenced between the two looks") })
		}
	})
	done := make(chan error, 1)
	go func() { done <- wait() }()
	select {
	case err := <-done:
		if !errors.Is(err, pgas.ErrFenced) {
			t.Fatalf("the fenced process's wait returned %v, want ErrFenced", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the process fenced while it waited for a view still waits 10 s later")
	}
}
