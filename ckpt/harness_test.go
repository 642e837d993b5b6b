package ckpt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gaspigo/gaspigo/health"
	"github.com/gaspigo/gaspigo/pgas"
	"github.com/gaspigo/gaspigo/pgas/pgastest"
	"github.com/gaspigo/gaspigo/segments"
	"github.com/gaspigo/gaspigo/transport"
	"github.com/gaspigo/gaspigo/transport/mem"
)

// appSeg is the program segment every test rank registers a range of.
const appSeg segments.ID = 5

// stateLen and segLen are the sizes of a test rank's two regions.
const (
	stateLen = 3000
	segLen   = 1500
)

// member is one process of a test job: its runtime, its checkpointer and
// its program state (a byte slice and a segment range).
type member struct {
	rt    *pgas.Runtime
	ck    *Checkpointer
	state []byte
}

// testJob is a test job over transport/mem.
type testJob struct {
	t        testing.TB
	ctx      context.Context // bounds every call, so a hang fails the test
	nw       *mem.Network
	cfg      Config
	ranks    []*member // by rank; replaced on promotion, nil once vacant
	promoted chan *pgas.Runtime
	fm       *pgastest.Membership
	mu       sync.Mutex
	all      []*member
}

type jobOpts struct {
	ranks, spares int
	hosts         []string // per proc; nil for one host
	mirrors       int
	ft            bool // membership and failure detector
	shrink        bool // with ft: a rank lost with no spare left becomes vacant
	dir           string
	maxBytes      int64
	// lazy: the ranks get their runtimes only (member.ck nil); the test
	// runs the setup itself.
	lazy bool
}

func newTestJob(t testing.TB, o jobOpts) *testJob {
	t.Helper()
	n := o.ranks + o.spares
	nw, err := mem.New(n, mem.Config{Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	j := &testJob{t: t, ctx: ctx, nw: nw, ranks: make([]*member, o.ranks), promoted: make(chan *pgas.Runtime, max(o.spares, 1))}
	j.cfg = LocalConfig()
	j.cfg.Mirrors = max(o.mirrors, 1)
	j.cfg.Dir = o.dir
	if o.maxBytes > 0 {
		j.cfg.MaxBytes = o.maxBytes
	} else {
		j.cfg.MaxBytes = 64 << 10
	}
	var fm *pgastest.Membership
	if o.ft {
		fm = pgastest.New(o.ranks, n)
		fm.SetShrink(o.shrink)
		j.fm = fm
	}
	hc := health.LocalConfig()
	cfgs := make([]pgas.Config, n)
	for i := range cfgs {
		c := pgas.LocalConfig()
		c.Proc = transport.Proc(i)
		c.NumProcs, c.NumRanks = n, o.ranks
		c.Transport = nw.Endpoint(transport.Proc(i))
		c.Hosts = o.hosts
		if fm != nil {
			c.Membership = fm.Handle(transport.Proc(i))
			c.Health = &hc
		}
		cfgs[i] = c
	}
	for i := o.ranks; i < n; i++ {
		go func() {
			rt, err := pgas.Init(context.Background(), cfgs[i])
			if err == nil {
				j.promoted <- rt
			}
		}()
	}
	rts := make([]*pgas.Runtime, o.ranks)
	for i := range rts {
		rt, err := pgas.Init(context.Background(), cfgs[i])
		if err != nil {
			t.Fatal(err)
		}
		rts[i] = rt
	}
	t.Cleanup(func() {
		j.mu.Lock()
		closed := map[*pgas.Runtime]bool{}
		for _, m := range j.all {
			if m.ck != nil {
				m.ck.Close()
			}
			if !closed[m.rt] {
				closed[m.rt] = true
				m.rt.Close()
			}
		}
		j.mu.Unlock()
		// Promoted spares that no test claimed.
		for {
			select {
			case rt := <-j.promoted:
				rt.Close()
				continue
			default:
			}
			break
		}
		nw.Close()
	})
	if o.lazy {
		for r, rt := range rts {
			j.ranks[r] = &member{rt: rt}
			j.all = append(j.all, j.ranks[r]) // closed at the end
		}
		return j
	}
	ms := make([]*member, o.ranks)
	j.each(indexes(o.ranks), func(r int) error {
		m, err := j.newMember(ctx, rts[r])
		ms[r] = m
		return err
	})
	copy(j.ranks, ms)
	return j
}

// live lists the ranks that are not vacant.
func (j *testJob) live() []int {
	var rs []int
	for r, m := range j.ranks {
		if m != nil {
			rs = append(rs, r)
		}
	}
	return rs
}

func indexes(n int) []int {
	xs := make([]int, n)
	for i := range xs {
		xs[i] = i
	}
	return xs
}

// newMember creates the program state and checkpointer of a process.
func (j *testJob) newMember(ctx context.Context, rt *pgas.Runtime) (*member, error) {
	return j.setupMember(ctx, rt, New)
}

// setupMember is newMember with the checkpointer made by mk (New or
// NewJoining). When mk returns a Checkpointer with an error (a failure
// during New's collective setup), so does setupMember: the member is
// usable once recovered.
func (j *testJob) setupMember(ctx context.Context, rt *pgas.Runtime, mk func(context.Context, *pgas.Runtime, Config) (*Checkpointer, error)) (*member, error) {
	if _, err := rt.Segment(appSeg); err != nil {
		if _, err := rt.SegmentCreate(ctx, appSeg, 4096, nil); err != nil {
			return nil, err
		}
	}
	ck, err := mk(ctx, rt, j.cfg)
	if ck == nil {
		return nil, err
	}
	m := &member{rt: rt, ck: ck, state: make([]byte, stateLen)}
	j.mu.Lock()
	j.all = append(j.all, m)
	j.mu.Unlock()
	if err := ck.Register("state", m.state); err != nil {
		return nil, err
	}
	if err := ck.RegisterSegment("seg", appSeg, 100, segLen); err != nil {
		return nil, err
	}
	return m, err
}

// fill sets a rank's program state to what iteration it computes.
func (m *member) fill(rank int, iter uint64) {
	fillBytes(m.state, rank, iter, 1)
	seg, _ := m.rt.Segment(appSeg)
	fillBytes(seg.Bytes()[100:100+segLen], rank, iter, 2)
}

func fillBytes(b []byte, rank int, iter uint64, salt int) {
	x := uint64(rank+1)*0x9e3779b97f4a7c15 ^ iter*0xbf58476d1ce4e5b9 ^ uint64(salt)
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x)
	}
}

