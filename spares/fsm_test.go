package spares

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"reflect"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/hashicorp/raft"
)

func logOf(t *testing.T, index uint64, cmd command) *raft.Log {
	t.Helper()
	b, err := encodeCommand(cmd)
	if err != nil {
		t.Fatal(err)
	}
	return &raft.Log{Index: index, Type: raft.LogCommand, Data: b}
}

func TestFSMApplySnapshotRestore(t *testing.T) {
	f := newFSM(mustState(t, 4, 2, 2, false), slog.New(slog.DiscardHandler))
	kicks := 0
	f.onChange = func() { kicks++ }
	if r := f.Apply(&raft.Log{Type: raft.LogNoop}); r != nil {
		t.Fatalf("non-command entry: %v", r)
	}
	if r := f.Apply(&raft.Log{Type: raft.LogCommand, Data: []byte{0xc1}}).(applyResponse); !errors.Is(r.Err, errBadCommand) {
		t.Fatalf("garbage entry: %+v", r)
	}
	r := f.Apply(logOf(t, 3, declareFailed{Proc: 1, Reporter: 0, Epoch: 1})).(applyResponse)
	if r.Err != nil || r.Result.Promoted != 4 {
		t.Fatalf("DeclareFailed: %+v", r)
	}
	if r := f.Apply(logOf(t, 4, declareFailed{Proc: 1, Reporter: 0, Epoch: 1})).(applyResponse); r.Result.Changed || kicks != 1 {
		t.Fatalf("repeat: %+v, %d kicks", r, kicks)
	}

	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	f.Apply(logOf(t, 5, finish{})) // after the snapshot: not in it
	store := raft.NewInmemSnapshotStore()
	sink, err := store.Create(raft.SnapshotVersionMax, 4, 1, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := snap.Persist(sink); err != nil {
		t.Fatal(err)
	}
	snap.Release()
	metas, _ := store.List()
	_, rc, err := store.Open(metas[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	g := newFSM(mustState(t, 4, 2, 2, false), slog.New(slog.DiscardHandler))
	w := g.watch()
	<-w
	if err := g.Restore(rc); err != nil {
		t.Fatal(err)
	}
	got, _ := g.view()
	st, _ := f.view()
	st.Status = statusRunning
	if !reflect.DeepEqual(normState(got), normState(st)) {
		t.Fatalf("restored %s, want %s", summarize(&got), summarize(&st))
	}
	if s := <-w; s.Epoch != 2 {
		t.Fatalf("watcher after restore: epoch %d", s.Epoch)
	}
	if err := g.Restore(io.NopCloser(bytes.NewReader([]byte{0x93, 1, 2}))); !errors.Is(err, errBadSnapshot) {
		t.Fatalf("bad snapshot: %v", err)
	}
}

// Watchers hold the latest state only, and never block Apply.
func TestFSMWatchLatestValue(t *testing.T) {
	f := newFSM(mustState(t, 2, 0, 1, false), slog.New(slog.DiscardHandler))
	w := f.watch()
	for id := uint64(1); id <= 50; id++ { // nobody reads: Apply must not block
		p := uint32(100 + id)
		f.Apply(logOf(t, id, addSpare{Proc: p, Info: infoFor(p, "h1")})) // each one more spare, in the same epoch
	}
	if s := <-w; !slices.Contains(s.Spares, 150) || s.Epoch != 1 {
		t.Fatalf("watcher holds %s, want the latest (spare 150 added, epoch 1)", summarize(&s))
	}
	select {
	case s := <-w:
		t.Fatalf("stale value queued: epoch %d", s.Epoch)
	default:
	}
	f.close()
	if _, ok := <-w; ok {
		t.Fatal("watch channel open after close")
	}
	if _, ok := <-f.watch(); ok {
		t.Fatal("watch after close returned an open channel")
	}
}

// The waits of a Node are driven by FSM changes; tested in a synctest
// bubble with a Node that has no Raft behind it.
func TestNodeWaitsWithFakeTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := &Node{cfg: Config{Proc: 4}, fsm: newFSM(mustState(t, 4, 2, 2, false), slog.New(slog.DiscardHandler)), closeCh: make(chan struct{})}
		ctx := context.Background()
		type out struct {
			rank  int
			epoch uint64
			err   error
		}
		promo := make(chan out, 1)
		epoch := make(chan out, 1)
		go func() { r, st, err := n.waitPromotion(ctx); promo <- out{r, st.Epoch, err} }()
		go func() { st, err := n.waitEpoch(ctx, 3); epoch <- out{-1, st.Epoch, err} }()
		synctest.Wait()
		select {
		case o := <-promo:
			t.Fatalf("WaitPromotion returned before any failure: %+v", o)
		default:
		}
		n.fsm.Apply(logOf(t, 1, declareFailed{Proc: 1, Reporter: noProc, Epoch: 1}))
		synctest.Wait()
		if o := <-promo; o.rank != 1 || o.epoch != 2 || o.err != nil {
			t.Fatalf("WaitPromotion = %+v", o)
		}
		select {
		case o := <-epoch:
			t.Fatalf("WaitEpoch(3) returned at epoch 2: %+v", o)
		default:
		}
		n.fsm.Apply(logOf(t, 2, declareFailed{Proc: 0, Reporter: noProc, Epoch: 2}))
		if o := <-epoch; o.epoch != 3 || o.err != nil {
			t.Fatalf("WaitEpoch = %+v", o)
		}

		// A context that ends gives errTimeout with the context's error, in fake time.
		tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		start := time.Now()
		_, err := n.waitEpoch(tctx, 9)
		if !errors.Is(err, errTimeout) || !errors.Is(err, context.DeadlineExceeded) || time.Since(start) != 10*time.Second {
			t.Fatalf("WaitEpoch past deadline: %v after %v", err, time.Since(start))
		}

		// Exhaustion ends every wait with ErrSparesExhausted.
		go func() { st, err := n.waitEpoch(ctx, 99); epoch <- out{-1, st.Epoch, err} }()
		synctest.Wait()
		n.fsm.Apply(logOf(t, 3, declareFailed{Proc: 2, Reporter: noProc, Epoch: 3}))
		if o := <-epoch; !errors.Is(o.err, ErrSparesExhausted) || o.epoch != 4 {
			t.Fatalf("WaitEpoch on exhaustion = %+v", o)
		}

		// Shutdown (closeCh) ends waits with errClosed.
		go func() {
			st, err := n.awaitState(ctx, func(*state) bool { return false })
			epoch <- out{-1, st.Epoch, err}
		}()
		synctest.Wait()
		close(n.closeCh)
		if o := <-epoch; !errors.Is(o.err, errClosed) {
			t.Fatalf("Await after close = %+v", o)
		}
	})
}
