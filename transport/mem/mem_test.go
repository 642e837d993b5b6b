package mem_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gaspigo/gaspigo/transport"
	"github.com/gaspigo/gaspigo/transport/mem"
	"github.com/gaspigo/gaspigo/transport/transporttest"
)

// newNet builds a network closed at cleanup that logs its seed if the test
// fails, so the run can be replayed.
func newNet(t *testing.T, n int, cfg mem.Config) *mem.Network {
	t.Helper()
	nw, err := mem.New(n, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = nw.Close()
		if t.Failed() {
			t.Logf("fault hub seed: %d (replay with mem.Config{Seed: %d})", nw.Seed(), nw.Seed())
		}
	})
	return nw
}

// startAll starts every endpoint with a Recorder.
func startAll(t *testing.T, nw *mem.Network) []*transporttest.Recorder {
	t.Helper()
	recs := make([]*transporttest.Recorder, nw.Size())
	for i := range recs {
		recs[i] = transporttest.NewRecorder()
		if err := nw.Endpoint(transport.Proc(i)).Start(recs[i]); err != nil {
			t.Fatal(err)
		}
	}
	return recs
}

func send(t *testing.T, nw *mem.Network, from, to transport.Proc, seq uint64) {
	t.Helper()
	h := transport.Header{Type: transport.FramePassive, Seq: seq}
	if err := nw.Endpoint(from).Send(t.Context(), to, &h, []byte(fmt.Sprintf("%d->%d #%d", from, to, seq))); err != nil {
		t.Fatalf("Send %d->%d seq %d: %v", from, to, seq, err)
	}
}

func trySend(nw *mem.Network, from, to transport.Proc, seq uint64) error {
	h := transport.Header{Type: transport.FramePassive, Seq: seq}
	return nw.Endpoint(from).Send(context.Background(), to, &h, nil)
}

func seqs(frames []transporttest.Frame) []uint64 {
	out := make([]uint64, len(frames))
	for i, f := range frames {
		out[i] = f.Header.Seq
	}
	return out
}

func downPeers(r *transporttest.Recorder) []transport.Proc {
	var out []transport.Proc
	for _, d := range r.Downs() {
		out = append(out, d.Peer)
	}
	return out
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg mem.Config
		ok  bool
	}{
		{mem.DefaultConfig(), true},
		{mem.LocalConfig(), true},
		{mem.Config{}, true}, // zero QueueLen means the default
		{mem.Config{QueueLen: -1}, false},
		{mem.Config{QueueLen: 1 << 20}, false},
	} {
		err := tc.cfg.Validate()
		if (err == nil) != tc.ok {
			t.Errorf("Validate(%+v) = %v, want ok=%v", tc.cfg, err, tc.ok)
		}
		if err != nil && !errors.Is(err, mem.ErrConfig) {
			t.Errorf("Validate(%+v) = %v, want ErrConfig", tc.cfg, err)
		}
	}
	for _, n := range []int{0, -3, 1 << 25} {
		if _, err := mem.New(n, mem.DefaultConfig()); !errors.Is(err, mem.ErrConfig) {
			t.Errorf("New(%d) = %v, want ErrConfig", n, err)
		}
	}
}