// check verifies that a rank's program state is exactly iteration iter's.
func (m *member) check(rank int, iter uint64) error {
	want := make([]byte, stateLen)
	fillBytes(want, rank, iter, 1)
	if !bytes.Equal(m.state, want) {
		return fmt.Errorf("rank %d: state region is not iteration %d's", rank, iter)
	}
	wantSeg := make([]byte, segLen)
	fillBytes(wantSeg, rank, iter, 2)
	seg, _ := m.rt.Segment(appSeg)
	if !bytes.Equal(seg.Bytes()[100:100+segLen], wantSeg) {
		return fmt.Errorf("rank %d: segment region is not iteration %d's", rank, iter)
	}
	return nil
}

// scribble overwrites a rank's program state.
func (m *member) scribble() {
	for i := range m.state {
		m.state[i] = 0xEE
	}
	seg, _ := m.rt.Segment(appSeg)
	clear(seg.Bytes())
}

// each runs f for the given ranks concurrently and fails on any error.
func (j *testJob) each(ranks []int, f func(r int) error) {
	j.t.Helper()
	errs := make([]error, len(ranks))
	var wg sync.WaitGroup
	for i, r := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(r)
			if errs[i] != nil {
				j.t.Logf("rank %d failed: %v", r, errs[i])
			}
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			j.t.Fatalf("rank %d: %v", ranks[i], err)
		}
	}
}

// checkpoint runs fill, Start and Commit of iteration iter on every rank.
func (j *testJob) checkpoint(iter uint64) {
	j.t.Helper()
	ctx := j.ctx
	j.each(j.live(), func(r int) error {
		m := j.ranks[r]
		m.fill(r, iter)
		if err := m.ck.Start(ctx, iter); err != nil {
			return err
		}
		return m.ck.Commit(ctx, iter)
	})
}

// advance computes iteration iter on every rank without checkpointing it.
func (j *testJob) advance(iter uint64) {
	for _, r := range j.live() {
		j.ranks[r].fill(r, iter)
	}
}

// kill crashes the processes holding ranks and stops their local objects;
// the membership publishes the new view once the survivors noticed.
func (j *testJob) kill(ranks ...int) {
	j.fm.Hold(len(ranks))
	for _, r := range ranks {
		j.nw.Kill(j.ranks[r].rt.Proc())
	}
	j.settle(ranks)
}

