package health

import (
	"fmt"
	"slices"

	"github.com/gaspigo/gaspigo/transport"
)

// peer is the Core's state for one other member, kept only while there is
// any: a member this process monitors, watches, suspects, has confirmed
// or has seen go down. The others cost nothing (see Core).
type peer struct {
	proc      transport.Proc
	status    Status
	monitored bool   // a ring successor of this process
	watch     bool   // watched after a Hint until a fresh Ack
	watchSeq  uint64 // an Ack at or above this ends the watch
	lastHeard uint64 // tick of the last Ack, or of the start of monitoring
	nextPing  uint64 // tick of the next heartbeat ping
	down      bool   // PeerDown seen and no fresh Ack since
	downAt    uint64 // tick down became true
	downSeq   uint64 // an Ack at or above this clears down (older ones were in flight)
	waitSeq   uint64 // the oldest heartbeat ping not answered yet, 0 if none
	waitSince uint64 // tick waitSeq was sent
	fastest   uint64 // 1 + the quickest round trip of a heartbeat ping so far, 0 if none yet
	susp      *suspicion
}

// probe is an indirect probe this process runs as a helper.
type probe struct {
	observer transport.Proc
	target   transport.Proc
	obsSeq   uint64 // the observer's suspicion ID
	probeSeq uint64 // the Seq of our first Ping to target; later ones are higher
	nextPing uint64 // the probe pings again every interval, in case one is lost
	deadline uint64
}

// Core is the failure detector as a pure state machine: no goroutines, no
// clocks, no I/O. Time is the number of Tick calls. Inputs are Tick,
// Receive, PeerDown, Hint and SetMembers; outputs (messages to send and
// events) accumulate until Ready drains them. A Core is not safe for
// concurrent use; its owner (the Detector, or a test) serialises calls.
type Core struct {
	cfg  CoreConfig
	self transport.Proc
	now  uint64
	seq  uint64 // last sequence number used
	// members is the view, in ring order, as SetMembers was given it (not
	// copied: the caller must not change it). Positions come from a
	// binary search when it is in ascending order (the runtime's views
	// are), else from index.
	members []transport.Proc
	sorted  bool
	index   map[transport.Proc]int // positions, when members is not ascending
	selfIn  bool                   // self is a member
	// peers holds the members with state (see peer), so a process of a
	// job of N keeps O(R + suspects) of them, not N.
	peers  map[transport.Proc]*peer
	active []*peer // monitored, watched or suspected peers, in ring order
	dirty  bool    // active must be rebuilt
	gone   int     // confirmed members
	local  localHealth
	probes []probe
	out    []Outgoing
	events []Event
	stats  CoreStats
}

// NewCore returns a Core for process self in a job whose committed view is
// members, in ring order (every process must pass the same order, usually
// rank order with spares after the ranks). self need not be a member: a
// process outside the view monitors nobody but still answers pings and
// probes.
func NewCore(cfg CoreConfig, self transport.Proc, members []transport.Proc) (*Core, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if self == transport.NoProc {
		return nil, fmt.Errorf("%w: self is NoProc", ErrBadMembers)
	}
	c := &Core{cfg: cfg, self: self, peers: map[transport.Proc]*peer{}}
	if err := c.SetMembers(members); err != nil {
		return nil, err
	}
	return c, nil
}