func TestBadFaultArguments(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := newNet(t, 3, mem.LocalConfig())
		checks := []struct {
			name string
			err  error
			want error
		}{
			{"Kill(3)", nw.Kill(3), mem.ErrBadProc},
			{"Kill(Any)", nw.Kill(mem.Any), mem.ErrBadProc},
			{"Partition out of range", nw.Partition([]transport.Proc{0}, []transport.Proc{7}), mem.ErrBadProc},
			{"Partition twice", nw.Partition([]transport.Proc{0, 1}, []transport.Proc{1}), mem.ErrBadProc},
			{"Drop p=1.5", nw.Drop(0, 1, 1.5), mem.ErrBadFault},
			{"Drop p=NaN", nw.Drop(0, 1, math.NaN()), mem.ErrBadFault},
			{"Drop p<0", nw.Drop(0, 1, -0.1), mem.ErrBadFault},
			{"Drop bad proc", nw.Drop(9, 1, 0.5), mem.ErrBadProc},
			{"Delay negative", nw.Delay(0, 1, -time.Second, 0), mem.ErrBadFault},
			{"Delay negative jitter", nw.Delay(mem.Any, mem.Any, 0, -1), mem.ErrBadFault},
			{"Delay bad proc", nw.Delay(0, 5, time.Second, 0), mem.ErrBadProc},
		}
		for _, c := range checks {
			if !errors.Is(c.err, c.want) {
				t.Errorf("%s: got %v, want %v", c.name, c.err, c.want)
			}
		}
		// Wildcards and the same group named twice are fine.
		if err := nw.Drop(mem.Any, mem.Any, 0); err != nil {
			t.Errorf("Drop(Any, Any, 0): %v", err)
		}
		if err := nw.Partition([]transport.Proc{0, 0}); err != nil {
			t.Errorf("Partition with a proc repeated in one group: %v", err)
		}
		_ = nw.Close()
		if err := nw.Kill(0); !errors.Is(err, mem.ErrNetworkClosed) {
			t.Errorf("Kill after Close: %v, want ErrNetworkClosed", err)
		}
		if err := nw.Partition(); !errors.Is(err, mem.ErrNetworkClosed) {
			t.Errorf("Partition after Close: %v, want ErrNetworkClosed", err)
		}
	})
}

func TestStartAndSendErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := newNet(t, 2, mem.LocalConfig())
		ep := nw.Endpoint(0)
		if err := trySend(nw, 0, 1, 0); !errors.Is(err, mem.ErrNotStarted) {
			t.Errorf("Send before Start: %v, want ErrNotStarted", err)
		}
		if err := ep.Start(nil); !errors.Is(err, mem.ErrNilHandler) {
			t.Errorf("Start(nil): %v, want ErrNilHandler", err)
		}
		if err := ep.Start(transporttest.NewRecorder()); err != nil {
			t.Fatal(err)
		}
		if err := ep.Start(transporttest.NewRecorder()); !errors.Is(err, mem.ErrStarted) {
			t.Errorf("second Start: %v, want ErrStarted", err)
		}
		if err := nw.Kill(1); err != nil {
			t.Fatal(err)
		}
		if err := nw.Endpoint(1).Start(transporttest.NewRecorder()); !errors.Is(err, transport.ErrClosed) {
			t.Errorf("Start after Kill: %v, want ErrClosed", err)
		}
		if nw.Alive(1) || !nw.Alive(0) || nw.Alive(7) {
			t.Errorf("Alive: got %v %v %v, want false true false", nw.Alive(1), nw.Alive(0), nw.Alive(7))
		}
	})
}

