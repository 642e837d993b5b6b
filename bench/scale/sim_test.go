package scale

import (
	"context"
	"fmt"
	"log/slog"
	"math/bits"
	"os"
	"runtime"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gaspigo/gaspigo/ckpt"
	"github.com/gaspigo/gaspigo/health"
	"github.com/gaspigo/gaspigo/internal/testkit/memnet"
	"github.com/gaspigo/gaspigo/pgas"
	"github.com/gaspigo/gaspigo/pgas/pgastest"
	"github.com/gaspigo/gaspigo/segments"
	"github.com/gaspigo/gaspigo/spares"
	"github.com/gaspigo/gaspigo/transport"
	"github.com/gaspigo/gaspigo/transport/mem"
	"golang.org/x/sys/unix"
)

// appSeg is the segment each rank checkpoints a range of.
const appSeg segments.ID = 9

// hop is the fake time one frame takes from sender to receiver.
const hop = 100 * time.Microsecond

// stateLen is the bytes of program state each rank checkpoints.
const stateLen = 256

// counter counts the frames the network delivered, by type and sender.
type counter struct {
	frames [transport.FrameType(32)]atomic.Uint64
	bytes  [transport.FrameType(32)]atomic.Uint64
	bySend []atomic.Uint64 // heartbeat frames by sending process
}

func (c *counter) after(from, to transport.Proc, h *transport.Header) {
	if int(h.Type) < len(c.frames) {
		c.frames[h.Type].Add(1)
		c.bytes[h.Type].Add(uint64(transport.HeaderSize) + uint64(h.Len))
	}
	if h.Type == transport.FrameHeartbeat {
		c.bySend[from].Add(1)
	}
}

// snapshot is a copy of a counter's totals by frame type.
type snapshot struct{ frames, bytes [32]uint64 }

func (c *counter) snap() snapshot {
	var s snapshot
	for i := range c.frames {
		s.frames[i], s.bytes[i] = c.frames[i].Load(), c.bytes[i].Load()
	}
	return s
}

func (s snapshot) minus(o snapshot) snapshot {
	for i := range s.frames {
		s.frames[i] -= o.frames[i]
		s.bytes[i] -= o.bytes[i]
	}
	return s
}

func (s snapshot) total() (frames, bytes uint64) {
	for i := range s.frames {
		frames += s.frames[i]
		bytes += s.bytes[i]
	}
	return
}

// member is one process of the simulated job.
type member struct {
	rt    *pgas.Runtime
	ck    *ckpt.Checkpointer
	state []byte
}

// sim is a job of n ranks and spares spare processes in one process. It
// must be created and used inside a synctest bubble.
type sim struct {
	t        testing.TB
	n        int
	nw       *mem.Network
	fm       *pgastest.Membership // the fake membership, or nil
	mn       *memnet.Network      // the real membership's network, or nil
	nodes    []*spares.Node       // the real membership's nodes, by process
	cnt      *counter
	ctx      context.Context
	ranks    []*member
	promoted chan *pgas.Runtime
	// spareInits counts the spares' Init calls still running.
	spareInits sync.WaitGroup
	all        []*pgas.Runtime
	mu         sync.Mutex
	ckcfg      ckpt.Config
}

// wallNow is the real monotonic clock (time.Now is fake in a bubble).
func wallNow() time.Duration {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return time.Duration(ts.Nano())
}