// SetMembers installs a new committed view. Processes that left the view
// are forgotten (their suspicions, probes and evidence are dropped); new
// ones are monitored when they are ring successors. A process confirmed
// earlier that is still in the view stays confirmed. The Core keeps
// members as given (the caller must not change it afterwards). Its work
// is O(N) to check the list and O(R + peers with state) besides; when
// members is in ascending order no table of N entries is built.
func (c *Core) SetMembers(members []transport.Proc) error {
	sorted := true
	for i, p := range members {
		if p == transport.NoProc {
			return fmt.Errorf("%w: member %d is NoProc", ErrBadMembers, i)
		}
		if i > 0 && members[i-1] >= p {
			sorted = false
		}
	}
	var index map[transport.Proc]int
	if !sorted {
		index = make(map[transport.Proc]int, len(members))
		for i, p := range members {
			if j, dup := index[p]; dup {
				return fmt.Errorf("%w: process %d is listed twice (positions %d and %d)", ErrBadMembers, p, j, i)
			}
			index[p] = i
		}
	}
	wasMember := make(map[transport.Proc]bool, 2*len(c.probes))
	for _, pr := range c.probes {
		_, wasMember[pr.target] = c.pos(pr.target)
		_, wasMember[pr.observer] = c.pos(pr.observer)
	}
	c.members, c.sorted, c.index = members, sorted, index
	_, c.selfIn = c.pos(c.self)
	c.gone = 0
	for p, pe := range c.peers {
		if _, ok := c.pos(p); !ok || p == c.self {
			delete(c.peers, p)
			continue
		}
		if pe.status == StatusConfirmed {
			c.gone++
		}
	}
	kept := c.probes[:0]
	for _, pr := range c.probes {
		_, isT := c.pos(pr.target)
		_, isO := c.pos(pr.observer)
		if (wasMember[pr.target] && !isT) || (wasMember[pr.observer] && !isO) {
			continue
		}
		kept = append(kept, pr)
	}
	c.probes = kept
	c.updateMonitors()
	return nil
}

// pos returns p's position in the view.
func (c *Core) pos(p transport.Proc) (int, bool) {
	if c.sorted {
		return slices.BinarySearch(c.members, p)
	}
	i, ok := c.index[p]
	return i, ok
}

// IsMember reports whether p is in the view.
func (c *Core) IsMember(p transport.Proc) bool {
	_, ok := c.pos(p)
	return ok
}

// peerFor returns member p's state, creating it; nil when p is not
// another member.
func (c *Core) peerFor(p transport.Proc) *peer {
	if pe := c.peers[p]; pe != nil {
		return pe
	}
	if _, ok := c.pos(p); !ok || p == c.self {
		return nil
	}
	pe := &peer{proc: p, lastHeard: c.now}
	c.peers[p] = pe
	return pe
}

// byRing lists the peers for which keep is true, in ring order.
func (c *Core) byRing(keep func(*peer) bool) []*peer {
	var out []*peer
	for _, pe := range c.peers {
		if keep(pe) {
			out = append(out, pe)
		}
	}
	slices.SortFunc(out, func(a, b *peer) int {
		i, _ := c.pos(a.proc)
		j, _ := c.pos(b.proc)
		return i - j
	})
	return out
}

// Tick advances time by one tick: it sends the heartbeats that are due,
// raises suspicions whose timeout passed, starts new probe rounds, answers
// helper probes that timed out, and confirms through the fallback.
func (c *Core) Tick() {
	c.now++
	c.tickLocalHealth()
	kept := c.probes[:0]
	for _, pr := range c.probes {
		if c.now >= pr.deadline && !c.local.catchingUp {
			c.send(pr.observer, Message{Kind: KindIndirectNack, Seq: pr.obsSeq, Target: pr.target})
			continue
		}
		if c.now >= pr.nextPing {
			c.seq++
			c.send(pr.target, Message{Kind: KindPing, Seq: c.seq, Target: pr.target})
			pr.nextPing = c.now + uint64(c.cfg.IntervalTicks)
		}
		kept = append(kept, pr)
	}
	c.probes = kept
	c.rebuildActive()
	for _, pe := range c.active {
		switch pe.status {
		case StatusAlive:
			if wait := c.scaled(c.cfg.SuspectTicks); c.now-pe.lastHeard >= wait && !c.local.catchingUp {
				why := "no ack"
				if !pe.monitored {
					why = "hinted and no ack"
				}
				c.suspect(pe, fmt.Sprintf("%s for %d ticks", why, c.now-pe.lastHeard), false)
			}
		case StatusSuspected:
			c.advance(pe)
		}
		if pe.status != StatusConfirmed && c.now >= pe.nextPing {
			c.ping(pe)
		}
	}
}

// Receive handles one message from another process.
func (c *Core) Receive(from transport.Proc, m Message) {
	c.stats.Received++
	if from == c.self || from == transport.NoProc || m.Validate() != nil {
		c.stats.Ignored++
		return
	}
	if c.local.catchingUp {
		c.caughtUp() // input flows again: what comes now is fresh evidence
	}
	switch m.Kind {
	case KindPing:
		if m.Target != c.self {
			c.stats.Ignored++
			return
		}
		c.send(from, Message{Kind: KindAck, Seq: m.Seq, Target: c.self})
	case KindAck:
		if m.Target != from {
			c.stats.Ignored++
			return
		}
		c.onAck(from, m.Seq)
	case KindPingReq:
		c.onPingReq(from, m)
	case KindIndirectAck, KindIndirectNack:
		c.onIndirect(from, m)
	}
}