// Kill: the victim's links fail, connected peers get PeerDown with
// ErrKilled, frames in flight either way are lost, the victim's Sends
// return ErrClosed, and a peer that never talked to it learns on its first
// Send.
func TestKill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := newNet(t, 4, mem.LocalConfig())
		recs := make([]*transporttest.Recorder, 4)
		release := make(chan struct{})
		var once sync.Once
		for i := range recs {
			recs[i] = transporttest.NewRecorder()
			var h transport.Handler = recs[i]
			if i == 2 { // the victim stalls on its first frame
				h = stallFirst{recs[i], release, &once}
			}
			if err := nw.Endpoint(transport.Proc(i)).Start(h); err != nil {
				t.Fatal(err)
			}
		}
		// 2->0 frames are delayed, so they are in flight when 2 dies.
		if err := nw.Delay(2, 0, time.Second, 0); err != nil {
			t.Fatal(err)
		}
		send(t, nw, 0, 1, 0)
		send(t, nw, 1, 2, 0) // 2 stalls in HandleFrame on this one
		send(t, nw, 1, 2, 1) // queued behind it: lost
		send(t, nw, 2, 0, 0) // delayed: lost
		synctest.Wait()
		if err := nw.Kill(2); err != nil {
			t.Fatal(err)
		}
		close(release)
		synctest.Wait()
		for _, p := range []transport.Proc{0, 1} {
			d := recs[p].Downs()
			if len(d) != 1 || d[0].Peer != 2 {
				t.Fatalf("proc %d downs = %v, want one PeerDown(2)", p, d)
			}
			if !errors.Is(d[0].Err, mem.ErrKilled) || !errors.Is(d[0].Err, transport.ErrPeerDown) {
				t.Errorf("proc %d: PeerDown error %v does not wrap ErrKilled and ErrPeerDown", p, d[0].Err)
			}
			var pe *mem.PeerError
			if !errors.As(d[0].Err, &pe) || pe.Peer != 2 {
				t.Errorf("proc %d: PeerDown error %v is not a *PeerError for proc 2", p, d[0].Err)
			}
		}
		if got := recs[3].Downs(); len(got) != 0 {
			t.Errorf("proc 3 never talked to 2 but got %v", got)
		}
		time.Sleep(5 * time.Second) // fake time: well past the delay
		if f := recs[0].FramesFrom(2); len(f) != 0 {
			t.Errorf("proc 0 got %d frames from killed proc 2, want the delayed frame lost", len(f))
		}
		if f := recs[2].Frames(); len(f) != 1 {
			t.Errorf("killed proc 2 handled %d frames, want only the one in progress", len(f))
		}
		if err := trySend(nw, 2, 0, 9); !errors.Is(err, transport.ErrClosed) {
			t.Errorf("Send from killed proc: %v, want ErrClosed", err)
		}
		if err := trySend(nw, 0, 2, 9); !errors.Is(err, transport.ErrPeerDown) || !errors.Is(err, mem.ErrKilled) {
			t.Errorf("Send to killed proc: %v, want ErrPeerDown with ErrKilled", err)
		}
		// Proc 3 learns on its first Send, once.
		for range 2 {
			if err := trySend(nw, 3, 2, 0); !errors.Is(err, transport.ErrPeerDown) {
				t.Errorf("proc 3 Send to killed proc: %v, want ErrPeerDown", err)
			}
		}
		synctest.Wait()
		if got := downPeers(recs[3]); !slices.Equal(got, []transport.Proc{2}) {
			t.Errorf("proc 3 downs = %v, want [2]", got)
		}
		// Survivors are unaffected.
		send(t, nw, 1, 0, 1)
		synctest.Wait()
		if got := seqs(recs[0].FramesFrom(1)); !slices.Equal(got, []uint64{1}) {
			t.Errorf("proc 0 got %v from proc 1, want [1]", got)
		}
		if err := nw.Kill(2); err != nil {
			t.Errorf("second Kill: %v", err)
		}
	})
}

type stallFirst struct {
	*transporttest.Recorder
	release <-chan struct{}
	once    *sync.Once
}

func (s stallFirst) HandleFrame(from transport.Proc, h *transport.Header, p transport.Payload) error {
	err := s.Recorder.HandleFrame(from, h, p)
	s.once.Do(func() { <-s.release })
	return err
}

// Close behaves like Kill for the peers, with ErrPeerClosed as the cause.
func TestCloseEndpoint(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := newNet(t, 3, mem.LocalConfig())
		recs := startAll(t, nw)
		send(t, nw, 0, 1, 0)
		send(t, nw, 2, 1, 0)
		synctest.Wait()
		if err := nw.Endpoint(1).Close(); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		for _, p := range []transport.Proc{0, 2} {
			d := recs[p].Downs()
			if len(d) != 1 || d[0].Peer != 1 || !errors.Is(d[0].Err, mem.ErrPeerClosed) {
				t.Errorf("proc %d downs = %v, want one PeerDown(1) wrapping ErrPeerClosed", p, d)
			}
		}
		if err := trySend(nw, 1, 0, 1); !errors.Is(err, transport.ErrClosed) {
			t.Errorf("Send after Close: %v", err)
		}
	})
}

// A peer that had a connection but was not started when it broke is told at
// Start; frames sent to an endpoint before its Start wait for it.
func TestStartLate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := newNet(t, 3, mem.LocalConfig())
		r0 := transporttest.NewRecorder()
		if err := nw.Endpoint(0).Start(r0); err != nil {
			t.Fatal(err)
		}
		if err := nw.Endpoint(2).Start(transporttest.NewRecorder()); err != nil {
			t.Fatal(err)
		}
		send(t, nw, 0, 1, 0)
		send(t, nw, 0, 1, 1)
		send(t, nw, 2, 1, 0)
		if err := nw.Kill(2); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		r1 := transporttest.NewRecorder()
		if err := nw.Endpoint(1).Start(r1); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if got := seqs(r1.FramesFrom(0)); !slices.Equal(got, []uint64{0, 1}) {
			t.Errorf("frames from 0 after late Start: %v, want [0 1]", got)
		}
		if got := r1.FramesFrom(2); len(got) != 0 {
			t.Errorf("got %d frames from killed proc 2, want them lost", len(got))
		}
		if got := downPeers(r1); !slices.Equal(got, []transport.Proc{2}) {
			t.Errorf("late starter's downs = %v, want [2]", got)
		}
	})
}

