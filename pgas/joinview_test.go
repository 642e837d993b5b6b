package pgas

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/gaspigo/gaspigo/transport"
	"github.com/gaspigo/gaspigo/transport/mem"
)

// Rule (docs/design.md §3, processes that join): while views that add
// joiners are applied, the process space only grows, and has never runs
// ahead of the stored view: code that saw has(p), a frame's sender
// included, indexes every view it loads afterwards at p. Frames from a
// joiner this process has not learnt yet wait for the view that lists it
// (knownSender), and are then handled like any.
//
// One goroutine applies a few thousand views, each adding a joiner (every
// fifth id skipped: a process that got an id and never joined); readers,
// as transport readers would, hand the runtime heartbeat frames from each
// joiner, most of them before the view that lists it arrives; a checker
// loads the count behind has and then the view, in a tight loop.
func TestJoinViewsNeverBehindHas(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const base, rounds, readers = 2, 2000, 3
		rts, nw := newJob(t, base, 1, nil)
		rt := rts[0]
		// The joiners' endpoints, so that the mem transport takes their
		// addresses (learnJoiners' AddPeer).
		var ids []transport.Proc
		for len(ids) < rounds {
			ep, err := nw.AddEndpoint()
			if err != nil {
				t.Fatal(err)
			}
			if ep.Self()%5 != 0 {
				ids = append(ids, ep.Self())
			}
		}
		var stop atomic.Bool
		var checker, wg sync.WaitGroup
		checker.Go(func() {
			last := 0
			for !stop.Load() {
				n := rt.peers.n.Load()
				v := rt.view.Load()
				if int64(v.size()) < n {
					t.Errorf("has covers %d processes, but the view loaded after it has %d", n, v.size())
					return
				}
				if v.size() < last {
					t.Errorf("the view shrank from %d to %d processes", last, v.size())
					return
				}
				last = v.size()
				runtime.Gosched() // two cores, and the applier must run
			}
		})
		for k := range readers {
			wg.Go(func() {
				for i := k; i < len(ids); i += readers {
					h := transport.Header{Type: transport.FrameHeartbeat, Epoch: uint32(i)}
					if err := rt.handleFrame(ids[i], &h, transport.BytesPayload(nil)); err != nil {
						t.Errorf("heartbeat from joiner %d: %v", ids[i], err)
						return
					}
					v := rt.view.Load()
					if !v.isProc(ids[i]) || v.isFailed(ids[i]) || v.rankIn(ids[i]) >= 0 {
						t.Errorf("joiner %d after its frame: a process %v, failed %v, rank %d; want an idle spare",
							ids[i], v.isProc(ids[i]), v.isFailed(ids[i]), v.rankIn(ids[i]))
						return
					}
				}
			})
		}
		ranks := []transport.Proc{0, 1}
		var joined []Joiner
		for i, p := range ids {
			// Each view gets the prefix so far: appends land beyond what
			// the views before see, so they can share the array.
			joined = append(joined, Joiner{Proc: p, Addr: nw.Endpoint(p).Addr(), Host: "joined"})
			rt.applyView(View{Epoch: uint64(i + 1), Ranks: ranks, Joined: joined[:len(joined):len(joined)]})
		}
		wg.Wait()
		stop.Store(true)
		checker.Wait()

		v := rt.view.Load()
		if want := int(ids[len(ids)-1]) + 1; v.size() != want {
			t.Fatalf("the last view covers %d process ids, want %d", v.size(), want)
		}
		live := v.liveProcs()
		if len(live) != base+rounds || len(v.spares) != rounds {
			t.Fatalf("%d live processes and %d spares, want %d and %d: ids that never joined are neither", len(live), len(v.spares), base+rounds, rounds)
		}
		for p := transport.Proc(base); int(p) < v.size(); p += 5 {
			if p%5 == 0 && (v.isProc(p) || slices.Contains(live, p) || slices.Contains(v.spares, p) || v.isFailed(p)) {
				t.Fatalf("id %d never joined, but the view counts it", p)
			}
		}
		if rt.Stats().FramesRejected != 0 {
			t.Fatalf("%d frames rejected", rt.Stats().FramesRejected)
		}
	})
}