// PeerDown reports strong evidence that p is gone: its connection closed or
// a dial was refused. A monitored or watched p is suspected at once; any
// probe this process runs on p for others is answered with a Nack at once.
// PeerDown alone never confirms while helpers are available.
func (c *Core) PeerDown(p transport.Proc) {
	if p == c.self {
		return
	}
	c.stats.PeerDowns++
	kept := c.probes[:0]
	for _, pr := range c.probes {
		if pr.target == p {
			c.send(pr.observer, Message{Kind: KindIndirectNack, Seq: pr.obsSeq, Target: p})
			continue
		}
		kept = append(kept, pr)
	}
	c.probes = kept
	pe := c.peerFor(p) // a member's going down is worth keeping (onPingReq)
	if pe == nil || pe.status == StatusConfirmed {
		return
	}
	if !pe.down {
		pe.down, pe.downAt, pe.downSeq = true, c.now, c.seq+1
	}
	switch {
	case pe.status == StatusSuspected:
		pe.susp.strong = true
	case pe.monitored || pe.watch:
		c.suspect(pe, "connection down", true)
	}
}

// Hint reports weak evidence against p, such as a collective that timed
// out waiting for it. It never suspects or confirms by itself: a p that is
// not already monitored is watched (pinged every interval) until it
// answers; only if it stays silent for the suspicion timeout is it
// suspected, and only helpers can then confirm it.
func (c *Core) Hint(p transport.Proc) {
	c.stats.Hints++
	pe := c.peerFor(p)
	if pe == nil || pe.status != StatusAlive || pe.monitored || pe.watch {
		return
	}
	pe.watch, pe.watchSeq, pe.lastHeard = true, c.seq+1, c.now
	c.dirty = true
	c.ping(pe)
}

// Ready returns the messages to send and the events that happened since
// the last call, and clears them. The caller owns the returned slices.
func (c *Core) Ready() (out []Outgoing, events []Event) {
	out, events = c.out, c.events
	c.out, c.events = nil, nil
	return out, events
}

// Now returns the number of ticks so far.
func (c *Core) Now() uint64 { return c.now }

// Self returns this process's ID.
func (c *Core) Self() transport.Proc { return c.self }

// Members returns the current view, in ring order.
func (c *Core) Members() []transport.Proc { return append([]transport.Proc(nil), c.members...) }

// Status returns this process's view of p; ok is false when p is not
// another member.
func (c *Core) Status(p transport.Proc) (s Status, ok bool) {
	if pe := c.peers[p]; pe != nil {
		return pe.status, true
	}
	if _, member := c.pos(p); !member || p == c.self {
		return 0, false
	}
	return StatusAlive, true
}

// Suspects returns the members this process suspects or has confirmed, in
// ring order.
func (c *Core) Suspects() []transport.Proc {
	var out []transport.Proc
	for _, pe := range c.byRing(func(pe *peer) bool { return pe.status != StatusAlive }) {
		out = append(out, pe.proc)
	}
	return out
}

// Monitored returns the ring successors this process heartbeats, in ring
// order.
func (c *Core) Monitored() []transport.Proc {
	var out []transport.Proc
	for _, pe := range c.byRing(func(pe *peer) bool { return pe.monitored }) {
		out = append(out, pe.proc)
	}
	return out
}

// Stats returns the counters.
func (c *Core) Stats() CoreStats { return c.stats }

// Required returns how many distinct helper Nacks confirm a suspicion of
// target now: Confirmations, capped at the number of live members other
// than this process and target. Zero means nobody can be asked; then only
// the fallback (PeerDown plus the suspicion timeout) confirms.
func (c *Core) Required(target transport.Proc) int {
	others := len(c.members) - c.gone
	if c.selfIn {
		others--
	}
	if _, member := c.pos(target); member && target != c.self && !c.isGone(target) {
		others--
	}
	return max(0, min(c.cfg.Confirmations, others))
}

