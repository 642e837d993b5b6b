package pgas

import (
	"context"
	"fmt"
)

// Tree collectives and Bruck's allgather: the algorithms whose messages
// per member stay O(1) or O(log n) at thousands of members (see
// docs/design.md §6).

// treeMin is the smallest group whose barrier and allreduce run as a
// binomial tree, up and down: 2 messages per member and 2 log2 n rounds,
// where dissemination and recursive doubling take log2 n rounds but
// log2 n messages per member. From a few dozen members on, the job's
// total messages (2n instead of n log2 n) is what the time is made of on
// oversubscribed hosts (hundreds of ranks per machine, or a simulation),
// and the extra rounds cost a few hops. The result bits are the same
// either way (see AllreduceBytes).
const treeMin = 64

// Rounds of the tree collectives.
const (
	roundTreeUp   = 1 << 44 // + step: a subtree's contribution to its parent
	roundTreeDown = 1 << 45 // the outcome down the tree
)

// treeUp gathers up a binomial tree over t, rooted at position 0: at
// step m (1, 2, 4, ...) the member at position v with v%2m == m sends buf
// to v-m and leaves; the one at v%2m == 0 receives v+m's and hands it to
// got (nil: the message carries nothing, as for a barrier).
func (c *coll) treeUp(ctx context.Context, t tree, buf []byte, got func([]byte) error) error {
	me := t.me
	for k, m := 0, 1; m < t.n; k, m = k+1, m*2 {
		if me&m != 0 {
			return c.send(ctx, t.at(me-m), roundTreeUp+uint64(k), buf)
		}
		if me+m < t.n {
			d, err := c.recv(ctx, t.at(me+m), roundTreeUp+uint64(k))
			if err != nil {
				return err
			}
			if got != nil {
				if err := got(d); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// bruck is the allgather of small blocks (Bruck's algorithm): ⌈log2 n⌉
// rounds of one message each, so the rounds and the messages per member
// grow as log n, where a ring takes n-1. In round k each member sends the
// blocks it has gathered so far (those of the next 2^k members, at most
// n-2^k of them) to the member 2^k below it, and receives as many from
// the member 2^k above. out holds this member's block at its own place on
// entry, every block on return; b is the block size.
func (c *coll) bruck(ctx context.Context, out []byte, b int) error {
	n, me := len(c.ranks), c.me
	// tmp holds the blocks of members me, me+1, ... (mod n), in order.
	tmp := make([]byte, n*b)
	copy(tmp, out[me*b:(me+1)*b])
	for k, d := 0, 1; d < n; k, d = k+1, d*2 {
		cnt := min(d, n-d)
		if err := c.send(ctx, (me-d+n)%n, uint64(k), tmp[:cnt*b]); err != nil {
			return err
		}
		msg, err := c.recv(ctx, (me+d)%n, uint64(k))
		if err != nil {
			return err
		}
		if len(msg) != cnt*b {
			return fmt.Errorf("pgas: allgather: %d bytes from a peer in round %d, want %d: every member must pass the same size: %w", len(msg), k, cnt*b, ErrInvalid)
		}
		copy(tmp[d*b:], msg)
	}
	for j := range n {
		src := (me + j) % n
		copy(out[src*b:(src+1)*b], tmp[j*b:(j+1)*b])
	}
	return nil
}

// treeGather is the allgather of small blocks among treeMin members and
// more: the blocks go up the binomial tree of Barrier and AllreduceBytes
// (each member forwards the contiguous range of its subtree's blocks to
// its parent), and the whole of out comes down it. 2 messages per member
// and 2 log2 n rounds, over the same pairs of processes as the other tree
// collectives: a program that set up its collectives (or a restore that
// re-creates segments) opens no new connection for it, where Bruck's
// partners at distances 1, 2, 4, ... would be log2 n new ones per member
// (on an oversubscribed host each costs a handshake under starvation).
func (c *coll) treeGather(ctx context.Context, out []byte, b int) error {
	n, me := len(c.ranks), c.me
	have := 1 // this member holds the blocks of positions me .. me+have-1
	for k, m := 0, 1; m < n; k, m = k+1, m*2 {
		if me&m != 0 {
			if err := c.send(ctx, me-m, roundTreeUp+uint64(k), out[me*b:(me+have)*b]); err != nil {
				return err
			}
			break
		}
		if me+m < n {
			want := min(m, n-(me+m))
			d, err := c.recv(ctx, me+m, roundTreeUp+uint64(k))
			if err != nil {
				return err
			}
			if len(d) != want*b {
				return fmt.Errorf("pgas: allgather: %d bytes from a peer in round %d, want %d: every member must pass the same size: %w", len(d), k, want*b, ErrInvalid)
			}
			copy(out[(me+m)*b:], d)
			have += want
		}
	}
	return c.binomial(ctx, c.groupTree(), 0, out, roundTreeDown)
}
