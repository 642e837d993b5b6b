package pgastest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/gaspigo/gaspigo/pgas"
	"github.com/gaspigo/gaspigo/transport"
)

// latest returns the view waiting on h's channel, if any.
func latest(h *Handle) (pgas.View, bool) {
	select {
	case v := <-h.Watch():
		return v, true
	default:
		return pgas.View{}, false
	}
}

func TestPromoteShrinkFail(t *testing.T) {
	ctx := context.Background()
	m := New(3, 4)
	h0, h1 := m.Handle(0), m.Handle(1)
	h0.ReportFailure(ctx, 2, 0)
	h1.ReportFailure(ctx, 2, 0) // a repeat is a no-op
	v, ok := latest(h1)
	if !ok || v.Epoch != 1 || !slices.Equal(v.Ranks, []transport.Proc{0, 1, 3}) || !slices.Equal(v.Failed, []transport.Proc{2}) {
		t.Fatalf("after the first failure: %+v (published %v), want epoch 1, spare 3 in rank 2", v, ok)
	}
	if _, ok := latest(h1); ok {
		t.Fatalf("a repeated report published another view")
	}
	m.SetShrink(true)
	h0.ReportFailure(ctx, 1, 1)
	if v := h0.Current(); !slices.Equal(v.Ranks, []transport.Proc{0, transport.NoProc, 3}) || v.Err != nil {
		t.Fatalf("shrink: %+v, want rank 1 vacant", v)
	}
	m.SetShrink(false)
	h0.ReportFailure(ctx, 3, 2)
	if v := h0.Current(); !errors.Is(v.Err, ErrNoSpares) {
		t.Fatalf("no spare, no shrink: %+v, want ErrNoSpares", v)
	}
	if got := m.Reports(); !slices.Equal(got, []transport.Proc{2, 1, 3}) {
		t.Fatalf("Reports() = %v", got)
	}
	h1.Finish(ctx)
	if !m.Current().Finished || !slices.Equal(m.Finished(), []transport.Proc{1}) {
		t.Fatalf("Finish: finished %v, view %+v", m.Finished(), m.Current())
	}
}

// Once the job finished, or cannot go on, a report changes nothing (as in
// package spares): an idle spare that leaves at the end is no failure.
func TestReportsStopAtTheEnd(t *testing.T) {
	ctx := context.Background()
	for _, end := range []string{"finished", "failed"} {
		m := New(2, 4)
		h0 := m.Handle(0)
		switch end {
		case "finished":
			h0.Finish(ctx)
		case "failed":
			m.SetShrink(false)
			h0.ReportFailure(ctx, 2, 0) // idle spares 2 and 3 lost,
			h0.ReportFailure(ctx, 3, 1)
			h0.ReportFailure(ctx, 1, 2) // then a rank: no spare left
			if v := m.Current(); !errors.Is(v.Err, ErrNoSpares) {
				t.Fatalf("setup: %+v, want ErrNoSpares", v)
			}
		}
		before := m.Current()
		reports := m.Reports()
		h0.ReportFailure(ctx, 0, before.Epoch)
		if v := m.Current(); v.Epoch != before.Epoch || !slices.Equal(v.Failed, before.Failed) || v.Finished != before.Finished || !errors.Is(v.Err, before.Err) {
			t.Errorf("%s: a report changed the view %+v into %+v", end, before, v)
		}
		if got := m.Reports(); !slices.Equal(got, reports) {
			t.Errorf("%s: Reports() = %v, want %v", end, got, reports)
		}
	}
}

func TestHoldPauseLose(t *testing.T) {
	ctx := context.Background()
	m := New(4, 6)
	h0, h1 := m.Handle(0), m.Handle(1)
	m.Hold(2)
	h0.ReportFailure(ctx, 1, 0)
	m.Release()
	if _, ok := latest(h0); ok {
		t.Fatalf("published before the second expected failure")
	}
	h0.ReportFailure(ctx, 2, 0)
	v, ok := latest(h0)
	if !ok || v.Epoch != 2 || len(v.Failed) != 2 {
		t.Fatalf("held failures: %+v (published %v), want one view of epoch 2 with both", v, ok)
	}
	latest(h1)
	h1.Pause(true)
	h0.ReportFailure(ctx, 3, 2)
	if _, ok := latest(h1); ok {
		t.Fatalf("a paused handle got a view")
	}
	if v, ok := latest(h0); !ok || v.Epoch != 3 {
		t.Fatalf("the other handle: %+v (published %v), want epoch 3", v, ok)
	}
	h1.Pause(false)
	if v, ok := latest(h1); !ok || v.Epoch != 3 {
		t.Fatalf("after Pause(false): %+v (published %v), want epoch 3", v, ok)
	}
	errCut := errors.New("cut off")
	h1.Lose(errCut)
	select {
	case <-h1.Lost():
	default:
		t.Fatalf("Lost not closed after Lose")
	}
	if h1.LostErr() != errCut {
		t.Fatalf("LostErr() = %v", h1.LostErr())
	}
	select {
	case <-h0.Lost():
		t.Fatalf("Lose of one handle closed another's Lost")
	default:
	}
}

func TestJoin(t *testing.T) {
	ctx := context.Background()
	m := New(2, 3) // proc 2 is a spare
	h := m.Handle(0)
	for _, p := range []transport.Proc{5, 4} {
		if _, err := m.Join(p, fmt.Sprintf("mem:%d", p), "hj"); err != nil {
			t.Fatal(err)
		}
	}
	v, ok := latest(h)
	if !ok || v.Epoch != 2 || len(v.Joined) != 2 || v.Joined[0].Proc != 4 || v.Joined[1].Proc != 5 || v.Joined[0].Addr != "mem:4" {
		t.Fatalf("after two joins: %+v (published %v), want epoch 2 listing 4 then 5", v, ok)
	}
	for _, p := range []transport.Proc{0, 2, 5} {
		if _, err := m.Join(p, "mem:0", ""); err == nil {
			t.Errorf("Join of proc %d, which the job has, succeeded", p)
		}
	}
	// The pool is 2, then the joiners in the order they joined; an idle
	// spare lost leaves it.
	h.ReportFailure(ctx, 2, 2)
	h.ReportFailure(ctx, 1, 3)
	if v := m.Current(); !slices.Equal(v.Ranks, []transport.Proc{0, 5}) || len(v.Joined) != 2 {
		t.Fatalf("after losing spare 2 and rank 1: %+v, want joiner 5 in rank 1", v)
	}
}
