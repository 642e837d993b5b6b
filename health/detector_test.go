package health

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gaspigo/gaspigo/transport"
)

// memNet connects Detectors in one process. Sends go straight into the
// destination's Deliver from the sender goroutine, as a transport's reader
// would call it.
type memNet struct {
	mu     sync.Mutex
	dets   map[transport.Proc]*Detector
	dead   map[transport.Proc]bool // SIGKILLed: sends fail with ErrPeerDown
	silent map[transport.Proc]bool // paused or cut off: its traffic vanishes
	block  map[transport.Proc]bool // sends to it hang until their context ends
}

type memSender struct {
	net  *memNet
	self transport.Proc
}

func (s memSender) SendHealth(ctx context.Context, to transport.Proc, payload []byte) error {
	n := s.net
	n.mu.Lock()
	d, dead, quiet, block := n.dets[to], n.dead[to], n.silent[to] || n.silent[s.self], n.block[to]
	n.mu.Unlock()
	switch {
	case dead:
		return fmt.Errorf("send to %d: %w", to, transport.ErrPeerDown)
	case block:
		<-ctx.Done()
		return ctx.Err()
	case quiet:
		return nil
	case d == nil:
		return transport.ErrUnknownPeer
	}
	return d.Deliver(s.self, payload)
}

// lockedBuffer is a log sink shared by the detectors of a test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

type cluster struct {
	t    *testing.T
	cfg  Config
	net  *memNet
	dets []*Detector
	log  *lockedBuffer
}

func newCluster(t *testing.T, cfg Config, n int) *cluster {
	t.Helper()
	c := &cluster{t: t, cfg: cfg, log: &lockedBuffer{}, net: &memNet{
		dets: map[transport.Proc]*Detector{}, dead: map[transport.Proc]bool{},
		silent: map[transport.Proc]bool{}, block: map[transport.Proc]bool{},
	}}
	logger := slog.New(slog.NewTextHandler(c.log, nil))
	members := procRange(n)
	for _, p := range members {
		d, err := New(cfg, p, members, memSender{net: c.net, self: p}, logger)
		if err != nil {
			t.Fatal(err)
		}
		c.net.mu.Lock()
		c.net.dets[p] = d
		c.net.mu.Unlock()
		c.dets = append(c.dets, d)
	}
	return c
}

// kill is a SIGKILL: the process stops, sends to it fail, and every peer's
// transport reports PeerDown.
func (c *cluster) kill(p transport.Proc) {
	c.net.mu.Lock()
	c.net.dead[p] = true
	c.net.mu.Unlock()
	c.dets[p].Close()
	for i, d := range c.dets {
		if transport.Proc(i) != p {
			_ = d.PeerDown(p) // ErrClosed for processes killed before
		}
	}
}

func (c *cluster) close() {
	for _, d := range c.dets {
		d.Close()
	}
}

// advance lets d of fake time pass inside the synctest bubble.
func advance(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

// waitFor returns the first event of kind about p on ch, or fails after
// within (fake time).
func waitFor(t *testing.T, ch <-chan Event, kind EventKind, p transport.Proc, within time.Duration) Event {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("event channel closed while waiting for %v %d", kind, p)
			}
			if ev.Kind == kind && ev.Proc == p {
				return ev
			}
		case <-deadline:
			t.Fatalf("no %v %d within %v", kind, p, within)
		}
	}
}

func TestDetectorDetectsKill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := LocalConfig()
		c := newCluster(t, cfg, 6)
		defer c.close()
		events := c.dets[2].Subscribe() // 2 monitors 3 and 4
		advance(10 * cfg.HeartbeatInterval)
		start := time.Now()
		c.kill(3)
		bound := cfg.DetectionBound(0, true)
		ev := waitFor(t, events, Confirmed, 3, bound+cfg.Tick)
		took := time.Since(start)
		t.Logf("SIGKILL confirmed after %v (bound %v): %s", took, bound, ev.Reason)
		if ev.At.Before(start) || ev.At.After(time.Now()) {
			t.Errorf("event time %v, now %v", ev.At, time.Now())
		}
		if got := c.dets[2].Suspects(); len(got) != 1 || got[0] != 3 {
			t.Errorf("Suspects = %v, want [3]", got)
		}
		if st, ok := c.dets[2].Status(3); !ok || st != StatusConfirmed {
			t.Errorf("Status(3) = %v, %v", st, ok)
		}
		if s := c.dets[2].Stats(); s.Confirmations != 1 || s.Suspicions != 1 {
			t.Errorf("stats %+v", s)
		}
		if log := c.log.String(); !strings.Contains(log, `msg="health: confirmed failure" peer=3`) {
			t.Errorf("no confirmation logged with proc attributes:\n%s", log)
		}
	})
}

func TestDetectorDetectsSilentFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := LocalConfig()
		c := newCluster(t, cfg, 6)
		defer c.close()
		events := c.dets[1].Subscribe()
		advance(10 * cfg.HeartbeatInterval)
		start := time.Now()
		c.net.mu.Lock()
		c.net.silent[3] = true // SIGSTOP: no PeerDown, no answers
		c.net.mu.Unlock()
		bound := cfg.DetectionBound(0, false)
		waitFor(t, events, Suspected, 3, bound)
		if took := time.Since(start); took < cfg.SuspicionTimeout-cfg.HeartbeatInterval {
			t.Errorf("suspected after %v, sooner than the suspicion timeout %v allows", took, cfg.SuspicionTimeout)
		}
		waitFor(t, events, Confirmed, 3, bound+cfg.Tick-time.Since(start))
		t.Logf("silent failure confirmed after %v (bound %v)", time.Since(start), bound)
	})
}

// In steady state every detector sends about 2R messages per interval and
// raises nothing.
func TestDetectorSteadyState(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := LocalConfig()
		c := newCluster(t, cfg, 8)
		defer c.close()
		events := c.dets[0].Subscribe()
		const intervals = 100
		advance(intervals * cfg.HeartbeatInterval)
		want := float64(2 * cfg.Successors * intervals)
		for i, d := range c.dets {
			s := d.Stats()
			if f := float64(s.Sent); f < 0.95*want || f > 1.05*want {
				t.Errorf("detector %d sent %d messages in %d intervals, want about %.0f", i, s.Sent, intervals, want)
			}
			if s.SendErrors+s.SendDrops+s.BadMessages+s.Suspicions+s.Stalls+s.LateAcks != 0 || s.LocalHealth != 0 {
				t.Errorf("detector %d: %+v", i, s)
			}
		}
		select {
		case ev := <-events:
			t.Errorf("event in steady state: %v", ev)
		default:
		}
	})
}

// The tick loop measures its own lateness on the real clock: a process
// whose clock jumped (it was stopped or descheduled) reports a stall to
// its Core, raises its local health score and accuses nobody.
func TestDetectorReportsStall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := LocalConfig()
		c := newCluster(t, cfg, 8)
		defer c.close()
		events := c.dets[0].Subscribe()
		advance(20 * cfg.HeartbeatInterval)
		d := c.dets[0]
		d.mu.Lock()
		jump := 50 * cfg.SuspicionTimeout
		d.clock = func() time.Time { return time.Now().Add(jump) }
		d.mu.Unlock()
		advance(cfg.Tick)
		s := d.Stats()
		if s.Stalls != 1 || s.LocalHealth < 1 {
			t.Fatalf("after a clock jump of %v: %+v, want one stall and a raised score", jump, s)
		}
		advance(20 * cfg.HeartbeatInterval)
		if s := d.Stats(); s.Stalls != 1 || s.Suspicions != 0 {
			t.Errorf("after the stall: %+v, want no more stalls and no suspicion", s)
		}
		select {
		case ev := <-events:
			t.Errorf("event after a stall: %v", ev)
		default:
		}
	})
}

func TestMissedTicks(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		gap  time.Duration
		want int
	}{{0, 0}, {-ms, 0}, {10 * ms, 0}, {19 * ms, 0}, {20 * ms, 1}, {1005 * ms, 99}, {1 << 62, 1 << 30}} {
		if got := missedTicks(tc.gap, 10*ms); got != tc.want {
			t.Errorf("missedTicks(%v, 10ms) = %d, want %d", tc.gap, got, tc.want)
		}
	}
}