// cpuNow is the CPU time this process has used.
func cpuNow() time.Duration {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// initFigures is what starting the job cost.
type initFigures struct {
	wall, cpu        time.Duration
	allocsPerRank    float64
	heapPerRank      float64 // bytes live after Init and the first checkpoint
	setupMsgsPerRank float64 // frames per rank for ckpt.New and the first checkpoint
}

// newSim starts the job. With real, the membership is package spares'
// (Raft among the voters, the other processes clients of its tree) over
// a memnet.Network; otherwise pgastest's, which turns a report into a view
// at once.
func newSim(t testing.TB, n, nspares int, real bool) (*sim, initFigures) {
	return newSimOpts(t, n, nspares, real, false)
}

// newSimOpts is newSim; with restOnly the ranks create no segments nor
// checkpoints (a job at rest, for the heartbeat figures at sizes whose
// checkpoint tables would not fit the machine).
func newSimOpts(t testing.TB, n, nspares int, real, restOnly bool) (*sim, initFigures) {
	procs := n + nspares
	s := &sim{t: t, n: n, cnt: &counter{bySend: make([]atomic.Uint64, procs)},
		promoted: make(chan *pgas.Runtime, nspares+1)}
	var cancel context.CancelFunc
	s.ctx, cancel = context.WithTimeout(context.Background(), time.Hour)
	t.Cleanup(cancel)
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	w0, c0 := wallNow(), cpuNow()
	s.nw = mem.NewNetwork(procs, mem.Config{Seed: 1})
	s.nw.AfterFrame(s.cnt.after)
	// Every frame takes one hop of fake time, so that fake time counts
	// rounds: a protocol of k sequential messages takes k hops.
	s.nw.Delay(mem.Any, mem.Any, hop, 0)
	var members []spares.Member
	if real {
		s.mn = memnet.New(500 * time.Millisecond)
		s.nodes = make([]*spares.Node, procs)
		members = make([]spares.Member, procs)
		for i := range members {
			members[i] = spares.Member{Proc: uint32(i), Host: "h0", Addr: fmt.Sprintf("data-%d", i),
				RaftAddr: fmt.Sprintf("raft-%d", i), CtlAddr: fmt.Sprintf("ctl-%d", i), Spare: i >= n}
		}
	} else {
		s.fm = pgastest.New(n, procs)
	}
	hc := health.DefaultConfig()
	s.ckcfg = ckpt.LocalConfig()
	s.ckcfg.MaxBytes = 4 << 10
	cfgs := make([]pgas.Config, procs)
	for i := range cfgs {
		c := pgas.LocalConfig()
		c.Proc = transport.Proc(i)
		c.NumProcs, c.NumRanks = procs, n
		c.Transport = s.nw.Endpoint(transport.Proc(i))
		if real {
			nc := spares.LocalConfig()
			nc.Proc, nc.Members, nc.NumRanks, nc.Network = uint32(i), members, n, s.mn
			nc.Logger = slog.New(slog.DiscardHandler)
			node, err := spares.NewNode(nc)
			if err != nil {
				t.Fatalf("spares.NewNode(%d): %v", i, err)
			}
			s.nodes[i] = node
			c.Membership = spares.NewMembership(node)
		} else {
			c.Membership = s.fm.Handle(transport.Proc(i))
		}
		c.Health = &hc
		cfgs[i] = c
	}
	t.Cleanup(s.close)
	for i := n; i < procs; i++ {
		s.spareInits.Add(1)
		go func() {
			defer s.spareInits.Done()
			rt, err := pgas.Init(context.Background(), cfgs[i])
			if err == nil {
				s.promoted <- rt
			}
		}()
	}
	rts := make([]*pgas.Runtime, n)
	for i := range rts {
		rt, err := pgas.Init(s.ctx, cfgs[i])
		if err != nil {
			t.Fatalf("pgas.Init of rank %d: %v", i, err)
		}
		rts[i] = rt
		s.all = append(s.all, rt)
	}
	var f initFigures
	f.wall, f.cpu = wallNow()-w0, cpuNow()-c0
	if restOnly {
		for r, rt := range rts {
			s.ranks = append(s.ranks, &member{rt: rt})
			_ = r
		}
		return s, f
	}
	before := s.cnt.snap()
	s.ranks = make([]*member, n)
	s.each(func(r int) error {
		m, err := s.newMember(rts[r])
		s.ranks[r] = m
		return err
	})
	s.checkpoint(1)
	synctest.Wait()
	fr, _ := s.cnt.snap().minus(before).total()
	f.setupMsgsPerRank = float64(fr) / float64(n)
	runtime.GC()
	runtime.ReadMemStats(&ms1)
	f.allocsPerRank = float64(ms1.Mallocs-ms0.Mallocs) / float64(n)
	f.heapPerRank = float64(int64(ms1.HeapAlloc)-int64(ms0.HeapAlloc)) / float64(n)
	if *heapProf != "" {
		writeHeapProfile(t, fmt.Sprintf("%s-%d", *heapProf, n))
	}
	return s, f
}

func (s *sim) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.ranks {
		if m != nil && m.ck != nil {
			m.ck.Close()
		}
	}
	for _, rt := range s.all {
		rt.Close()
	}
	// The spares' Inits end with the job (a spare never promoted closes
	// its runtime there): wait for them, so that none is still closing
	// when the test ends.
	s.nw.Close()
	s.spareInits.Wait()
	for {
		select {
		case rt := <-s.promoted:
			rt.Close()
			continue
		default:
		}
		break
	}
}