// Partition holds frames between groups without any PeerDown; Sends across
// it fill the queue and then block until ctx; Heal delivers everything in
// order. Unlisted procs form a group of their own.
func TestPartitionHeal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg := mem.LocalConfig() // QueueLen 4
		nw := newNet(t, 5, cfg)
		recs := startAll(t, nw)
		if err := nw.Partition([]transport.Proc{0, 1}, []transport.Proc{2, 3}); err != nil {
			t.Fatal(err)
		}
		send(t, nw, 0, 1, 0) // same group
		send(t, nw, 2, 3, 0) // same group
		send(t, nw, 4, 4, 0) // the unlisted group {4}, to itself
		// Across: the queue holds 4 and the delivery goroutine holds one more.
		accepted := 0
		for seq := uint64(0); seq < 20; seq++ {
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			h := transport.Header{Type: transport.FramePassive, Seq: seq}
			err := nw.Endpoint(0).Send(ctx, 2, &h, nil)
			cancel()
			if err != nil {
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("Send across partition: %v, want DeadlineExceeded once the queue is full", err)
				}
				break
			}
			accepted++
		}
		if accepted != cfg.QueueLen+1 {
			t.Errorf("Sends accepted across the partition: %d, want QueueLen+1 = %d", accepted, cfg.QueueLen+1)
		}
		send(t, nw, 4, 0, 0) // 4 is cut off from 0 too
		synctest.Wait()
		if len(recs[1].Frames()) != 1 || len(recs[3].Frames()) != 1 || len(recs[4].Frames()) != 1 {
			t.Errorf("frames inside groups not delivered: %d %d %d", len(recs[1].Frames()), len(recs[3].Frames()), len(recs[4].Frames()))
		}
		if n := len(recs[2].Frames()) + len(recs[0].Frames()); n != 0 {
			t.Errorf("%d frames crossed the partition", n)
		}
		for i, r := range recs {
			if d := r.Downs(); len(d) != 0 {
				t.Errorf("proc %d got PeerDown during a partition: %v", i, d)
			}
		}
		time.Sleep(time.Hour) // a partition holds for any time
		if n := len(recs[2].Frames()); n != 0 {
			t.Errorf("%d frames crossed the partition after an hour", n)
		}
		nw.Heal()
		synctest.Wait()
		want := make([]uint64, accepted)
		for i := range want {
			want[i] = uint64(i)
		}
		if got := seqs(recs[2].FramesFrom(0)); !slices.Equal(got, want) {
			t.Errorf("after Heal proc 2 got %v from proc 0, want %v", got, want)
		}
		if got := len(recs[0].FramesFrom(4)); got != 1 {
			t.Errorf("after Heal proc 0 got %d frames from proc 4, want 1", got)
		}
	})
}

// A dropped frame breaks the connection: both ends get PeerDown, both
// directions fail with ErrPeerDown, other links are unaffected.
func TestDropBreaksConnection(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := newNet(t, 3, mem.LocalConfig())
		recs := startAll(t, nw)
		send(t, nw, 0, 1, 0)
		synctest.Wait()
		if err := nw.Drop(0, 1, 1); err != nil {
			t.Fatal(err)
		}
		send(t, nw, 0, 1, 1) // dropped
		synctest.Wait()
		if got := seqs(recs[1].FramesFrom(0)); !slices.Equal(got, []uint64{0}) {
			t.Errorf("proc 1 got %v, want [0]", got)
		}
		for _, c := range []struct{ self, peer transport.Proc }{{0, 1}, {1, 0}} {
			d := recs[c.self].Downs()
			if len(d) != 1 || d[0].Peer != c.peer || !errors.Is(d[0].Err, mem.ErrDropped) {
				t.Errorf("proc %d downs = %v, want one PeerDown(%d) wrapping ErrDropped", c.self, d, c.peer)
			}
			if err := trySend(nw, c.self, c.peer, 2); !errors.Is(err, transport.ErrPeerDown) {
				t.Errorf("Send %d->%d after the drop: %v, want ErrPeerDown", c.self, c.peer, err)
			}
		}
		send(t, nw, 0, 2, 0)
		send(t, nw, 2, 1, 0)
		synctest.Wait()
		if len(recs[2].Frames()) != 1 || len(recs[1].FramesFrom(2)) != 1 {
			t.Error("links not involved in the drop stopped working")
		}
		if s := nw.Stats(); s.Dropped != 1 {
			t.Errorf("Stats.Dropped = %d, want 1", s.Dropped)
		}
	})
}