// A subscriber that never reads loses events, counted, and the detector
// carries on.
func TestDetectorSlowSubscriber(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := LocalConfig()
		cfg.EventBuffer = 1
		c := newCluster(t, cfg, 8)
		defer c.close()
		_ = c.dets[2].Subscribe() // never read
		advance(5 * cfg.HeartbeatInterval)
		for _, p := range ps(3, 4) {
			c.kill(p)
			advance(cfg.DetectionBound(0, true) + cfg.Tick)
			if st, _ := c.dets[2].Status(p); st != StatusConfirmed {
				t.Fatalf("%d is %v at 2, want confirmed", p, st)
			}
		}
		// Four events (suspected and confirmed, twice) into a buffer of one.
		if s := c.dets[2].Stats(); s.DroppedEvents != 3 {
			t.Errorf("dropped %d events for the slow subscriber, want 3", s.DroppedEvents)
		}
	})
}

// A destination whose sends hang never stalls the tick loop: other work
// goes on, the hung sends time out and the queue overflow is counted.
func TestDetectorSendsNeverBlock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := LocalConfig()
		cfg.SendQueue = 1
		c := newCluster(t, cfg, 8)
		defer c.close()
		events := c.dets[2].Subscribe()
		advance(5 * cfg.HeartbeatInterval)
		c.net.mu.Lock()
		c.net.block[3] = true
		c.net.silent[3] = true
		c.net.mu.Unlock()
		start := time.Now()
		waitFor(t, events, Confirmed, 3, cfg.DetectionBound(0, false)+cfg.Tick)
		t.Logf("confirmed after %v with hung sends", time.Since(start))
		advance(20 * cfg.SendTimeout)
		s := c.dets[2].Stats()
		if s.SendErrors == 0 || s.SendDrops == 0 {
			t.Errorf("stats %+v: want send timeouts and queue drops counted", s)
		}
	})
}

func TestDetectorMembersAndClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := LocalConfig()
		c := newCluster(t, cfg, 5)
		defer c.close()
		d := c.dets[0]
		events := d.Subscribe()
		advance(5 * cfg.HeartbeatInterval)
		c.kill(1)
		waitFor(t, events, Confirmed, 1, time.Second)
		if err := d.SetMembers(ps(0, 2, 3, 4)); err != nil {
			t.Fatal(err)
		}
		if s := d.Suspects(); len(s) != 0 {
			t.Errorf("Suspects after removing 1: %v", s)
		}
		if err := d.SetMembers(ps(0, 2, 2)); !errors.Is(err, ErrBadMembers) {
			t.Errorf("SetMembers(duplicate) = %v", err)
		}
		if err := d.Hint(2); err != nil {
			t.Error(err)
		}
		if err := d.Deliver(2, []byte("garbage")); !errors.Is(err, ErrBadMessage) {
			t.Errorf("Deliver(garbage) = %v", err)
		}
		if s := d.Stats(); s.BadMessages != 1 {
			t.Errorf("BadMessages = %d", s.BadMessages)
		}
		advance(5 * cfg.HeartbeatInterval)
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		if err := d.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		for ev := range events {
			_ = ev // drain: the channel must be closed
		}
		if _, ok := <-d.Subscribe(); ok {
			t.Error("Subscribe after Close returned an open channel")
		}
		b, _ := AppendMessage(nil, Message{Kind: KindPing, Seq: 1, Target: 0})
		for name, err := range map[string]error{
			"Deliver":    d.Deliver(2, b),
			"PeerDown":   d.PeerDown(2),
			"Hint":       d.Hint(2),
			"SetMembers": d.SetMembers(ps(0, 2)),
		} {
			if !errors.Is(err, ErrClosed) {
				t.Errorf("%s after Close = %v, want ErrClosed", name, err)
			}
		}
	})
}

func TestNewRejects(t *testing.T) {
	cfg := LocalConfig()
	cfg.SuspicionTimeout = cfg.HeartbeatInterval
	if _, err := New(cfg, 0, procRange(3), memSender{}, nil); !errors.Is(err, ErrConfig) {
		t.Errorf("New(bad config) = %v", err)
	}
	if _, err := New(LocalConfig(), 0, ps(0, 1, 1), memSender{}, nil); !errors.Is(err, ErrBadMembers) {
		t.Errorf("New(duplicate members) = %v", err)
	}
}
