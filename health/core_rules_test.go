package health

import (
	"testing"

	"github.com/gaspigo/gaspigo/transport"
)

// suspectVia makes observer 0 of an 8-process job suspect 1 through
// PeerDown and returns the PingReqs it sent.
func suspectVia(t *testing.T, c *Core) []Outgoing {
	t.Helper()
	c.Tick()
	c.Ready()
	c.PeerDown(1)
	out, evs := c.Ready()
	if len(evs) != 1 || evs[0].Kind != Suspected || evs[0].Proc != 1 {
		t.Fatalf("PeerDown(1) gave events %v", evs)
	}
	reqs := sentOf(out, KindPingReq)
	if len(reqs) != c.cfg.Helpers {
		t.Fatalf("sent %d PingReqs, want %d: %v", len(reqs), c.cfg.Helpers, out)
	}
	return reqs
}

func TestIndirectAnswers(t *testing.T) {
	cfg := scriptConfig() // P=3, C=2
	nack := func(seqDelta uint64) func(uint64, []transport.Proc) Message {
		return func(id uint64, _ []transport.Proc) Message {
			return Message{Kind: KindIndirectNack, Seq: id + seqDelta, Target: 1}
		}
	}
	tests := []struct {
		name string
		// helper picks which helper (index in the PingReqs, or -1 for a
		// process that was not asked) sends each message.
		helpers []int
		msgs    []func(uint64, []transport.Proc) Message
		want    Status
	}{
		{"two distinct nacks confirm", []int{0, 1}, []func(uint64, []transport.Proc) Message{nack(0), nack(0)}, StatusConfirmed},
		{"one nack does not", []int{0}, []func(uint64, []transport.Proc) Message{nack(0)}, StatusSuspected},
		{"a repeated nack counts once", []int{0, 0, 0}, []func(uint64, []transport.Proc) Message{nack(0), nack(0), nack(0)}, StatusSuspected},
		{"unsolicited nacks are ignored", []int{-1, 0}, []func(uint64, []transport.Proc) Message{nack(0), nack(0)}, StatusSuspected},
		{"stale suspicion ID is ignored", []int{0, 1}, []func(uint64, []transport.Proc) Message{nack(0), nack(1)}, StatusSuspected},
		{"an indirect ack refutes", []int{0, 1}, []func(uint64, []transport.Proc) Message{nack(0), func(id uint64, _ []transport.Proc) Message {
			return Message{Kind: KindIndirectAck, Seq: id, Target: 1}
		}}, StatusAlive},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newTestCore(t, cfg, 0, 8)
			reqs := suspectVia(t, c)
			id := reqs[0].Msg.Seq
			var helpers []transport.Proc
			for _, r := range reqs {
				helpers = append(helpers, r.To)
			}
			for i, h := range tt.helpers {
				from := transport.Proc(5) // not among 0's helpers for 1 (7, 2, 6)
				if h >= 0 {
					from = helpers[h]
				}
				c.Receive(from, tt.msgs[i](id, helpers))
			}
			if st, _ := c.Status(1); st != tt.want {
				t.Fatalf("status %v, want %v (helpers %v)", st, tt.want, helpers)
			}
		})
	}
}

func TestDirectAckRefutesOnlyWhenFresh(t *testing.T) {
	c := newTestCore(t, scriptConfig(), 0, 8)
	c.Tick()
	out, _ := c.Ready()
	pings := sentOf(out, KindPing)
	if len(pings) != 2 || pings[0].To != 1 || pings[1].To != 2 {
		t.Fatalf("first tick pinged %v, want 1 and 2", pings)
	}
	old := pings[0].Msg.Seq
	c.PeerDown(1)
	c.Receive(1, Message{Kind: KindAck, Seq: old, Target: 1}) // sent before the connection closed
	if st, _ := c.Status(1); st != StatusSuspected {
		t.Fatalf("a stale ack refuted the suspicion: %v", st)
	}
	for range c.cfg.IntervalTicks {
		c.Tick()
	}
	out, _ = c.Ready()
	var fresh uint64
	for _, o := range sentOf(out, KindPing) {
		if o.To == 1 {
			fresh = o.Msg.Seq
		}
	}
	if fresh == 0 {
		t.Fatal("suspect not pinged during the suspicion")
	}
	c.Receive(1, Message{Kind: KindAck, Seq: fresh, Target: 1})
	if st, _ := c.Status(1); st != StatusAlive {
		t.Fatalf("a fresh ack did not refute: %v", st)
	}
	// Misdirected messages are ignored.
	before := c.Stats().Ignored
	c.Receive(2, Message{Kind: KindAck, Seq: fresh, Target: 1})
	c.Receive(2, Message{Kind: KindPing, Seq: 1, Target: 5})
	c.Receive(0, Message{Kind: KindPing, Seq: 1, Target: 0})
	c.Receive(2, Message{Kind: 0, Target: 0})
	if got := c.Stats().Ignored - before; got != 4 {
		t.Errorf("ignored %d of 4 bad messages", got)
	}
	if out, _ := c.Ready(); len(out) != 0 {
		t.Errorf("bad messages were answered: %v", out)
	}
}

