package pgas_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gaspigo/gaspigo/pgas"
	"github.com/gaspigo/gaspigo/pgas/pgastest"
	"github.com/gaspigo/gaspigo/transport"
	"github.com/gaspigo/gaspigo/transport/mem"
)

// Rule: once the job is recorded finished, a process leaving is the job
// ending. A rank that passed the second barrier of Finalize may leave
// while another still waits in it; the one left waiting must not ask for
// a recovery (there is nothing to recover, and no newer view will come)
// but end as the others did.
func TestFinalizeEndsWhenARankLeavesAfterFinish(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rts, _, _, fm, _ := newFTJob(t, 3, 0)
		ctx := context.Background()
		errs := make(chan error, 2)
		for _, rt := range rts[:2] {
			go func() { errs <- rt.Finalize(ctx) }()
		}
		// Rank 2 takes part in the first barrier only, then leaves: as a
		// rank whose last frames of the second barrier were lost when its
		// connections closed.
		if err := rts[2].Barrier(ctx, nil); err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // ranks 0 and 1 wait in the second barrier
		if !slices.Equal(fm.Finished(), []transport.Proc{0}) {
			t.Fatalf("Finish recorded by %v, want proc 0", fm.Finished())
		}
		rts[2].Close()
		synctest.Wait() // their barrier broke: they wait for the membership's verdict
		fm.Publish()
		for range 2 {
			if err := <-errs; err != nil {
				t.Errorf("Finalize = %v, want nil: the job had finished", err)
			}
		}
		for _, rt := range rts[:2] {
			if !pgas.IsClosed(rt) {
				t.Errorf("rank %d: runtime still open after Finalize", rt.Rank())
			}
		}
	})
}

// Rule: a failure under Finalize before the job is recorded finished is
// still recovered from: Finalize returns it once the membership commits
// the newer epoch, with the runtime open.
func TestFinalizeFailureBeforeFinishIsRecovered(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rts, promoted, nw, fm, _ := newFTJob(t, 3, 1)
		ctx := context.Background()
		pgas.Each(t, rts, func(rt *pgas.Runtime) error { return rt.Barrier(ctx, nil) })
		nw.Kill(2)
		defer func() { (<-promoted).Close() }() // the spare that takes rank 2
		pgas.Each(t, rts[:2], func(rt *pgas.Runtime) error {
			err := rt.Finalize(ctx)
			if !pgas.NeedsRecovery(err) {
				t.Errorf("rank %d: Finalize = %v, want an error needing recovery", rt.Rank(), err)
			}
			if pgas.IsClosed(rt) {
				t.Errorf("rank %d: runtime closed by a Finalize that needs recovery", rt.Rank())
			}
			return nil
		})
		if len(fm.Finished()) != 0 {
			t.Errorf("Finish recorded by %v before every rank reached Finalize", fm.Finished())
		}
	})
}

// Rule: Recover returns ErrFinished once the job is recorded finished,
// instead of waiting for a view that will never come.
func TestRecoverReturnsOnceFinished(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rts, _, _, fm, handles := newFTJob(t, 2, 0)
		pgas.NoteFailure(rts[0], 1) // a peer seen failing: Recover would wait for a newer epoch
		if err := handles[0].Finish(context.Background()); err != nil {
			t.Fatal(err)
		}
		fm.Publish()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := rts[0].Recover(ctx); !errors.Is(err, pgas.ErrFinished) {
			t.Fatalf("Recover = %v, want ErrFinished", err)
		}
	})
}

