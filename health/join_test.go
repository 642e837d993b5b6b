package health

import (
	"log/slog"
	"slices"
	"testing"
	"testing/synctest"

	"github.com/gaspigo/gaspigo/transport"
)

// Rule: nothing in the detector assumes a fixed process count. A view
// that adds processes that joined the job after it formed (ids above the
// first ones, with gaps: ids that never joined) makes them ring members
// in id order: the processes before them in the ring start monitoring
// them (their heartbeats go out at once), they monitor their own
// successors, wrapping round to the first ids, and a later joiner takes
// its place between them.
func TestSetMembersAddsJoiners(t *testing.T) {
	cfg := scriptConfig() // Successors 2
	for _, tc := range []struct {
		self     transport.Proc
		members  []transport.Proc
		monitors []transport.Proc
	}{
		{3, ps(0, 1, 2, 3), ps(0, 1)},
		{3, ps(0, 1, 2, 3, 6, 9), ps(6, 9)},
		{6, ps(0, 1, 2, 3, 6, 9), ps(9, 0)},
		{9, ps(0, 1, 2, 3, 6, 9), ps(0, 1)},
		{3, ps(0, 1, 2, 3, 6, 7, 9), ps(6, 7)},
		{6, ps(0, 1, 2, 3, 6, 7, 9), ps(7, 9)},
	} {
		c, err := NewCore(cfg, tc.self, ps(0, 1, 2, 3))
		if err != nil {
			t.Fatal(err)
		}
		c.Tick() // pings the first successors; the next are due IntervalTicks on
		c.Ready()
		before := c.Monitored()
		if err := c.SetMembers(tc.members); err != nil {
			t.Fatal(err)
		}
		got := slices.Sorted(slices.Values(c.Monitored()))
		if want := slices.Sorted(slices.Values(tc.monitors)); !slices.Equal(got, want) {
			t.Errorf("self %d, members %v: monitors %v, want %v", tc.self, tc.members, got, want)
		}
		c.Tick()
		out, _ := c.Ready()
		var pinged, fresh []transport.Proc
		for _, o := range sentOf(out, KindPing) {
			pinged = append(pinged, o.To)
		}
		for _, p := range tc.monitors {
			if !slices.Contains(before, p) {
				fresh = append(fresh, p)
			}
		}
		slices.Sort(pinged)
		slices.Sort(fresh)
		if !slices.Equal(pinged, fresh) {
			t.Errorf("self %d, members %v: pinged %v on the next tick, want the new successors %v at once", tc.self, tc.members, pinged, fresh)
		}
		for _, gap := range ps(4, 5, 8) {
			if c.IsMember(gap) {
				t.Errorf("self %d: id %d, which never joined, is a member", tc.self, gap)
			}
		}
	}
}

// Rule: a running Detector given a view with joiners watches them: a
// joiner that goes silent is confirmed failed by the process before it in
// the ring, and the joiners' own detectors watch the first processes.
func TestDetectorWatchesJoiners(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := LocalConfig()
		c := newCluster(t, cfg, 4)
		defer c.close()
		advance(5 * cfg.HeartbeatInterval)
		members := ps(0, 1, 2, 3, 6, 9)
		logger := slog.New(slog.NewTextHandler(c.log, nil))
		var joiners []*Detector
		for _, p := range ps(6, 9) {
			d, err := New(cfg, p, members, memSender{net: c.net, self: p}, logger)
			if err != nil {
				t.Fatal(err)
			}
			c.net.mu.Lock()
			c.net.dets[p] = d
			c.net.mu.Unlock()
			joiners = append(joiners, d)
		}
		defer func() {
			for _, d := range joiners {
				d.Close()
			}
		}()
		for _, d := range c.dets {
			if err := d.SetMembers(members); err != nil {
				t.Fatal(err)
			}
		}
		events := c.dets[3].Subscribe()
		advance(10 * cfg.HeartbeatInterval)
		for _, d := range append(slices.Clone(c.dets), joiners...) {
			if s := d.Suspects(); len(s) != 0 {
				t.Fatalf("suspects %v with everyone healthy", s)
			}
		}
		c.net.mu.Lock()
		c.net.silent[9] = true
		c.net.mu.Unlock()
		waitFor(t, events, Confirmed, 9, cfg.DetectionBound(0, false)+10*cfg.Tick)
	})
}
