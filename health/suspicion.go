package health

import (
	"fmt"
	"strings"

	"github.com/gaspigo/gaspigo/transport"
)

// The observer's side of the protocol: raising a suspicion, asking helpers
// round by round, and refuting or confirming it on their answers.

// suspicion is an open suspicion of one peer.
type suspicion struct {
	id        uint64 // sent as Seq in PingReqs; echoed by helpers
	minSeq    uint64 // a direct Ack at or above this refutes
	since     uint64
	strong    bool // raised or backed by PeerDown
	alone     bool // raised on timing while another peer was heard on time
	round     int
	deadline  uint64           // end of the current round
	asked     []transport.Proc // helpers of the current round
	answered  []transport.Proc // helpers of the current round that answered
	everAsked []transport.Proc
	nacks     []transport.Proc // distinct helpers that reported a Nack
}

func (c *Core) suspect(pe *peer, reason string, strong bool) {
	c.seq++
	pe.status = StatusSuspected
	pe.susp = &suspicion{id: c.seq, minSeq: c.seq + 1, since: c.now, strong: strong, alone: !strong && c.othersOnTime(pe)}
	c.dirty = true
	c.stats.Suspicions++
	c.emit(Suspected, pe.proc, reason)
	c.startRound(pe)
}

func (c *Core) refute(pe *peer, reason string) {
	if !pe.susp.strong && !pe.susp.alone {
		// We suspected a live process on our own timing: perhaps we are
		// the slow one. Not when another peer's acks came on time while
		// pe was silent: then our input flowed, and what fell silent was
		// pe or the way to it (a host cut off for a moment). Counted, that
		// stretched the detection of the next real loss of that host up
		// to fourfold (5 s recoveries in the three-host chaos sweep).
		c.bumpHealth()
	}
	pe.status, pe.susp, pe.watch = StatusAlive, nil, false
	pe.lastHeard = c.now
	c.dirty = true
	c.stats.Refutations++
	c.emit(Refuted, pe.proc, reason)
}

// othersOnTime reports whether a peer other than pe that this process
// pings was heard within two heartbeat intervals (scaled): this process's
// input flows, so a silence of pe alone is not its own slowness.
func (c *Core) othersOnTime(pe *peer) bool {
	fresh := c.scaled(2 * c.cfg.IntervalTicks)
	for _, q := range c.active {
		if q != pe && q.status == StatusAlive && c.now-q.lastHeard <= fresh {
			return true
		}
	}
	return false
}

func (c *Core) confirm(pe *peer, reason string) {
	pe.status, pe.susp, pe.watch, pe.monitored = StatusConfirmed, nil, false, false
	c.gone++
	c.stats.Confirmations++
	c.emit(Confirmed, pe.proc, reason)
	c.updateMonitors()
}

// startRound asks the next helpers to probe pe.
func (c *Core) startRound(pe *peer) {
	s := pe.susp
	s.asked = c.helpers(pe.proc, s.round)
	s.answered = s.answered[:0]
	for _, h := range s.asked {
		c.send(h, Message{Kind: KindPingReq, Seq: s.id, Target: pe.proc})
		if !contains(s.everAsked, h) {
			s.everAsked = append(s.everAsked, h)
		}
	}
	s.deadline = c.now + c.scaled(c.cfg.RoundTicks)
}

// advance moves an open suspicion on at a tick: the fallback when nobody
// can be asked, or the next round when this one is over.
func (c *Core) advance(pe *peer) {
	s := pe.susp
	if c.local.catchingUp {
		return // what we did not hear during our own stall is no evidence
	}
	if c.Required(pe.proc) == 0 {
		if wait := c.scaled(c.cfg.SuspectTicks); pe.down && c.now-pe.downAt >= wait {
			c.confirm(pe, fmt.Sprintf("connection down and no ack for %d ticks; no other member to ask", c.now-pe.downAt))
		}
		return
	}
	if c.now < s.deadline {
		return
	}
	missed := len(s.asked) == 0 // everyone we could ask is suspected too
	for _, h := range s.asked {
		if !contains(s.answered, h) {
			missed = true // not even a Nack (Lifeguard's missed-nack rule)
		}
	}
	if missed {
		// The trouble may be ours: slow down rather than condemn.
		c.bumpHealth()
	}
	s.round++
	c.startRound(pe)
}

// helpers chooses the helpers of one round: a window of candidates (the
// suspect's other monitors first, then ring neighbours), rotated by round
// so that later rounds ask others. Processes this one suspects are not
// asked.
func (c *Core) helpers(target transport.Proc, round int) []transport.Proc {
	ti, ok := c.pos(target)
	if !ok {
		return nil
	}
	exclude := func(p transport.Proc) bool {
		if p == c.self {
			return true
		}
		pe := c.peers[p]
		return pe != nil && pe.status != StatusAlive
	}
	cands := helperOrder(c.members, ti, c.cfg.Successors, 4*c.cfg.Helpers, c.isGone, exclude)
	if len(cands) == 0 {
		return nil
	}
	k := min(c.cfg.Helpers, len(cands))
	start := round * c.cfg.Helpers % len(cands)
	out := make([]transport.Proc, k)
	for i := range out {
		out[i] = cands[(start+i)%len(cands)]
	}
	return out
}

func (c *Core) onIndirect(helper transport.Proc, m Message) {
	pe := c.peers[m.Target]
	if pe == nil || pe.status != StatusSuspected || pe.susp.id != m.Seq || !contains(pe.susp.everAsked, helper) {
		c.stats.Ignored++ // stale or unsolicited
		return
	}
	s := pe.susp
	if contains(s.asked, helper) && !contains(s.answered, helper) {
		s.answered = append(s.answered, helper)
	}
	if m.Kind == KindIndirectAck {
		c.refute(pe, fmt.Sprintf("helper %d reached it", helper))
		return
	}
	if !contains(s.nacks, helper) {
		s.nacks = append(s.nacks, helper)
	}
	if need := c.Required(pe.proc); need > 0 && len(s.nacks) >= need {
		c.confirm(pe, fmt.Sprintf("%d of %d required helpers could not reach it: %s", len(s.nacks), need, procList(s.nacks)))
	}
}

func contains(ps []transport.Proc, p transport.Proc) bool {
	for _, q := range ps {
		if q == p {
			return true
		}
	}
	return false
}

func procList(ps []transport.Proc) string {
	var b strings.Builder
	for i, p := range ps {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprint(&b, uint32(p))
	}
	return b.String()
}