// Rule: Close stops the failure detector before it says goodbye, so a
// leaving process neither reports nor vouches for the peers that leave
// around it while its goodbyes go out.
func TestCloseStopsDetectorBeforeGoodbye(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rts, _, nw, _, _ := newFTJob(t, 3, 0)
		// A goodbye goes to the peers talked to: talk first.
		pgas.Each(t, rts, func(rt *pgas.Runtime) error { return rt.Barrier(context.Background(), nil) })
		var goodbyes, detectorRunning atomic.Int32
		nw.BeforeFrame(func(from, to transport.Proc, h *transport.Header) mem.Action {
			if from == 0 && h.Type == transport.FrameControl && h.A == pgas.CtlGoodbye {
				goodbyes.Add(1)
				select {
				case _, open := <-pgas.DetectorEvents(rts[0]):
					if open {
						detectorRunning.Add(1)
					}
				default: // open, and no event: still running
					detectorRunning.Add(1)
				}
			}
			return mem.Deliver
		})
		rts[0].Close()
		if goodbyes.Load() != 2 || detectorRunning.Load() != 0 {
			t.Fatalf("%d goodbyes sent, %d of them while the detector still ran; want 2 and 0", goodbyes.Load(), detectorRunning.Load())
		}
	})
}

// stuckSends is a transport whose goodbyes block until release closes,
// whatever their context and even after Close: a transport that breaks
// its promise that Close ends every send.
type stuckSends struct {
	*mem.Transport
	release <-chan struct{}
}

func (s stuckSends) Send(ctx context.Context, to transport.Proc, h *transport.Header, payload []byte) error {
	if h.Type == transport.FrameControl && h.A == pgas.CtlGoodbye {
		<-s.release
		return transport.ErrClosed
	}
	return s.Transport.Send(ctx, to, h, payload)
}

// Rule: Close ends in bounded time even when a goroutine of the runtime
// stays blocked in the transport after it closed (closeWait).
func TestCloseBoundedWhenSendNeverReturns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		rts, _, _, _, _ := newFTJobOn(t, 2, 0, nil, func(c *pgas.Config) {
			if c.Proc == 0 {
				c.Transport = stuckSends{Transport: c.Transport.(*mem.Transport), release: release}
			}
		})
		t.Cleanup(func() { close(release) }) // before the job's own cleanup
		pgas.Each(t, rts, func(rt *pgas.Runtime) error { return rt.Barrier(context.Background(), nil) })
		done := make(chan time.Duration, 1)
		go func() {
			start := time.Now()
			rts[0].Close()
			done <- time.Since(start)
		}()
		select {
		case took := <-done:
			if want := pgas.CloseWait + pgas.GoodbyeTimeout(1); took < pgas.CloseWait || took > want {
				t.Fatalf("Close took %v (fake time), want between closeWait %v and %v", took, pgas.CloseWait, want)
			}
		case <-time.After(10 * pgas.CloseWait):
			t.Fatalf("Close still blocked after %v (fake time)", 10*pgas.CloseWait)
		}
	})
}

// slowFinisher is a membership that never records the end of the job.
type slowFinisher struct{ *pgastest.Handle }

func (s slowFinisher) Finish(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

// Rule: a membership that cannot record the end of the job holds
// Finalize for at most finishTimeout; the ranks then end as usual (idle
// spares learn the end from their goodbyes).
func TestFinalizeBoundedWhenFinishNeverCommits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rts, _, _, _, _ := newFTJobOn(t, 3, 0, nil, func(c *pgas.Config) {
			if c.Proc == 0 {
				c.Membership = slowFinisher{c.Membership.(*pgastest.Handle)}
			}
		})
		ctx := context.Background()
		done := make(chan error, len(rts))
		start := time.Now()
		for _, rt := range rts {
			go func() { done <- rt.Finalize(ctx) }()
		}
		for range rts {
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Finalize = %v, want nil", err)
				}
			case <-time.After(10 * pgas.FinishTimeout):
				t.Fatalf("Finalize still blocked after %v (fake time)", 10*pgas.FinishTimeout)
			}
		}
		if took := time.Since(start); took < pgas.FinishTimeout {
			t.Errorf("Finalize took %v, less than finishTimeout %v: was Finish waited for at all?", took, pgas.FinishTimeout)
		}
	})
}