// Rule: a view's process count is max(NumProcs, highest joined id + 1,
// every rank's holder + 1) and never shrinks, even when a later view
// lists fewer joiners; a joiner failed in its first view is cut off like
// any process; a process id never listed is not declared failed.
func TestJoinViewSizes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rts, nw := newJob(t, 2, 1, nil)
		rt := rts[0]
		for range 8 {
			if _, err := nw.AddEndpoint(); err != nil {
				t.Fatal(err)
			}
		}
		j := func(ps ...transport.Proc) []Joiner {
			var out []Joiner
			for _, p := range ps {
				out = append(out, Joiner{Proc: p, Addr: nw.Endpoint(p).Addr()})
			}
			return out
		}
		for _, step := range []struct {
			v    View
			size int
		}{
			{View{Epoch: 1, Ranks: []transport.Proc{0, 1}, Joined: j(4)}, 5},
			{View{Epoch: 2, Ranks: []transport.Proc{0, 1}, Joined: j(4, 9)}, 10},
			{View{Epoch: 3, Ranks: []transport.Proc{0, 1}, Joined: j(4)}, 10}, // lists fewer: no shrink
			// Entries that cannot be joiners are left out (and logged):
			// a first process's id, an id beyond any job's.
			{View{Epoch: 4, Ranks: []transport.Proc{0, 1}, Joined: append(j(4, 9), Joiner{Proc: 1}, Joiner{Proc: 1 << 30})}, 10},
			{View{Epoch: 5, Ranks: []transport.Proc{0, 1}, Joined: j(4, 7, 9), Failed: []transport.Proc{7}}, 10},
			{View{Epoch: 6, Ranks: []transport.Proc{0, 4}, Joined: j(4, 7, 9), Failed: []transport.Proc{1, 7}}, 10},
		} {
			rt.applyView(step.v)
			v := rt.view.Load()
			if v.size() != step.size || v.epoch != uint32(step.v.Epoch) {
				t.Fatalf("epoch %d: %d process ids, want %d", v.epoch, v.size(), step.size)
			}
			if rt.peers.n.Load() != int64(step.size) {
				t.Fatalf("epoch %d: has covers %d, want %d", v.epoch, rt.peers.n.Load(), step.size)
			}
		}
		v := rt.view.Load()
		if got := v.liveProcs(); !slices.Equal(got, []transport.Proc{0, 4, 9}) {
			t.Fatalf("live processes %v, want [0 4 9]", got)
		}
		if !slices.Equal(v.spares, []transport.Proc{9}) || v.rankIn(4) != 1 {
			t.Fatalf("spares %v, rank of joiner 4 %d; want [9] and 1", v.spares, v.rankIn(4))
		}
		if !rt.peers.isDown(7) || rt.peers.isDown(8) || rt.peers.lookup(8) != nil {
			t.Fatalf("joiner 7 (failed) down %v; id 8 (never joined) down %v", rt.peers.isDown(7), rt.peers.isDown(8))
		}
		if rt.Rank() != 0 || rt.Size() != 2 {
			t.Fatalf("rank %d of %d", rt.Rank(), rt.Size())
		}
	})
}

// Rule: collectives place every process beyond the host labels (one that
// joined the job) on a host of its own, the same way on every process;
// the labelled ones by label; without labels, everyone on one host.
func TestPlaceJoinersOnHostsOfTheirOwn(t *testing.T) {
	hosts := []string{"a", "a", "b", "b"}
	joined := []Joiner{{Proc: 5, Host: "a"}, {Proc: 6, Host: "a"}}
	v := newView(3, []transport.Proc{0, 5, 2, 6, 1}, 4, 7, joined, nil)
	topo := placeOnHosts([]int{0, 1, 2, 3, 4}, v, hosts)
	// Members 0 and 4 (procs 0 and 1) on a, member 1 (joiner 5) alone,
	// member 2 (proc 2) on b, member 3 (joiner 6) alone.
	want := [][]int{{0, 4}, {1}, {2}, {3}}
	if len(topo.hosts) != len(want) {
		t.Fatalf("hosts %v, want %v", topo.hosts, want)
	}
	for h := range want {
		if !slices.Equal(topo.hosts[h], want[h]) {
			t.Fatalf("hosts %v, want %v", topo.hosts, want)
		}
	}
	if !topo.twoLevel() {
		t.Fatalf("a host with two members among five hosts is two-level")
	}
	if one := placeOnHosts([]int{0, 1, 2, 3, 4}, v, nil); len(one.hosts) != 1 {
		t.Fatalf("without labels: %d hosts, want 1", len(one.hosts))
	}
	// Two joiners alone: two hosts, so no collective area (design §9.3.1).
	if two := placeOnHosts([]int{1, 3}, v, hosts); len(two.hosts) != 2 {
		t.Fatalf("two joiners: %d hosts, want 2", len(two.hosts))
	}
}

