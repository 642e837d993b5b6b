package health

import (
	"testing"

	"github.com/gaspigo/gaspigo/transport"
)

// ticks runs c for n ticks and returns what it sent and the events.
func ticks(c *Core, n int) (out []Outgoing, evs []Event) {
	for range n {
		c.Tick()
		o, e := c.Ready()
		out, evs = append(out, o...), append(evs, e...)
	}
	return out, evs
}

// pingsTo returns the Seqs of the Pings to p in out.
func pingsTo(out []Outgoing, p transport.Proc) []uint64 {
	var seqs []uint64
	for _, o := range sentOf(out, KindPing) {
		if o.To == p {
			seqs = append(seqs, o.Msg.Seq)
		}
	}
	return seqs
}

// The rules of local health awareness (localhealth.go), one by one.
func TestStallRules(t *testing.T) {
	cfg := scriptConfig() // interval 5, suspect 15, probe 10, round 20
	t.Run("lateness below half an interval is no stall", func(t *testing.T) {
		c := newTestCore(t, cfg, 0, 8)
		c.Late(-3)
		c.Late(cfg.IntervalTicks/2 - 1)
		if c.LocalHealth() != 0 || c.CatchingUp() || c.Stats().Stalls != 0 {
			t.Fatalf("score %d, catching up %v, stalls %d after small lateness", c.LocalHealth(), c.CatchingUp(), c.Stats().Stalls)
		}
	})
	t.Run("a stall pings afresh and suspects nobody until input flows", func(t *testing.T) {
		c := newTestCore(t, cfg, 0, 8)
		ticks(c, 3)
		c.Late(100)
		if c.LocalHealth() != 1 || !c.CatchingUp() || c.Stats().Stalls != 1 {
			t.Fatalf("after a stall: score %d, catching up %v, stalls %d", c.LocalHealth(), c.CatchingUp(), c.Stats().Stalls)
		}
		out, _ := ticks(c, 1)
		if len(pingsTo(out, 1)) != 1 || len(pingsTo(out, 2)) != 1 {
			t.Fatalf("first tick after the stall sent %v, want a fresh ping to each successor", out)
		}
		// Nothing arrives: the catch-up lasts a scaled suspicion timeout,
		// then the successors get a scaled freshTicks more.
		bound := 2*cfg.SuspectTicks + 2*2*cfg.IntervalTicks - 1
		if _, evs := ticks(c, bound-1); len(eventsOf(evs, Suspected)) != 0 {
			t.Fatalf("suspected during the catch-up or its grace: %v", evs)
		}
		if c.CatchingUp() {
			t.Fatalf("still catching up after its bound")
		}
		if _, evs := ticks(c, 2); len(eventsOf(evs, Suspected)) != 2 {
			t.Fatalf("at the end of the grace: %v, want both silent successors suspected", evs)
		}
	})
	t.Run("the first message ends the catch-up", func(t *testing.T) {
		c := newTestCore(t, cfg, 0, 8)
		ticks(c, 3)
		c.Late(100)
		ticks(c, 5)
		c.Receive(3, Message{Kind: KindPing, Seq: 1, Target: 0})
		c.Ready()
		if c.CatchingUp() {
			t.Fatal("a message did not end the catch-up")
		}
		grace := 2 * 2 * cfg.IntervalTicks // freshTicks at score 1
		if _, evs := ticks(c, grace-1); len(eventsOf(evs, Suspected)) != 0 {
			t.Fatalf("suspected within the grace after catching up: %v", evs)
		}
		if _, evs := ticks(c, 2*cfg.SuspectTicks); len(eventsOf(evs, Suspected)) != 2 {
			t.Fatalf("silent successors not suspected after a stretched timeout: %v", evs)
		}
	})
	t.Run("a stalled helper pings again and does not Nack while catching up", func(t *testing.T) {
		c := newTestCore(t, cfg, 4, 8)
		c.Receive(0, Message{Kind: KindPingReq, Seq: 77, Target: 1})
		c.Ready()
		ticks(c, cfg.ProbeTicks-1)
		c.Late(50)
		out, _ := ticks(c, 1)
		if len(pingsTo(out, 1)) != 1 {
			t.Fatalf("first tick after the stall sent %v, want a fresh probe ping to 1", out)
		}
		// Catch-up bound (30 ticks at score 1), then a full scaled probe
		// timeout (20).
		wait := 2*cfg.SuspectTicks + 2*cfg.ProbeTicks
		out, _ = ticks(c, wait-2)
		if n := sentOf(out, KindIndirectNack); len(n) != 0 {
			t.Fatalf("Nack within %d ticks of the stall, before catching up and probing afresh", wait-1)
		}
		out, _ = ticks(c, 1)
		if n := sentOf(out, KindIndirectNack); len(n) != 1 || n[0].To != 0 {
			t.Fatalf("after catching up and a fresh probe timeout: %v, want one Nack to 0", out)
		}
	})
	t.Run("strong evidence counts during a catch-up", func(t *testing.T) {
		c := newTestCore(t, cfg, 0, 8)
		ticks(c, 3)
		c.Late(100)
		c.PeerDown(1)
		out, evs := c.Ready()
		if len(eventsOf(evs, Suspected)) != 1 || len(sentOf(out, KindPingReq)) != cfg.Helpers {
			t.Fatalf("PeerDown while catching up: %v %v, want a suspicion and PingReqs", evs, out)
		}
	})
	t.Run("after a stall only answers to new requests confirm", func(t *testing.T) {
		c := newTestCore(t, cfg, 0, 8)
		reqs := suspectVia(t, c)
		old := reqs[0].Msg.Seq
		c.Late(100)
		// The helpers' Nacks waited in the backlog; the first one ends the
		// catch-up, which asks the helpers again under a new ID.
		for _, r := range reqs {
			c.Receive(r.To, Message{Kind: KindIndirectNack, Seq: old, Target: 1})
		}
		out, evs := c.Ready()
		if st, _ := c.Status(1); st != StatusSuspected || len(eventsOf(evs, Confirmed)) != 0 {
			t.Fatalf("Nacks from before the stall confirmed 1: %v", evs)
		}
		again := sentOf(out, KindPingReq)
		if len(again) != cfg.Helpers || again[0].Msg.Seq == old {
			t.Fatalf("after catching up sent %v, want %d PingReqs under a new ID", out, cfg.Helpers)
		}
		for _, r := range again[:cfg.Confirmations] {
			c.Receive(r.To, Message{Kind: KindIndirectNack, Seq: r.Msg.Seq, Target: 1})
		}
		if st, _ := c.Status(1); st != StatusConfirmed {
			t.Fatalf("fresh Nacks left 1 %v", st)
		}
	})
	t.Run("a late ack raises the score, a lost ping does not", func(t *testing.T) {
		long := cfg // one successor, and no suspicion while acks are late
		long.Successors, long.SuspectTicks = 1, 8*cfg.IntervalTicks
		c := newTestCore(t, long, 0, 8)
		out, _ := ticks(c, 1)
		first := pingsTo(out, 1)
		c.Receive(1, Message{Kind: KindAck, Seq: first[0], Target: 1}) // quickest: 0 ticks
		out, _ = ticks(c, cfg.IntervalTicks)
		lost := pingsTo(out, 1) // never answered
		out, _ = ticks(c, cfg.IntervalTicks)
		next := pingsTo(out, 1)
		c.Receive(1, Message{Kind: KindAck, Seq: next[0], Target: 1})
		if c.LocalHealth() != 0 || c.Stats().LateAcks != 0 {
			t.Fatalf("lost ping %v then a prompt ack: score %d, late acks %d", lost, c.LocalHealth(), c.Stats().LateAcks)
		}
		out, _ = ticks(c, cfg.IntervalTicks)
		slow := pingsTo(out, 1)
		ticks(c, 2*cfg.IntervalTicks) // answered 2 intervals late: still on time
		c.Receive(1, Message{Kind: KindAck, Seq: slow[0], Target: 1})
		if c.LocalHealth() != 0 {
			t.Fatalf("an ack two intervals late raised the score to %d", c.LocalHealth())
		}
		out, _ = ticks(c, cfg.IntervalTicks)
		late := pingsTo(out, 1)
		ticks(c, 2*cfg.IntervalTicks+1)
		c.Receive(1, Message{Kind: KindAck, Seq: late[len(late)-1], Target: 1})
		if c.LocalHealth() != 1 || c.Stats().LateAcks != 1 {
			t.Fatalf("an ack more than two intervals late: score %d, late acks %d; want 1 and 1", c.LocalHealth(), c.Stats().LateAcks)
		}
	})
}
