package spares

import (
	"context"
	"errors"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/hashicorp/raft"
)

// Waiting for a joiner (Config.RefillWait).
//
// A rank lost with an empty pool awaits a joiner (state.Awaiting) instead
// of becoming vacant or failing the job. Only the leader keeps time: it
// notes when it first saw each wait and, RefillWait later, commits
// endWait for it. The clock is this leader's own, so nothing about it is
// replicated: a new leader (or one that lost the leadership and won it
// back) starts every wait it finds afresh. That only ever makes a wait
// longer, never shorter, and endWait names the wait (rank and starting
// epoch), so a late or repeated one cannot end a later wait or take a
// rank a joiner already holds.

// refillClock is the leader's clock of the waits: a pure state machine
// (states and times in, due endWait commands out), driven by the leader
// loop, which owns the real clock.
type refillClock struct {
	seen map[awaiting]time.Time // when this leader first saw each wait
}

// observe notes the waits of st first seen at now, forgets those that
// ended, and returns the endWait commands due at now (in rank order) and
// when the next wait falls due (zero: none left).
func (c *refillClock) observe(st *state, now time.Time) (due []endWait, next time.Time) {
	if st.Status != statusRunning || len(st.Awaiting) == 0 || st.RefillWait <= 0 {
		c.reset()
		return nil, time.Time{}
	}
	if c.seen == nil {
		c.seen = make(map[awaiting]time.Time, len(st.Awaiting))
	}
	for a := range c.seen {
		if since, ok := st.AwaitingSince(a.Rank); !ok || since != a.Since {
			delete(c.seen, a)
		}
	}
	for _, a := range st.Awaiting {
		at, ok := c.seen[a]
		if !ok {
			at = now
			c.seen[a] = at
		}
		switch end := at.Add(st.RefillWait); {
		case !end.After(now):
			due = append(due, endWait(a))
		case next.IsZero() || end.Before(next):
			next = end
		}
	}
	return due, next
}

// reset forgets every wait: this node no longer leads (or leads anew).
func (c *refillClock) reset() { clear(c.seen) }

// refillDriver runs the leader's refill clock inside the leader loop:
// after every round it commits the endWait commands that fell due and
// arms its timer for the next one, or for a retry after a failed commit
// (exponential backoff between ProposeRetryMin and ProposeRetryMax, as
// for proposals).
type refillDriver struct {
	clock   refillClock
	timer   *time.Timer
	retry   *backoff.ExponentialBackOff
	retryAt time.Time // after a failed commit: no new attempt before
}

func newRefillDriver(cfg *Config) *refillDriver {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &refillDriver{
		timer: t,
		retry: backoff.NewExponentialBackOff(
			backoff.WithInitialInterval(cfg.ProposeRetryMin),
			backoff.WithMaxInterval(cfg.ProposeRetryMax),
			backoff.WithMaxElapsedTime(0),
		),
	}
}

// C fires when a wait falls due or a failed endWait is to be retried.
func (d *refillDriver) C() <-chan time.Time { return d.timer.C }

// stop forgets every wait and disarms the timer: this node does not lead.
func (d *refillDriver) stop() {
	d.clock.reset()
	d.timer.Stop()
	d.retry.Reset()
	d.retryAt = time.Time{}
}

// runRefill commits on the leader r the endWait commands that are due
// and arms the driver's timer for the next wait, or for a retry. The loop
// ends: a committed endWait takes its wait out of the state (or found it
// gone already), so the next look no longer finds it due.
func (n *Node) runRefill(d *refillDriver, r *raft.Raft) {
	d.timer.Stop()
	for {
		var due []endWait
		var next time.Time
		now := time.Now()
		// Under the state's lock, without a copy: the state is O(N), the
		// look at it O(ranks awaiting).
		n.fsm.read(func(st *state, _ uint64) { due, next = d.clock.observe(st, now) })
		if len(due) == 0 {
			if !next.IsZero() {
				d.timer.Reset(time.Until(next))
			}
			return
		}
		if now.Before(d.retryAt) {
			// A round between retries (a change, a reconcile tick).
			d.timer.Reset(d.retryAt.Sub(now))
			return
		}
		for _, cmd := range due {
			if r.State() != raft.Leader {
				d.stop()
				return
			}
			if err := n.commitEndWait(cmd); err != nil {
				if errors.Is(err, errClosed) {
					return
				}
				n.log.Warn("spares: ending a rank's wait for a joiner; retrying", "rank", cmd.Rank, "since", cmd.Since, "err", err)
				wait := d.retry.NextBackOff()
				d.retryAt = time.Now().Add(wait)
				d.timer.Reset(wait)
				return
			}
		}
		d.retry.Reset()
		d.retryAt = time.Time{}
	}
}

// commitEndWait commits one endWait through this leader's Raft.
func (n *Node) commitEndWait(cmd endWait) error {
	data, err := encodeCommand(cmd)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.RPCTimeout)
	defer cancel()
	res, err := n.applyLocal(ctx, data)
	if err != nil {
		return err
	}
	if res.Changed {
		n.log.Info("spares: a rank waited in vain for a joiner", "rank", cmd.Rank, "since", cmd.Since, "note", res.Note)
	}
	return nil
}