func TestHelperRole(t *testing.T) {
	cfg := scriptConfig()
	t.Run("target answers", func(t *testing.T) {
		c := newTestCore(t, cfg, 4, 8)
		c.Receive(0, Message{Kind: KindPingReq, Seq: 77, Target: 5})
		out, _ := c.Ready()
		if len(out) != 1 || out[0].To != 5 || out[0].Msg.Kind != KindPing {
			t.Fatalf("PingReq gave %v, want one Ping to 5", out)
		}
		c.Receive(5, Message{Kind: KindAck, Seq: out[0].Msg.Seq, Target: 5})
		out, _ = c.Ready()
		if len(out) != 1 || out[0] != (Outgoing{To: 0, Msg: Message{Kind: KindIndirectAck, Seq: 77, Target: 5}}) {
			t.Fatalf("answer %v, want IndirectAck(77) to 0", out)
		}
	})
	t.Run("target silent", func(t *testing.T) {
		c := newTestCore(t, cfg, 4, 8)
		c.Receive(0, Message{Kind: KindPingReq, Seq: 77, Target: 1})
		c.Receive(0, Message{Kind: KindPingReq, Seq: 77, Target: 1}) // duplicate
		out, _ := c.Ready()
		if len(sentOf(out, KindPing)) != 1 {
			t.Fatalf("duplicate request probed twice: %v", out)
		}
		pings := 1
		for i := 1; i <= cfg.ProbeTicks; i++ {
			c.Tick()
			out, _ = c.Ready()
			for _, o := range sentOf(out, KindPing) {
				if o.To == 1 { // not a successor of 4: only probe pings
					pings++
				}
			}
			nacks := sentOf(out, KindIndirectNack)
			if i < cfg.ProbeTicks && len(nacks) != 0 {
				t.Fatalf("Nack after %d ticks, before the probe timeout %d", i, cfg.ProbeTicks)
			}
			if i == cfg.ProbeTicks && (len(nacks) != 1 || nacks[0].To != 0 || nacks[0].Msg.Seq != 77) {
				t.Fatalf("at the probe timeout: %v, want one Nack(77) to 0", out)
			}
		}
		// The helper pings again every interval, in case a ping is lost.
		if want := (cfg.ProbeTicks + cfg.IntervalTicks - 1) / cfg.IntervalTicks; pings != want {
			t.Errorf("helper sent %d probe pings, want %d", pings, want)
		}
	})
	t.Run("connection down while probing", func(t *testing.T) {
		c := newTestCore(t, cfg, 4, 8)
		c.Receive(0, Message{Kind: KindPingReq, Seq: 77, Target: 5})
		c.Ready()
		c.PeerDown(5)
		out, _ := c.Ready()
		if len(sentOf(out, KindIndirectNack)) != 1 {
			t.Fatalf("PeerDown during a probe: %v, want a Nack at once", out)
		}
	})
	t.Run("recent PeerDown answers at once", func(t *testing.T) {
		c := newTestCore(t, cfg, 4, 8)
		c.PeerDown(1) // not monitored by 4: recorded as evidence only
		if st, _ := c.Status(1); st != StatusAlive {
			t.Fatalf("PeerDown of an unmonitored process changed its status to %v", st)
		}
		c.Receive(0, Message{Kind: KindPingReq, Seq: 9, Target: 1})
		out, _ := c.Ready()
		if len(out) != 1 || out[0].Msg.Kind != KindIndirectNack {
			t.Fatalf("got %v, want an immediate Nack", out)
		}
		// Evidence expires after the suspicion timeout: then it probes.
		for range cfg.SuspectTicks + 1 {
			c.Tick()
		}
		c.Ready()
		c.Receive(0, Message{Kind: KindPingReq, Seq: 10, Target: 1})
		out, _ = c.Ready()
		if len(out) != 1 || out[0].Msg.Kind != KindPing {
			t.Fatalf("got %v, want a probe once the evidence is old", out)
		}
	})
	t.Run("asked about itself", func(t *testing.T) {
		c := newTestCore(t, cfg, 4, 8)
		c.Receive(0, Message{Kind: KindPingReq, Seq: 3, Target: 4})
		out, _ := c.Ready()
		if len(out) != 1 || out[0].Msg != (Message{Kind: KindIndirectAck, Seq: 3, Target: 4}) {
			t.Fatalf("got %v", out)
		}
	})
	t.Run("pending cap", func(t *testing.T) {
		small := cfg
		small.MaxPendingProbes = 2
		c := newTestCore(t, small, 4, 8)
		for seq := uint64(1); seq <= 5; seq++ {
			c.Receive(0, Message{Kind: KindPingReq, Seq: seq, Target: 6})
		}
		if out, _ := c.Ready(); len(out) != 2 || c.Stats().ProbesDropped != 3 {
			t.Fatalf("%d probes sent, %d dropped; want 2 and 3", len(out), c.Stats().ProbesDropped)
		}
	})
}

