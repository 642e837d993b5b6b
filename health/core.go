package health

import (
	"fmt"

	"github.com/gaspigo/gaspigo/transport"
)

// peer is the Core's state for one other member.
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
	cfg     CoreConfig
	self    transport.Proc
	now     uint64
	seq     uint64 // last sequence number used
	members []transport.Proc
	index   map[transport.Proc]int
	peers   map[transport.Proc]*peer
	active  []*peer // monitored, watched or suspected peers, in ring order
	dirty   bool    // active must be rebuilt
	gone    int     // confirmed members
	local   localHealth
	probes  []probe
	out     []Outgoing
	events  []Event
	stats   CoreStats
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
// earlier that is still in the view stays confirmed.
func (c *Core) SetMembers(members []transport.Proc) error {
	index := make(map[transport.Proc]int, len(members))
	for i, p := range members {
		if p == transport.NoProc {
			return fmt.Errorf("%w: member %d is NoProc", ErrBadMembers, i)
		}
		if j, dup := index[p]; dup {
			return fmt.Errorf("%w: process %d is listed twice (positions %d and %d)", ErrBadMembers, p, j, i)
		}
		index[p] = i
	}
	peers := make(map[transport.Proc]*peer, len(members))
	c.gone = 0
	for _, p := range members {
		if p == c.self {
			continue
		}
		pe := c.peers[p]
		if pe == nil {
			pe = &peer{proc: p, lastHeard: c.now}
		}
		if pe.status == StatusConfirmed {
			c.gone++
		}
		peers[p] = pe
	}
	kept := c.probes[:0]
	for _, pr := range c.probes {
		_, wasT := c.index[pr.target]
		_, wasO := c.index[pr.observer]
		_, isT := index[pr.target]
		_, isO := index[pr.observer]
		if (wasT && !isT) || (wasO && !isO) {
			continue
		}
		kept = append(kept, pr)
	}
	c.probes = kept
	c.members = append(c.members[:0:0], members...)
	c.index, c.peers = index, peers
	c.updateMonitors()
	return nil
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
	pe := c.peers[p]
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
	pe := c.peers[p]
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
	pe := c.peers[p]
	if pe == nil {
		return 0, false
	}
	return pe.status, true
}

// Suspects returns the members this process suspects or has confirmed, in
// ring order.
func (c *Core) Suspects() []transport.Proc {
	var out []transport.Proc
	for _, p := range c.members {
		if pe := c.peers[p]; pe != nil && pe.status != StatusAlive {
			out = append(out, p)
		}
	}
	return out
}

// Monitored returns the ring successors this process heartbeats, in ring
// order.
func (c *Core) Monitored() []transport.Proc {
	var out []transport.Proc
	for _, p := range c.members {
		if pe := c.peers[p]; pe != nil && pe.monitored {
			out = append(out, p)
		}
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
	others := len(c.peers) - c.gone
	if pe := c.peers[target]; pe != nil && pe.status != StatusConfirmed {
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

// updateMonitors recomputes which peers are ring successors.
func (c *Core) updateMonitors() {
	c.dirty = true
	succ := map[transport.Proc]bool{}
	if i, ok := c.index[c.self]; ok {
		for _, p := range ringSuccessors(c.members, i, c.cfg.Successors, c.isGone) {
			succ[p] = true
		}
	}
	for _, p := range c.members {
		pe := c.peers[p]
		if pe == nil {
			continue
		}
		was := pe.monitored
		pe.monitored = succ[p]
		if pe.monitored && !was && pe.status == StatusAlive && !pe.watch {
			pe.lastHeard = c.now
			pe.nextPing = c.now
		}
	}
}

func (c *Core) rebuildActive() {
	if !c.dirty {
		return
	}
	c.active = c.active[:0]
	for _, p := range c.members {
		pe := c.peers[p]
		if pe != nil && pe.status != StatusConfirmed && (pe.monitored || pe.watch || pe.status == StatusSuspected) {
			c.active = append(c.active, pe)
		}
	}
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
