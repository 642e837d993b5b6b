package proctest

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

func TestCond(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var c cond
		n := 0
		woke := make(chan bool)
		go func() {
			woke <- c.WaitFor(time.Minute, func() bool { return n >= 3 })
		}()
		for i := 0; i < 3; i++ {
			synctest.Wait()
			select {
			case <-woke:
				t.Fatalf("Wait returned with n=%d", i)
			default:
			}
			c.Lock()
			n++
			c.ChangedLocked()
			c.Unlock()
		}
		if !<-woke {
			t.Fatalf("Wait = false once the condition held")
		}

		// A bound passes: false, after exactly that long.
		start := time.Now()
		if c.WaitFor(time.Second, func() bool { return false }) {
			t.Fatalf("WaitFor = true for a false condition")
		}
		if d := time.Since(start); d != time.Second {
			t.Fatalf("WaitFor returned after %v, want 1s", d)
		}

		// The end wakes waiters; a condition true at the end still counts.
		go func() { woke <- c.WaitFor(time.Hour, func() bool { return n == 4 }) }()
		synctest.Wait()
		c.Lock()
		n = 4
		c.EndLocked()
		c.Unlock()
		if !<-woke {
			t.Fatalf("Wait = false for a condition true at the end")
		}
		start = time.Now()
		if c.WaitFor(time.Hour, func() bool { return false }) || !c.WaitEnd(time.Hour) || !c.Ended() {
			t.Fatalf("after the end: Wait true or WaitEnd false")
		}
		if time.Since(start) != 0 {
			t.Fatalf("waits after the end took %v", time.Since(start))
		}
	})
}

func TestWaitFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var c cond
		var lines []string
		add := func(l string, end bool) {
			c.Lock()
			lines = append(lines, l)
			if end {
				c.EndLocked()
			} else {
				c.ChangedLocked()
			}
			c.Unlock()
		}
		list := func() []string { return lines }
		calls := 0
		match := func(l string) bool { calls++; return l == "b" }
		type res struct {
			l  string
			ok bool
		}
		got := make(chan res)
		go func() {
			l, ok := waitFirst(context.Background(), &c, list, match)
			got <- res{l, ok}
		}()
		add("a", false)
		synctest.Wait()
		add("x", false)
		synctest.Wait()
		add("b", false)
		if r := <-got; !r.ok || r.l != "b" || calls != 3 {
			t.Fatalf("waitFirst = %q %v after %d calls of match, want b true after 3", r.l, r.ok, calls)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if _, ok := waitFirst(ctx, &c, list, func(l string) bool { return l == "z" }); ok || ctx.Err() == nil {
			t.Fatalf("waitFirst for a missing line returned before ctx ended")
		}
		go func() {
			l, ok := waitFirst(context.Background(), &c, list, func(l string) bool { return l == "z" })
			got <- res{l, ok}
		}()
		synctest.Wait()
		add("y", true)
		if r := <-got; r.ok {
			t.Fatalf("waitFirst found %q for a line never written", r.l)
		}
	})
}
