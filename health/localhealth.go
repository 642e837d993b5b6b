package health

// Local health awareness (after Lifeguard's local health multiplier): a
// process that is itself slow must not take the silence of others as
// evidence against them. The signals, all in ticks:
//
//   - Late: the driver saw its own clock stall (the process was stopped,
//     descheduled, or its timers fired late) for at least stallTicks;
//   - a helper round in which some helper did not answer at all (the
//     missed-nack rule);
//   - a suspicion this process raised on timing that turned out wrong,
//     unless another peer's acks came on time while the suspect was
//     silent (then the silence was the suspect's or its path's: a host
//     cut off for a moment, not this process being slow);
//   - a heartbeat Ack that came more than two intervals later than the
//     peer's quickest one: the peer (or the host both run on) stalls, and
//     this process's timeouts are too short for it.
//
// Each raises the score by one, up to MaxLocalHealth; at score h the
// suspicion, probe and round timeouts are multiplied by 1+h. The score
// falls by one after each stretched suspicion timeout (SuspectTicks·(1+h))
// that passed with no signal and at least one Ack: a stretched timeout
// outlives the stall that caused it by a whole stretched timeout, so that
// peers starved by the same load (and resumed later) get it too.
//
// A stall also starts a catch-up: until the process receives a message
// again (its input flows) or a scaled suspicion timeout passes, it raises
// no suspicion on timing, its indirect probes time out on nobody, and its
// suspicion rounds wait. When it has caught up, every peer gets at least
// freshTicks (scaled) to answer a ping sent after the stall before it can
// be suspected, probes run a full scaled probe timeout again, and every
// open suspicion starts a new round under a new ID, so that helpers'
// Nacks that waited in the backlog (perhaps ahead of the suspect's own
// Acks) no longer count. Strong evidence (PeerDown) still raises a
// suspicion during a catch-up: it is not this process's timing.
type localHealth struct {
	score      int    // 0 = healthy, up to MaxLocalHealth
	acked      bool   // an Ack arrived since calmFrom
	calmFrom   uint64 // tick of the last signal or decay step
	catchingUp bool   // stalled and no message received since
	catchUntil uint64 // a catch-up ends at this tick even without input
}

// stallTicks is the smallest lateness Late takes for a stall: half a
// heartbeat interval. Smaller delays only slow the Core's clock, which is
// already harmless, since missed ticks are not replayed.
func (c *Core) stallTicks() int { return max(1, c.cfg.IntervalTicks/2) }

// freshTicks is the least silence after a catch-up, before scaling, that
// can make a peer suspected: time for a ping sent after the stall to be
// answered, with one interval to spare.
func (c *Core) freshTicks() int { return 2 * c.cfg.IntervalTicks }

// Late reports that the driver's clock skipped missed ticks before the
// next Tick: the real time since the last Tick was 1+missed ticks. The
// driver measures it on the real clock and calls Late before the Tick. A
// lateness of at least half a heartbeat interval is a stall: it raises the
// local health score and starts a catch-up (see localHealth). Smaller or
// negative values are ignored.
func (c *Core) Late(missed int) {
	if missed < c.stallTicks() {
		return
	}
	c.stats.Stalls++
	c.bumpHealth()
	c.local.catchingUp = true
	c.local.catchUntil = c.now + c.scaled(c.cfg.SuspectTicks)
	// Ping everybody afresh at the next tick: only answers to pings sent
	// after the stall are evidence.
	for _, pe := range c.peers {
		pe.nextPing = min(pe.nextPing, c.now)
	}
	for i := range c.probes {
		c.probes[i].nextPing = c.now
	}
}

// CatchingUp reports whether this process is catching up after a stall:
// it suspects nobody on timing until it receives a message again.
func (c *Core) CatchingUp() bool { return c.local.catchingUp }

// LocalHealth returns the local health score: 0 when this process and its
// peers keep time, up to MaxLocalHealth when they do not. At score h its
// timeouts are multiplied by 1+h.
func (c *Core) LocalHealth() int { return c.local.score }

// tickLocalHealth runs at the start of every Tick: it ends a catch-up that
// heard nothing for its whole bound, and lets the score decay.
func (c *Core) tickLocalHealth() {
	l := &c.local
	if l.catchingUp && c.now >= l.catchUntil {
		c.caughtUp()
	}
	if l.score > 0 && c.now-l.calmFrom >= c.scaled(c.cfg.SuspectTicks) {
		if l.acked {
			l.score--
		}
		l.calmFrom, l.acked = c.now, false
	}
}

// caughtUp ends a catch-up: the timers that could condemn a peer are
// pushed past now, so that evidence gathered from now on decides.
func (c *Core) caughtUp() {
	c.local.catchingUp = false
	fresh := c.now - min(c.now, c.scaled(c.cfg.SuspectTicks)-c.scaled(c.freshTicks()))
	for _, pe := range c.peers {
		pe.lastHeard = max(pe.lastHeard, fresh)
		if pe.down {
			pe.downAt = max(pe.downAt, c.now)
		}
		if s := pe.susp; s != nil {
			// Helpers' answers that waited in our backlog may be older
			// than the suspect's Acks behind them: only answers to a
			// request sent from now on count.
			c.seq++
			s.id, s.nacks, s.everAsked = c.seq, s.nacks[:0], s.everAsked[:0]
			c.startRound(pe)
		}
	}
	for i := range c.probes {
		c.probes[i].deadline = max(c.probes[i].deadline, c.now+c.scaled(c.cfg.ProbeTicks))
	}
}

// checkLateAck takes an Ack from pe with sequence number seq. The answer
// to pe's oldest unanswered heartbeat ping ends the wait, and raises the
// score when it came more than two intervals later than pe's quickest
// answer: pe (or the host both run on) stalled. A lost ping is not late:
// the Ack of a later ping ends the wait without a signal.
func (c *Core) checkLateAck(pe *peer, seq uint64) {
	if pe.waitSeq == 0 || seq < pe.waitSeq {
		return
	}
	if seq == pe.waitSeq {
		rtt := c.now - pe.waitSince
		if pe.fastest == 0 || rtt+1 < pe.fastest {
			pe.fastest = rtt + 1
		}
		if rtt > pe.fastest-1+2*uint64(c.cfg.IntervalTicks) {
			c.stats.LateAcks++
			c.bumpHealth()
		}
	}
	pe.waitSeq = 0
}

func (c *Core) scaled(ticks int) uint64 { return uint64(ticks) * uint64(1+c.local.score) }

func (c *Core) bumpHealth() {
	if c.local.score < c.cfg.MaxLocalHealth {
		c.local.score++
	}
	c.local.calmFrom, c.local.acked = c.now, false
}