// dropRun sends 'frames' frames on every link i->j (i<j) of an n-proc
// network under Drop(Any, Any, p) and returns, per link, how many frames
// got through before the drop broke it.
func dropRun(t *testing.T, seed int64, n, frames int, p float64) map[[2]transport.Proc]int {
	t.Helper()
	var got map[[2]transport.Proc]int
	synctest.Test(t, func(t *testing.T) {
		cfg := mem.LocalConfig()
		cfg.Seed = seed
		nw := newNet(t, n, cfg)
		recs := startAll(t, nw)
		if err := nw.Drop(mem.Any, mem.Any, p); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for i := range n {
			for j := i + 1; j < n; j++ {
				wg.Go(func() {
					for seq := range uint64(frames) {
						if trySend(nw, transport.Proc(i), transport.Proc(j), seq) != nil {
							return
						}
					}
				})
			}
		}
		wg.Wait()
		synctest.Wait()
		got = make(map[[2]transport.Proc]int)
		for j := range n {
			for i := range j {
				got[[2]transport.Proc{transport.Proc(i), transport.Proc(j)}] = len(recs[j].FramesFrom(transport.Proc(i)))
			}
		}
	})
	return got
}

// Same seed, same drop decisions, whatever the goroutine schedule; another
// seed gives other decisions.
func TestDeterministicReplay(t *testing.T) {
	const n, frames, p = 8, 100, 0.03
	first := dropRun(t, 42, n, frames, p)
	again := dropRun(t, 42, n, frames, p)
	if fmt.Sprint(first) != fmt.Sprint(again) {
		t.Errorf("seed 42 gave different drops:\n%v\n%v", first, again)
	}
	broken := 0
	for _, k := range first {
		if k < frames {
			broken++
		}
	}
	if broken == 0 || broken == len(first) {
		t.Errorf("%d of %d links saw a drop at p=%v; the test needs some of each", broken, len(first), p)
	}
	other := dropRun(t, 43, n, frames, p)
	if fmt.Sprint(first) == fmt.Sprint(other) {
		t.Errorf("seeds 42 and 43 gave identical drops: %v", first)
	}
}

// Jitter is replayable too: with the same seed every frame arrives at the
// same fake time.
func TestDelayReplay(t *testing.T) {
	run := func(seed int64) []time.Duration {
		var out []time.Duration
		synctest.Test(t, func(t *testing.T) {
			cfg := mem.LocalConfig()
			cfg.Seed = seed
			nw := newNet(t, 3, cfg)
			start := time.Now()
			var mu sync.Mutex
			for i := range 3 {
				rec := transporttest.NewRecorder()
				rec.Reject = func(from transport.Proc, h *transport.Header) error {
					mu.Lock()
					out = append(out, time.Duration(from)<<40+time.Since(start))
					mu.Unlock()
					return nil
				}
				if err := nw.Endpoint(transport.Proc(i)).Start(rec); err != nil {
					t.Fatal(err)
				}
			}
			if err := nw.Delay(mem.Any, 0, time.Millisecond, 50*time.Millisecond); err != nil {
				t.Fatal(err)
			}
			for seq := range uint64(3) {
				send(t, nw, 1, 0, seq)
				send(t, nw, 2, 0, seq)
			}
			time.Sleep(time.Second)
		})
		slices.Sort(out)
		return out
	}
	a, b := run(7), run(7)
	if !slices.Equal(a, b) {
		t.Errorf("seed 7: arrival times differ between runs:\n%v\n%v", a, b)
	}
	if c := run(8); slices.Equal(a, c) {
		t.Errorf("seeds 7 and 8 gave identical arrival times %v", a)
	}
}

