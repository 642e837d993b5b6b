package proctest

import (
	"context"
	"sync"
	"time"
)

// cond guards a Job's state (its output lines, its exits, and what the
// harness builds from them) and lets goroutines wait, with a bound, for a
// condition over it: the Job calls ChangedLocked after each line and exit
// and EndLocked when the job is over, under the lock, and waiters wake at
// each change instead of polling. The zero value is ready.
type cond struct {
	mu      sync.Mutex
	changed chan struct{} // closed and replaced at each change
	ended   bool
}

// Lock locks the state.
func (c *cond) Lock() { c.mu.Lock() }

// Unlock unlocks the state.
func (c *cond) Unlock() { c.mu.Unlock() }

// chLocked returns the channel the next change closes.
func (c *cond) chLocked() chan struct{} {
	if c.changed == nil {
		c.changed = make(chan struct{})
	}
	return c.changed
}

// ChangedLocked wakes every waiter. Call it with the lock held.
func (c *cond) ChangedLocked() {
	close(c.chLocked())
	c.changed = make(chan struct{})
}

// EndLocked records that the job is over (nothing will change any more)
// and wakes every waiter. Call it with the lock held.
func (c *cond) EndLocked() {
	c.ended = true
	c.ChangedLocked()
}

// EndedLocked reports whether EndLocked was called. Call it with the lock
// held.
func (c *cond) EndedLocked() bool { return c.ended }

// Ended reports whether EndLocked was called.
func (c *cond) Ended() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ended
}

// Changed returns a channel closed at the next change.
func (c *cond) Changed() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.chLocked()
}

// Wait blocks until holds, called with the lock held after each change,
// returns true (true), or the job ends without it (false: holds is
// called once more after the end), or ctx ends (false).
func (c *cond) Wait(ctx context.Context, holds func() bool) bool {
	for {
		c.mu.Lock()
		ok, ended, ch := holds(), c.ended, c.chLocked()
		c.mu.Unlock()
		if ok {
			return true
		}
		if ended {
			return false
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return false
		}
	}
}

// WaitFor is Wait bounded by d.
func (c *cond) WaitFor(d time.Duration, holds func() bool) bool {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return c.Wait(ctx, holds)
}

// WaitEnd waits at most d for the job's end and reports whether it came.
func (c *cond) WaitEnd(d time.Duration) bool {
	c.WaitFor(d, func() bool { return false })
	return c.Ended()
}

// waitFirst waits on c for the first element of list (called with c's
// lock held; it only grows) that match accepts, looking at each element
// once. It returns false when the job ends without one or ctx ends.
func waitFirst[T any](ctx context.Context, c *cond, list func() []T, match func(T) bool) (T, bool) {
	var found T
	next := 0
	ok := c.Wait(ctx, func() bool {
		l := list()
		for ; next < len(l); next++ {
			if match(l[next]) {
				found = l[next]
				return true
			}
		}
		return false
	})
	return found, ok
}
