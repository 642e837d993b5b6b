package mem

import (
	"fmt"
	"maps"
	"time"

	"github.com/gaspigo/gaspigo/transport"
)

// faultState is an immutable snapshot of the fault hub's configuration.
// Delivery goroutines load it without locking; every change replaces it
// (under Network.mu) and closes the old one's changed channel, which wakes
// the frames held by a partition or a Hold.
type faultState struct {
	group   []int32 // partition group per proc; nil when none
	drops   map[pair]float64
	delays  map[pair]delayRule
	before  BeforeFunc
	after   AfterFunc
	changed chan struct{}
}

type pair struct{ from, to transport.Proc }

type delayRule struct{ d, jitter time.Duration }

func (fs *faultState) partitioned(from, to transport.Proc) bool {
	return fs.group != nil && fs.groupOf(from) != fs.groupOf(to)
}

// groupOf is p's partition group; 0 (named in no group) for an endpoint
// added after the partition.
func (fs *faultState) groupOf(p transport.Proc) int32 {
	if int64(p) < int64(len(fs.group)) {
		return fs.group[p]
	}
	return 0
}

// lookup finds the most specific rule for from->to: exact, then (from, Any),
// then (Any, to), then (Any, Any).
func lookup[V any](m map[pair]V, from, to transport.Proc) (V, bool) {
	var zero V
	if len(m) == 0 {
		return zero, false
	}
	for _, k := range [...]pair{{from, to}, {from, Any}, {Any, to}, {Any, Any}} {
		if v, ok := m[k]; ok {
			return v, true
		}
	}
	return zero, false
}

func (fs *faultState) dropFor(from, to transport.Proc) float64 {
	p, _ := lookup(fs.drops, from, to)
	return p
}

func (fs *faultState) delayFor(from, to transport.Proc) (delayRule, bool) {
	return lookup(fs.delays, from, to)
}

// update applies fn to a copy of the fault state and publishes it.
func (n *Network) update(fn func(fs *faultState)) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return ErrNetworkClosed
	}
	old := n.faults.Load()
	fs := &faultState{
		group:   old.group,
		drops:   maps.Clone(old.drops),
		delays:  maps.Clone(old.delays),
		before:  old.before,
		after:   old.after,
		changed: make(chan struct{}),
	}
	fn(fs)
	n.faults.Store(fs)
	close(old.changed)
	return nil
}

func (n *Network) checkProc(what string, p transport.Proc, wildcard bool) error {
	if wildcard && p == Any {
		return nil
	}
	if size := n.Size(); int64(p) >= int64(size) {
		return fmt.Errorf("%w: %s names proc %d on a network of %d procs", ErrBadProc, what, p, size)
	}
	return nil
}

// Partition splits the network: frames between procs of different groups
// are held, not delivered, until Heal (or a new Partition that joins them).
// Procs named in no group form one more group together (so do endpoints
// added after it, AddEndpoint). Nobody gets
// PeerDown: a partition is silent, as on a real network; Sends across it
// succeed until the link's queue is full, then block until ctx ends. A new
// Partition replaces the previous one.
func (n *Network) Partition(groups ...[]transport.Proc) error {
	size := n.Size()
	group := make([]int32, size)
	seen := make(map[transport.Proc]int, size)
	for gi, g := range groups {
		for _, p := range g {
			if int64(p) >= int64(size) {
				return fmt.Errorf("%w: Partition names proc %d on a network of %d procs", ErrBadProc, p, size)
			}
			if prev, ok := seen[p]; ok && prev != gi {
				return fmt.Errorf("%w: Partition names proc %d in groups %d and %d; a proc belongs to one group",
					ErrBadProc, p, prev, gi)
			}
			seen[p] = gi
			group[p] = int32(gi + 1)
		}
	}
	if err := n.update(func(fs *faultState) { fs.group = group }); err != nil {
		return err
	}
	n.log.Info("partition", "groups", len(groups), "seed", n.seed)
	return nil
}

// Heal removes the partition, and releases held frames, which are then
// delivered in their links' order. Drop and Delay rules stay.
func (n *Network) Heal() {
	if n.update(func(fs *faultState) { fs.group = nil }) == nil {
		n.log.Info("heal")
	}
}

// Drop makes the fault hub lose each frame on the link from->to with
// probability p, decided by the link's seeded stream. Because loss is never
// silent, a dropped frame breaks the connection between the two procs: both
// get PeerDown for each other, frames queued either way are lost, and later
// Sends between them fail with ErrPeerDown. from or to may be Any; the most
// specific rule wins. p = 0 removes the rule.
func (n *Network) Drop(from, to transport.Proc, p float64) error {
	if err := n.checkProc("Drop", from, true); err != nil {
		return err
	}
	if err := n.checkProc("Drop", to, true); err != nil {
		return err
	}
	if !(p >= 0 && p <= 1) {
		return fmt.Errorf("%w: Drop probability %v is not in [0, 1]", ErrBadFault, p)
	}
	return n.update(func(fs *faultState) {
		if fs.drops == nil {
			fs.drops = make(map[pair]float64)
		}
		if p == 0 {
			delete(fs.drops, pair{from, to})
		} else {
			fs.drops[pair{from, to}] = p
		}
	})
}

// Delay holds each frame on the link from->to until d plus a jitter drawn
// uniformly from [0, jitter) by the link's seeded stream has passed since
// its Send. Frames on one link keep their order (a frame waits for the one
// before it); frames on different links overtake each other, which is how
// tests randomize arrival order across senders. from or to may be Any; the
// most specific rule wins. d = jitter = 0 removes the rule.
func (n *Network) Delay(from, to transport.Proc, d, jitter time.Duration) error {
	if err := n.checkProc("Delay", from, true); err != nil {
		return err
	}
	if err := n.checkProc("Delay", to, true); err != nil {
		return err
	}
	if d < 0 || jitter < 0 {
		return fmt.Errorf("%w: Delay(%v, jitter %v): durations must not be negative", ErrBadFault, d, jitter)
	}
	return n.update(func(fs *faultState) {
		if fs.delays == nil {
			fs.delays = make(map[pair]delayRule)
		}
		if d == 0 && jitter == 0 {
			delete(fs.delays, pair{from, to})
		} else {
			fs.delays[pair{from, to}] = delayRule{d, jitter}
		}
	})
}

// BeforeFrame installs a hook asked about every frame just before delivery,
// after delays, partitions and Drop rules; nil removes it. See Action.
func (n *Network) BeforeFrame(fn BeforeFunc) {
	_ = n.update(func(fs *faultState) { fs.before = fn })
}

// AfterFrame installs a hook called after every delivered frame; nil
// removes it.
func (n *Network) AfterFrame(fn AfterFunc) {
	_ = n.update(func(fs *faultState) { fs.after = fn })
}