// newMember creates a rank's program state and checkpointer.
func (s *sim) newMember(rt *pgas.Runtime) (*member, error) {
	if _, err := rt.SegmentCreate(s.ctx, appSeg, stateLen, nil); err != nil {
		return nil, err
	}
	ck, err := ckpt.New(s.ctx, rt, s.ckcfg)
	if err != nil {
		return nil, err
	}
	m := &member{rt: rt, ck: ck, state: make([]byte, stateLen)}
	if err := ck.Register("state", m.state); err != nil {
		return nil, err
	}
	return m, nil
}

// each runs f for every rank concurrently and fails on any error.
func (s *sim) each(f func(r int) error) {
	s.t.Helper()
	errs := make([]error, s.n)
	var wg sync.WaitGroup
	for r := range s.n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = f(r)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			s.t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// checkpoint fills every rank's state for iteration iter and commits it.
func (s *sim) checkpoint(iter uint64) {
	s.each(func(r int) error {
		m := s.ranks[r]
		fill(m.state, r, iter)
		if err := m.ck.Start(s.ctx, iter); err != nil {
			return err
		}
		return m.ck.Commit(s.ctx, iter)
	})
}

func fill(b []byte, rank int, iter uint64) {
	x := uint64(rank+1)*0x9e3779b97f4a7c15 ^ iter*0xbf58476d1ce4e5b9
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x)
	}
}

// collFigures is one collective's cost: frames per rank (collective
// frames only), wall and CPU time for all ranks together.
type collFigures struct {
	msgsPerRank float64
	maxPerRank  uint64 // the most collective frames one rank received
	wall, cpu   time.Duration
}

// collective runs op on every rank reps times and returns the cost of one.
func (s *sim) collective(reps int, op func(rt *pgas.Runtime) error) collFigures {
	synctest.Wait()
	before := s.cnt.snap()
	w0, c0 := wallNow(), cpuNow()
	s.each(func(r int) error {
		for range reps {
			if err := op(s.ranks[r].rt); err != nil {
				return err
			}
		}
		return nil
	})
	w, c := wallNow()-w0, cpuNow()-c0
	d := s.cnt.snap().minus(before)
	return collFigures{
		msgsPerRank: float64(d.frames[transport.FrameColl]) / float64(s.n*reps),
		wall:        w / time.Duration(reps),
		cpu:         c / time.Duration(reps),
	}
}

// restFigures is the failure detector's traffic with nothing else going on.
type restFigures struct {
	msgsPerProcSec, bytesPerProcSec float64
	maxPerProcSec                   float64 // the busiest process's heartbeat frames per second
}

// rest lets fake time pass and counts heartbeat traffic.
func (s *sim) rest(d time.Duration) restFigures {
	synctest.Wait()
	procs := len(s.cnt.bySend)
	by0 := make([]uint64, procs)
	for i := range by0 {
		by0[i] = s.cnt.bySend[i].Load()
	}
	before := s.cnt.snap()
	time.Sleep(d)
	synctest.Wait()
	diff := s.cnt.snap().minus(before)
	var most uint64
	for i := range by0 {
		most = max(most, s.cnt.bySend[i].Load()-by0[i])
	}
	sec := d.Seconds()
	return restFigures{
		msgsPerProcSec:  float64(diff.frames[transport.FrameHeartbeat]) / float64(procs) / sec,
		bytesPerProcSec: float64(diff.bytes[transport.FrameHeartbeat]) / float64(procs) / sec,
		maxPerProcSec:   float64(most) / sec,
	}
}

// killFigures is what one SIGKILLed rank costs: fake time from the kill to
// the new view on every survivor, to the last restore, and the frames per
// survivor for the recovery.
type killFigures struct {
	toView, toRestored time.Duration
	msgsPerSurvivor    float64 // frames other than heartbeats, per rank, kill to last restore
	byType             snapshot
	wall               time.Duration
}