// Randomized delays reorder arrivals across links but never within one.
func TestDelayReordersAcrossLinksOnly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const senders, perLink = 4, 40
		cfg := mem.DefaultConfig() // queues hold every frame: the senders never block
		nw := newNet(t, senders+1, cfg)
		type arrival struct {
			from    transport.Proc
			seq     uint64
			at      time.Time
			sendIdx int
		}
		var mu sync.Mutex
		var arrivals []arrival
		rec := transporttest.NewRecorder()
		rec.Reject = func(from transport.Proc, h *transport.Header) error {
			mu.Lock()
			arrivals = append(arrivals, arrival{from: from, seq: h.Seq, at: time.Now(), sendIdx: int(h.A)})
			mu.Unlock()
			return nil
		}
		if err := nw.Endpoint(0).Start(rec); err != nil {
			t.Fatal(err)
		}
		for i := 1; i <= senders; i++ {
			if err := nw.Endpoint(transport.Proc(i)).Start(transporttest.NewRecorder()); err != nil {
				t.Fatal(err)
			}
		}
		if err := nw.Delay(mem.Any, 0, time.Millisecond, 20*time.Millisecond); err != nil {
			t.Fatal(err)
		}
		// One global send order: round-robin over the senders, one frame
		// per 100µs of fake time.
		idx := 0
		for seq := range uint64(perLink) {
			for i := 1; i <= senders; i++ {
				h := transport.Header{Type: transport.FramePassive, Seq: seq, A: uint64(idx)}
				if err := nw.Endpoint(transport.Proc(i)).Send(t.Context(), 0, &h, nil); err != nil {
					t.Fatal(err)
				}
				idx++
				time.Sleep(100 * time.Microsecond)
			}
		}
		time.Sleep(time.Second)
		mu.Lock()
		defer mu.Unlock()
		if len(arrivals) != senders*perLink {
			t.Fatalf("%d frames arrived, want %d", len(arrivals), senders*perLink)
		}
		next := make(map[transport.Proc]uint64)
		var last = make(map[transport.Proc]time.Time)
		crossInversions := 0
		for k, a := range arrivals {
			if a.seq != next[a.from] {
				t.Errorf("from proc %d: got seq %d, want %d: order within a link broken", a.from, a.seq, next[a.from])
			}
			next[a.from] = a.seq + 1
			if a.at.Before(last[a.from]) {
				t.Errorf("from proc %d: seq %d arrived before its predecessor", a.from, a.seq)
			}
			last[a.from] = a.at
			for _, b := range arrivals[k+1:] {
				if b.from != a.from && b.sendIdx < a.sendIdx {
					crossInversions++
				}
			}
		}
		if crossInversions == 0 {
			t.Error("delays with jitter never reordered frames across links")
		}
		t.Logf("%d cross-link inversions among %d frames", crossInversions, len(arrivals))
	})
}