// settle runs inside the synctest bubble's root goroutine after victims
// were killed (with the membership held): every survivor sends to every
// victim (a send to a dead process fails and raises PeerDown), and once
// the bubble is idle (PeerDown handled everywhere, before any timer
// fires) the membership may publish.
func (j *testJob) settle(victims []int) {
	j.t.Helper()
	for _, r := range victims {
		if ck := j.ranks[r].ck; ck != nil {
			ck.Close()
		}
	}
	for s, m := range j.ranks {
		if m == nil || slices.Contains(victims, s) {
			continue
		}
		for _, v := range victims {
			m.rt.Write(j.ctx, 0, v, pgas.Loc{Seg: appSeg}, pgas.Loc{Seg: appSeg}, 1)
		}
	}
	synctest.Wait()
	for s, m := range j.ranks {
		if m == nil || slices.Contains(victims, s) {
			continue
		}
		sv := m.rt.StateVector()
		for _, v := range victims {
			if !sv[v].Suspect && sv[v].State != health.Corrupt {
				j.t.Fatalf("rank %d did not notice that rank %d died", s, v)
			}
		}
	}
	j.fm.Release()
}

// recoverAll runs the recovery of the survivors and of one promoted spare
// per killed rank, the way a program does: survivors Recover, redo their
// setup (SegmentCreate is idempotent for them) and Restore; spares create
// their state and checkpointer and Restore; anyone whose step fails
// because the membership moved on (pgas.NeedsRecovery) recovers and
// retries. It returns the restored id.
func (j *testJob) recoverAll(killed []int, survivorStep func(r int) error) uint64 {
	j.t.Helper()
	ctx := j.ctx
	var survivors []int
	for r := range j.ranks {
		if !slices.Contains(killed, r) {
			survivors = append(survivors, r)
		}
	}
	ids := make([]uint64, len(j.ranks))
	newMembers := make([]*member, len(j.ranks))
	var wg sync.WaitGroup
	var spareErr error
	var mu sync.Mutex
	for range killed {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var rt *pgas.Runtime
			select {
			case rt = <-j.promoted:
			case <-ctx.Done():
				mu.Lock()
				spareErr = fmt.Errorf("no spare promoted: %w", ctx.Err())
				mu.Unlock()
				return
			}
			var m *member
			err := retry(rt, func() error {
				var err error
				if m == nil {
					if m, err = j.newMember(ctx, rt); err != nil {
						m = nil
						return err
					}
				} else if _, err := rt.SegmentCreate(ctx, appSeg, 4096, nil); err != nil {
					return err
				}
				ids[rt.Rank()], err = m.ck.Restore(ctx)
				return noCheckpointIsZero(err)
			})
			mu.Lock()
			defer mu.Unlock()
			if err != nil && spareErr == nil {
				spareErr = fmt.Errorf("spare for rank %d: %w", rt.Rank(), err)
			}
			newMembers[rt.Rank()] = m
		}()
	}
	j.each(survivors, func(r int) error {
		rt := j.ranks[r].rt
		if survivorStep != nil {
			if err := survivorStep(r); err != nil {
				return err
			}
		}
		if err := rt.Recover(ctx); err != nil {
			return err
		}
		return retry(rt, func() error {
			if _, err := rt.SegmentCreate(ctx, appSeg, 4096, nil); err != nil {
				return err
			}
			var err error
			ids[r], err = j.ranks[r].ck.Restore(ctx)
			return noCheckpointIsZero(err)
		})
	})
	wg.Wait()
	if spareErr != nil {
		j.t.Fatal(spareErr)
	}
	for r, m := range newMembers {
		if m != nil {
			j.ranks[r] = m
		}
	}
	for r := range ids {
		if ids[r] != ids[0] {
			j.t.Fatalf("ranks restored different ids: %v", ids)
		}
	}
	return ids[0]
}

// noCheckpointIsZero takes Restore's ErrNoCheckpoint (nothing committed
// yet: the program starts over) as restoring id 0.
func noCheckpointIsZero(err error) error {
	if errors.Is(err, ErrNoCheckpoint) {
		return nil
	}
	return err
}

// retry runs step until it succeeds or fails for a reason other than a
// membership change, recovering in between.
func retry(rt *pgas.Runtime, step func() error) error {
	for attempt := 0; ; attempt++ {
		err := step()
		if err == nil || !pgas.NeedsRecovery(err) || attempt == 10 {
			return err
		}
		if err := rt.Recover(context.Background()); err != nil {
			return err
		}
	}
}

func (j *testJob) checkAll(iter uint64) {
	j.t.Helper()
	for _, r := range j.live() {
		if err := j.ranks[r].check(r, iter); err != nil {
			j.t.Fatal(err)
		}
	}
}

func (j *testJob) waitProtected() {
	j.t.Helper()
	j.each(j.live(), func(r int) error { return j.ranks[r].ck.WaitProtected(j.ctx) })
}