func (c *Core) send(to transport.Proc, m Message) {
	c.stats.Sent++
	c.out = append(c.out, Outgoing{To: to, Msg: m})
}

func (c *Core) emit(kind EventKind, p transport.Proc, reason string) {
	c.events = append(c.events, Event{Kind: kind, Proc: p, Tick: c.now, Reason: reason})
}

func (c *Core) ping(pe *peer) {
	c.seq++
	c.send(pe.proc, Message{Kind: KindPing, Seq: c.seq, Target: pe.proc})
	if pe.waitSeq == 0 {
		pe.waitSeq, pe.waitSince = c.seq, c.now
	}
	pe.nextPing = c.now + uint64(c.cfg.IntervalTicks)
}

func (c *Core) isGone(p transport.Proc) bool {
	pe := c.peers[p]
	return pe != nil && pe.status == StatusConfirmed
}

// updateMonitors recomputes which peers are ring successors, and drops
// the state of peers that no longer need any.
func (c *Core) updateMonitors() {
	c.dirty = true
	var succ []transport.Proc
	if i, ok := c.pos(c.self); ok {
		succ = ringSuccessors(c.members, i, c.cfg.Successors, c.isGone)
	}
	for p, pe := range c.peers {
		if pe.monitored && !slices.Contains(succ, p) {
			pe.monitored = false
		}
		if !pe.monitored && !pe.watch && !pe.down && pe.status == StatusAlive && pe.susp == nil {
			delete(c.peers, p)
		}
	}
	for _, p := range succ {
		pe := c.peerFor(p)
		if pe == nil || pe.monitored {
			continue
		}
		pe.monitored = true
		if pe.status == StatusAlive && !pe.watch {
			pe.lastHeard = c.now
			pe.nextPing = c.now
		}
	}
}

func (c *Core) rebuildActive() {
	if !c.dirty {
		return
	}
	c.active = c.byRing(func(pe *peer) bool {
		return pe.status != StatusConfirmed && (pe.monitored || pe.watch || pe.status == StatusSuspected)
	})
	c.dirty = false
}

func (c *Core) onAck(from transport.Proc, seq uint64) {
	c.local.acked = true
	kept := c.probes[:0]
	for _, pr := range c.probes {
		if pr.target == from && seq >= pr.probeSeq {
			c.send(pr.observer, Message{Kind: KindIndirectAck, Seq: pr.obsSeq, Target: from})
			continue
		}
		kept = append(kept, pr)
	}
	c.probes = kept
	pe := c.peers[from]
	if pe == nil || pe.status == StatusConfirmed {
		return
	}
	if seq >= pe.downSeq {
		pe.down = false
	}
	c.checkLateAck(pe, seq)
	pe.lastHeard = c.now
	if pe.watch && seq >= pe.watchSeq {
		pe.watch = false
		c.dirty = true
	}
	if pe.status == StatusSuspected && seq >= pe.susp.minSeq {
		c.refute(pe, fmt.Sprintf("answered ping %d directly", seq))
	}
}

func (c *Core) onPingReq(observer transport.Proc, m Message) {
	t := m.Target
	if t == c.self {
		c.send(observer, Message{Kind: KindIndirectAck, Seq: m.Seq, Target: c.self})
		return
	}
	for _, pr := range c.probes {
		if pr.observer == observer && pr.target == t && pr.obsSeq == m.Seq {
			return // a duplicate of a probe already running
		}
	}
	if pe := c.peers[t]; pe != nil {
		recentDown := pe.down && c.now-pe.downAt <= c.scaled(c.cfg.SuspectTicks)
		if pe.status == StatusConfirmed || recentDown {
			c.send(observer, Message{Kind: KindIndirectNack, Seq: m.Seq, Target: t})
			return
		}
	}
	if len(c.probes) >= c.cfg.MaxPendingProbes {
		c.stats.ProbesDropped++
		return
	}
	c.seq++
	c.send(t, Message{Kind: KindPing, Seq: c.seq, Target: t})
	c.probes = append(c.probes, probe{
		observer: observer, target: t, obsSeq: m.Seq, probeSeq: c.seq,
		nextPing: c.now + uint64(c.cfg.IntervalTicks),
		deadline: c.now + c.scaled(c.cfg.ProbeTicks),
	})
}