// kill SIGKILLs rank victim while every rank waits in a barrier, and runs
// the recovery every program runs: survivors Recover and Restore, the
// promoted spare creates its state and Restores.
func (s *sim) kill(victim int) killFigures {
	s.t.Helper()
	synctest.Wait()
	before := s.cnt.snap()
	w0 := wallNow()
	t0 := time.Now()
	var (
		mu        sync.Mutex
		lastView  time.Time
		lastReady time.Time
	)
	noteView := func() {
		mu.Lock()
		if now := time.Now(); now.After(lastView) {
			lastView = now
		}
		mu.Unlock()
	}
	restored := func() {
		mu.Lock()
		if now := time.Now(); now.After(lastReady) {
			lastReady = now
		}
		mu.Unlock()
	}
	victimRT := s.ranks[victim].rt
	s.ranks[victim].ck.Close()
	var wg sync.WaitGroup
	errs := make(chan error, s.n+1)
	// The spare.
	wg.Add(1)
	go func() {
		defer wg.Done()
		var rt *pgas.Runtime
		select {
		case rt = <-s.promoted:
		case <-s.ctx.Done():
			errs <- fmt.Errorf("no spare promoted")
			return
		}
		noteView()
		m, err := s.newMember(rt)
		if err == nil {
			_, err = m.ck.Restore(s.ctx)
		}
		if err != nil {
			errs <- fmt.Errorf("promoted spare: %w", err)
			return
		}
		s.mu.Lock()
		s.all = append(s.all, rt)
		s.ranks[rt.Rank()] = m
		s.mu.Unlock()
		restored()
	}()
	for r := range s.n {
		if r == victim {
			continue
		}
		m := s.ranks[r]
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := m.rt.Barrier(s.ctx, nil)
			if !pgas.NeedsRecovery(err) {
				errs <- fmt.Errorf("rank %d: barrier across a kill returned %v", r, err)
				return
			}
			if err := m.rt.Recover(s.ctx); err != nil {
				errs <- fmt.Errorf("rank %d: recover: %w", r, err)
				return
			}
			noteView()
			if _, err := m.rt.SegmentCreate(s.ctx, appSeg, stateLen, nil); err != nil {
				errs <- fmt.Errorf("rank %d: segment: %w", r, err)
				return
			}
			if _, err := m.ck.Restore(s.ctx); err != nil {
				errs <- fmt.Errorf("rank %d: restore: %w", r, err)
				return
			}
			restored()
		}()
	}
	synctest.Wait() // every rank waits in the barrier
	s.nw.Kill(victimRT.Proc())
	if s.nodes != nil {
		// SIGKILL takes the process's membership node with it.
		s.nodes[victimRT.Proc()].Shutdown()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		s.t.Fatal(err)
	}
	d := s.cnt.snap().minus(before)
	fr, _ := d.total()
	hb := d.frames[transport.FrameHeartbeat]
	return killFigures{
		toView:          lastView.Sub(t0),
		toRestored:      lastReady.Sub(t0),
		msgsPerSurvivor: float64(fr-hb) / float64(s.n),
		byType:          d,
		wall:            wallNow() - w0,
	}
}

// writeHeapProfile writes the live heap, as of the last GC, to path, and
// the goroutines to path.goroutines.
func writeHeapProfile(t testing.TB, path string) {
	for _, p := range []struct{ name, path string }{{"heap", path}, {"goroutine", path + ".goroutines"}} {
		f, err := os.Create(p.path)
		if err != nil {
			t.Fatalf("%s profile: %v", p.name, err)
		}
		err = pprof.Lookup(p.name).WriteTo(f, 0)
		f.Close()
		if err != nil {
			t.Fatalf("%s profile: %v", p.name, err)
		}
	}
}

// log2 is ⌈log2 n⌉.
func log2(n int) int { return bits.Len(uint(n - 1)) }

// leaderRank returns the rank whose process leads the real membership's
// Raft, or -1 when the leader holds no rank or the membership is fake.
func (s *sim) leaderRank() int {
	for r, m := range s.ranks {
		if nd := s.nodes[m.rt.Proc()]; nd != nil && nd.IsLeader() {
			return r
		}
	}
	return -1
}