// Lifeguard: an observer whose helpers never answer raises its local
// health score, its timeouts scale with it, and acks bring it down again.
func TestLocalHealth(t *testing.T) {
	cfg := scriptConfig()
	c := newTestCore(t, cfg, 0, 8)
	c.PeerDown(1)
	c.Ready()
	for range 4 * cfg.RoundTicks * (1 + cfg.MaxLocalHealth) {
		c.Tick()
		c.Ready()
	}
	if h := c.LocalHealth(); h != cfg.MaxLocalHealth {
		t.Fatalf("health %d after silent rounds, want %d", h, cfg.MaxLocalHealth)
	}
	// Successor 2 is silent too: with score h its suspicion takes
	// SuspectTicks·(1+h) ticks, not SuspectTicks.
	if st, _ := c.Status(2); st != StatusSuspected {
		t.Fatalf("2 is %v", st)
	}
	c2 := newTestCore(t, cfg, 0, 8)
	c2.local.score = 2
	start := c2.Now()
	var at uint64
	for range 10 * cfg.SuspectTicks {
		c2.Tick()
		// keep the score up: nobody answers the helpers either
		c2.local.score = 2
		if _, evs := c2.Ready(); len(eventsOf(evs, Suspected)) > 0 && at == 0 {
			at = c2.Now() - start
		}
	}
	if want := uint64(3 * cfg.SuspectTicks); at != want {
		t.Errorf("suspected after %d ticks at score 2, want %d", at, want)
	}
	// Acks bring the score down by one per stretched suspicion timeout
	// without a new signal: from 3 to 0 in (4+3+2)·SuspectTicks.
	c3 := newTestCore(t, cfg, 0, 8)
	c3.local.score = 3
	for range 9*cfg.SuspectTicks - 1 {
		c3.Tick()
		out, _ := c3.Ready()
		for _, o := range sentOf(out, KindPing) {
			c3.Receive(o.To, Message{Kind: KindAck, Seq: o.Msg.Seq, Target: o.To})
		}
	}
	if h := c3.LocalHealth(); h != 1 {
		t.Errorf("score %d one tick before the third step down, want 1", h)
	}
	c3.Tick()
	if h := c3.LocalHealth(); h != 0 {
		t.Errorf("score %d after 9 suspicion timeouts of acks, want 0", h)
	}
}

func TestSetMembersForgetsAndMonitors(t *testing.T) {
	cfg := scriptConfig()
	c := newTestCore(t, cfg, 0, 8)
	c.PeerDown(1)
	c.Receive(3, Message{Kind: KindPingReq, Seq: 5, Target: 6})
	c.Ready()
	if got := c.Monitored(); len(got) != 2 || got[0] != 1 || got[1] != 2 {
		t.Fatalf("monitored %v", got)
	}
	if err := c.SetMembers(ps(0, 2, 3, 4, 5, 7, 9)); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Status(1); ok {
		t.Error("removed process 1 is still known")
	}
	if s := c.Suspects(); len(s) != 0 {
		t.Errorf("suspicion of a removed process survived: %v", s)
	}
	if got := c.Monitored(); len(got) != 2 || got[0] != 2 || got[1] != 3 {
		t.Errorf("monitored %v after the view change, want [2 3]", got)
	}
	// The probe on removed process 6 is dropped: no Nack later.
	for range cfg.ProbeTicks + 1 {
		c.Tick()
	}
	out, _ := c.Ready()
	if n := sentOf(out, KindIndirectNack); len(n) != 0 {
		t.Errorf("probe on a removed process answered: %v", n)
	}
	// A process outside the view monitors nobody but still answers.
	if err := c.SetMembers(ps(1, 2, 3)); err != nil {
		t.Fatal(err)
	}
	if got := c.Monitored(); len(got) != 0 {
		t.Errorf("outside the view, monitors %v", got)
	}
	c.Receive(2, Message{Kind: KindPing, Seq: 4, Target: 0})
	if out, _ := c.Ready(); len(sentOf(out, KindAck)) != 1 {
		t.Errorf("outside the view, did not answer a ping: %v", out)
	}
}