// Hooks: BeforeFrame can rewrite a header, hold a frame (and the link behind
// it) until the configuration changes, or drop it (breaking the
// connection); AfterFrame sees every delivered frame.
func TestHooks(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := newNet(t, 3, mem.LocalConfig())
		recs := startAll(t, nw)
		var mu sync.Mutex
		holding := true
		var after []string
		nw.AfterFrame(func(from, to transport.Proc, h *transport.Header) {
			mu.Lock()
			after = append(after, fmt.Sprintf("%d->%d#%d", from, to, h.Seq))
			mu.Unlock()
		})
		nw.BeforeFrame(func(from, to transport.Proc, h *transport.Header) mem.Action {
			mu.Lock()
			defer mu.Unlock()
			switch {
			case from == 0 && to == 1 && h.Seq == 1 && holding:
				return mem.Hold
			case from == 2 && h.Seq == 5:
				return mem.DropFrame
			case from == 2:
				h.Epoch = 99 // stale-epoch injection
			}
			return mem.Deliver
		})
		for seq := range uint64(3) {
			send(t, nw, 0, 1, seq)
		}
		synctest.Wait()
		if got := seqs(recs[1].FramesFrom(0)); !slices.Equal(got, []uint64{0}) {
			t.Fatalf("while holding seq 1, proc 1 got %v, want [0]", got)
		}
		mu.Lock()
		holding = false
		mu.Unlock()
		synctest.Wait()
		if got := seqs(recs[1].FramesFrom(0)); !slices.Equal(got, []uint64{0}) {
			t.Fatalf("hold released without a configuration change: %v", got)
		}
		nw.Heal() // asks the hook again
		synctest.Wait()
		if got := seqs(recs[1].FramesFrom(0)); !slices.Equal(got, []uint64{0, 1, 2}) {
			t.Fatalf("after Heal proc 1 got %v, want [0 1 2]", got)
		}

		send(t, nw, 2, 0, 4)
		send(t, nw, 2, 0, 5) // dropped by the hook
		synctest.Wait()
		got := recs[0].FramesFrom(2)
		if len(got) != 1 || got[0].Header.Epoch != 99 {
			t.Errorf("proc 0 got %+v from proc 2, want seq 4 with the rewritten epoch 99", got)
		}
		if d := downPeers(recs[0]); !slices.Equal(d, []transport.Proc{2}) {
			t.Errorf("proc 0 downs after a hook drop: %v, want [2]", d)
		}
		if d := downPeers(recs[2]); !slices.Equal(d, []transport.Proc{0}) {
			t.Errorf("proc 2 downs after a hook drop: %v, want [0]", d)
		}
		mu.Lock()
		defer mu.Unlock()
		if want := []string{"0->1#0", "0->1#1", "0->1#2", "2->0#4"}; !slices.Equal(after, want) {
			t.Errorf("AfterFrame saw %v, want %v", after, want)
		}
	})
}

// Network.Close stops everything: no PeerDown calls, Sends return
// ErrClosed, and (synctest checks it) no goroutine is left.
func TestNetworkClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		nw := newNet(t, 3, mem.LocalConfig())
		recs := startAll(t, nw)
		if err := nw.Partition([]transport.Proc{0}); err != nil {
			t.Fatal(err)
		}
		send(t, nw, 0, 1, 0) // held by the partition
		send(t, nw, 1, 2, 0)
		synctest.Wait()
		blocked := make(chan error)
		go func() {
			var err error
			for seq := uint64(1); err == nil; seq++ {
				err = trySend(nw, 0, 1, seq) // fills the queue, then blocks
			}
			blocked <- err
		}()
		synctest.Wait()
		if err := nw.Close(); err != nil {
			t.Fatal(err)
		}
		if err := <-blocked; !errors.Is(err, transport.ErrClosed) {
			t.Errorf("Send blocked across Network.Close returned %v, want ErrClosed", err)
		}
		if err := nw.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
		if err := trySend(nw, 1, 2, 1); !errors.Is(err, transport.ErrClosed) {
			t.Errorf("Send after Network.Close: %v, want ErrClosed", err)
		}
		for i, r := range recs {
			if d := r.Downs(); len(d) != 0 {
				t.Errorf("proc %d got PeerDown on Network.Close: %v", i, d)
			}
		}
	})
}

// Thousands of endpoints in one process: links and goroutines are created
// on first use, so a ring costs one goroutine per link used.
func TestManyEndpoints(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n, rounds = 5000, 3
		nw := newNet(t, n, mem.LocalConfig())
		recs := startAll(t, nw)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				for r := range uint64(rounds) {
					if err := trySend(nw, transport.Proc(i), transport.Proc((i+1)%n), r); err != nil {
						t.Errorf("proc %d: %v", i, err)
						return
					}
				}
			})
		}
		wg.Wait()
		synctest.Wait()
		for i, r := range recs {
			if got := len(r.Frames()); got != rounds {
				t.Fatalf("proc %d got %d frames, want %d", i, got, rounds)
			}
		}
		if err := nw.Kill(1234); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		for _, p := range []int{1233, 1235} {
			if d := downPeers(recs[p]); !slices.Equal(d, []transport.Proc{1234}) {
				t.Errorf("ring neighbour %d downs = %v, want [1234]", p, d)
			}
		}
		if d := recs[4000].Downs(); len(d) != 0 {
			t.Errorf("unconnected proc 4000 got %v", d)
		}
		if s := nw.Stats(); s.Sent != n*rounds || s.Delivered != n*rounds {
			t.Errorf("stats %+v, want %d sent and delivered", s, n*rounds)
		}
	})
}
