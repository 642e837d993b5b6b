package pgas_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gaspigo/gaspigo/pgas"
)

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Watch closes at a lost connection to a watched rank's process and at
// the new view that replaces it (here the detector confirms the loss at
// once, so the view may come first); a watch whose context ended stays
// open and its goroutine ends.
func TestWatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rts, promoted, nw, _, _ := newFTJob(t, 3, 1)
		ctx := context.Background()
		pgas.Each(t, rts, func(rt *pgas.Runtime) error { return rt.Barrier(ctx, nil) })
		both := rts[0].Watch(ctx, []int{1, 2})
		one := rts[0].Watch(ctx, []int{1})
		wctx, cancel := context.WithCancel(ctx)
		ended := rts[0].Watch(wctx, []int{2})
		cancel()
		synctest.Wait()
		if isClosed(both) || isClosed(one) || isClosed(ended) {
			t.Fatal("a watch closed with nothing changed")
		}

		nw.Kill(2)
		// A send to the dead process fails and raises PeerDown.
		rts[0].Write(ctx, 0, 2, pgas.Loc{}, pgas.Loc{}, 0)
		rts[0].Wait(ctx, 0)
		synctest.Wait()
		if !isClosed(both) {
			t.Fatal("the watch of ranks 1 and 2 is open after rank 2's process was lost")
		}
		if isClosed(ended) {
			t.Fatal("a watch whose context ended closed")
		}
		// The detector confirms, the membership promotes the spare: a new
		// view, which closes every watch.
		time.Sleep(5 * time.Second)
		synctest.Wait()
		if !isClosed(one) {
			t.Fatal("the watch of rank 1 is open after a new view")
		}
		(<-promoted).Close()
	})
}