// Rule: a joiner's own runtime starts with its id inside its tables and
// refuses to start when its membership does not list it.
func TestJoinerConfig(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw, err := mem.New(2, mem.Config{Seed: 1})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nw.Close() })
		ep, err := nw.AddEndpoint()
		if err != nil {
			t.Fatal(err)
		}
		cfg := LocalConfig()
		cfg.Proc, cfg.NumProcs, cfg.NumRanks, cfg.Transport = ep.Self(), 2, 2, ep
		if err := cfg.Validate(); err == nil {
			t.Fatal("a joiner without a membership was accepted")
		}
		cfg.Membership = &fixedMembership{v: View{Epoch: 1, Ranks: []transport.Proc{0, 1}}}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("a joiner with a membership: %v", err)
		}
		if _, err := Init(context.Background(), cfg); err == nil {
			t.Fatal("Init of a joiner its membership does not list succeeded")
		}
		// A membership may hand a joiner a rank at once (one that waited
		// for a replacement, or whose promotion committed before Init):
		// Init returns without waiting as a spare and logs the promotion.
		ep, err = nw.AddEndpoint()
		if err != nil {
			t.Fatal(err)
		}
		var logs lockedLog
		cfg.Proc, cfg.Transport = ep.Self(), ep
		cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		cfg.Membership = &fixedMembership{v: View{Epoch: 2, Ranks: []transport.Proc{0, ep.Self()}, Failed: []transport.Proc{1},
			Joined: []Joiner{{Proc: ep.Self(), Addr: ep.Addr()}}}}
		rt, err := Init(context.Background(), cfg)
		if err != nil {
			t.Fatalf("Init of a joiner that holds a rank in its first view: %v", err)
		}
		defer rt.Close()
		if rt.Rank() != 1 || !rt.StartedAsSpare() || rt.Epoch() != 2 || rt.Usable() != nil {
			t.Fatalf("joiner: rank %d, epoch %d, usable %v; want rank 1 in epoch 2", rt.Rank(), rt.Epoch(), rt.Usable())
		}
		if want := fmt.Sprintf(`msg="spare promoted" proc=%d rank=1 epoch=2`, ep.Self()); !strings.Contains(logs.String(), want) {
			t.Fatalf("the joiner promoted before Init did not log %q:\n%s", want, logs.String())
		}
	})
}

// fixedMembership is a membership whose view never changes.
type fixedMembership struct{ v View }

func (m *fixedMembership) Current() View      { return m.v }
func (m *fixedMembership) Watch() <-chan View { return make(chan View) }
func (m *fixedMembership) ReportFailure(context.Context, transport.Proc, uint64) error {
	return nil
}

// plainTransport hides every capability of a transport, AddPeer included.
type plainTransport struct{ transport.Transport }

// Rule: over a transport that cannot learn peers, views with joiners are
// applied all the same (the joiners stay unreachable, for the detector to
// report), and the error is logged once, not per joiner or view.
func TestJoinWithoutPeerAdder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logs lockedLog
		rts, nw := newJob(t, 2, 1, func(c *Config) {
			c.Transport = plainTransport{c.Transport}
			c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		})
		rt := rts[0]
		var joined []Joiner
		for i := range 3 {
			ep, err := nw.AddEndpoint()
			if err != nil {
				t.Fatal(err)
			}
			joined = append(joined, Joiner{Proc: ep.Self(), Addr: ep.Addr()})
			rt.applyView(View{Epoch: uint64(i + 1), Ranks: []transport.Proc{0, 1}, Joined: slices.Clone(joined)})
		}
		if v := rt.view.Load(); v.size() != 5 || len(v.spares) != 3 {
			t.Fatalf("%d process ids and spares %v, want 5 and the three joiners", v.size(), v.spares)
		}
		if n := strings.Count(logs.String(), "cannot learn new peers"); n != 1 {
			t.Fatalf("the missing AddPeer was logged %d times, want once:\n%s", n, logs.String())
		}
		h := transport.Header{Type: transport.FrameControl}
		if err := rt.send(context.Background(), 4, &h, nil); !errors.Is(err, transport.ErrUnknownPeer) {
			t.Fatalf("a send to an unreachable joiner = %v, want ErrUnknownPeer", err)
		}
	})
}

// lockedLog is a log sink safe for concurrent writers.
type lockedLog struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