// The two-process fallback: PeerDown plus the suspicion timeout. PeerDown
// repeated on every failed send does not postpone it, and an ack in time
// refutes instead.
func TestTwoProcessFallback(t *testing.T) {
	cfg := scriptConfig()
	c := newTestCore(t, cfg, 0, 2)
	if r := c.Required(1); r != 0 {
		t.Fatalf("Required = %d with two processes, want 0", r)
	}
	c.Tick()
	out, _ := c.Ready()
	c.PeerDown(1)
	// An ack that was in flight when the connection closed changes nothing.
	c.Receive(1, Message{Kind: KindAck, Seq: out[0].Msg.Seq, Target: 1})
	var at uint64
	for range 3 * cfg.SuspectTicks {
		c.Tick()
		c.PeerDown(1)
		if _, evs := c.Ready(); len(eventsOf(evs, Confirmed)) > 0 && at == 0 {
			at = c.Now()
		}
	}
	if at != uint64(1+cfg.SuspectTicks) {
		t.Errorf("confirmed at tick %d, want %d", at, 1+cfg.SuspectTicks)
	}
	c = newTestCore(t, cfg, 0, 2)
	c.PeerDown(1)
	for i := range 3 * cfg.SuspectTicks {
		c.Tick()
		out, evs := c.Ready()
		if len(eventsOf(evs, Confirmed)) > 0 {
			t.Fatal("confirmed although the peer answered")
		}
		if i == 5 {
			for _, o := range sentOf(out, KindPing) {
				c.Receive(1, Message{Kind: KindAck, Seq: o.Msg.Seq, Target: 1})
			}
		}
	}
	// With three processes the cap is 1: the helper's word is needed.
	c = newTestCore(t, cfg, 0, 3)
	if r := c.Required(1); r != 1 {
		t.Fatalf("Required = %d with three processes, want 1", r)
	}
}

// FuzzCore feeds a Core arbitrary inputs. It must never panic, only emit
// valid messages to other processes, and never confirm a process it did
// not suspect first.
func FuzzCore(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
	f.Add([]byte{3, 1, 3, 1, 3, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{4, 2, 0, 5, 2, 1, 5, 3, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		cfg := scriptConfig()
		c, err := NewCore(cfg, 0, procRange(6))
		if err != nil {
			t.Fatal(err)
		}
		suspected := map[transport.Proc]bool{}
		for len(b) >= 4 {
			op, p, k, s := b[0]%7, transport.Proc(b[1]%8), Kind(b[2]%7), uint64(b[3]%16)
			b = b[4:]
			switch op {
			case 0, 1:
				for range int(p) + 1 {
					c.Tick()
				}
			case 2:
				c.Receive(p, Message{Kind: k, Seq: s, Target: transport.Proc(k) % 8})
			case 3:
				c.PeerDown(p)
			case 4:
				c.Hint(p)
			case 5:
				c.Receive(p, Message{Kind: KindIndirectNack, Seq: s, Target: transport.Proc(uint8(k) % 6)})
			case 6:
				var ms []transport.Proc
				for i := transport.Proc(0); i < 8; i++ {
					if (s>>(i%4))&1 == 1 || i == p {
						ms = append(ms, i)
					}
				}
				_ = c.SetMembers(ms)
			}
			out, evs := c.Ready()
			for _, o := range out {
				if err := o.Msg.Validate(); err != nil || o.To == c.Self() {
					t.Fatalf("bad output %v: %v", o, err)
				}
			}
			for _, e := range evs {
				switch e.Kind {
				case Suspected:
					suspected[e.Proc] = true
				case Confirmed:
					if !suspected[e.Proc] {
						t.Fatalf("confirmed %d without suspecting it", e.Proc)
					}
				}
			}
		}
	})
}

// Rule (doc.go, "Cost as a function of N"): a process keeps state for the
// members it monitors and those with evidence against them, not for every
// member, and keeps the member list it is given rather than a copy.
func TestStateOnlyForPeersWithState(t *testing.T) {
	members := procRange(4096)
	c, err := NewCore(scriptConfig(), 100, members)
	if err != nil {
		t.Fatal(err)
	}
	for range 50 {
		c.Tick()
		c.Ready()
	}
	c.PeerDown(3000) // not monitored: its going down is kept as evidence
	if n, want := len(c.peers), scriptConfig().Successors+1; n != want {
		t.Fatalf("%d peers with state among %d members, want %d (the successors and the one seen down)", n, len(members), want)
	}
	if &c.members[0] != &members[0] {
		t.Fatal("the Core copied the member list")
	}
	if err := c.SetMembers(append(members[:3000:3000], members[3001:]...)); err != nil {
		t.Fatal(err)
	}
	if n := len(c.peers); n != scriptConfig().Successors {
		t.Fatalf("%d peers with state after the view dropped the one seen down, want %d", n, scriptConfig().Successors)
	}
}
