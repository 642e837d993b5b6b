package ckpt

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gaspigo/gaspigo/pgas"
	"github.com/gaspigo/gaspigo/transport"
	"github.com/gaspigo/gaspigo/transport/mem"
)

// Start copies, the push lands in the holders' slots, Commit agrees, and
// Restore brings every rank back to the last checkpoint, bit for bit.
func TestRoundTrip(t *testing.T) {
	for _, k := range []int{1, 2} {
		t.Run(fmt.Sprintf("mirrors=%d", k), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				j := newTestJob(t, jobOpts{ranks: 4, mirrors: k})
				for iter := uint64(1); iter <= 3; iter++ {
					j.checkpoint(iter)
				}
				for r, m := range j.ranks {
					if id, ok := m.ck.LastCommitted(); !ok || id != 3 {
						t.Fatalf("rank %d: LastCommitted = %d, %v", r, id, ok)
					}
					if hs := m.ck.Holders(r); len(hs) != k {
						t.Fatalf("rank %d: holders %v, want %d", r, hs, k)
					}
				}
				j.checkMirrors(3)
				for _, m := range j.ranks {
					m.scribble()
				}
				ctx := j.ctx
				j.each(indexes(4), func(r int) error {
					id, err := j.ranks[r].ck.Restore(ctx)
					if err == nil && id != 3 {
						err = fmt.Errorf("restored %d, want 3", id)
					}
					return err
				})
				j.checkAll(3)
				st := j.ranks[0].ck.Stats()
				if st.Started != 3 || st.Committed != 3 || st.Restores != 1 || st.Fetched != 0 {
					t.Fatalf("stats %+v", st)
				}
				if want := uint64(3 * k * (stateLen + segLen)); st.BytesPushed < want {
					t.Fatalf("BytesPushed %d, want at least %d", st.BytesPushed, want)
				}
				// Checkpointing goes on after a restore.
				j.checkpoint(4)
				j.checkMirrors(4)
			})
		})
	}
}

// checkMirrors verifies that every holder has a valid copy of every
// source's snapshot of checkpoint id.
func (j *testJob) checkMirrors(id uint64) {
	j.t.Helper()
	for _, src := range j.live() {
		m := j.ranks[src]
		for _, h := range m.ck.Holders(src) {
			hc := j.ranks[h].ck
			e, err := hc.myEntry()
			if err != nil {
				j.t.Fatal(err)
			}
			found := false
			for _, cp := range e.copies {
				if cp.src == src && cp.p.id == id {
					found = true
				}
			}
			if !found {
				j.t.Fatalf("holder %d has no valid copy of rank %d's checkpoint %d (copies %+v)", h, src, id, e.copies)
			}
		}
	}
}

// Ids must increase; Commit needs a Start; registration limits.
func TestMisuse(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j := newTestJob(t, jobOpts{ranks: 2})
		ctx := j.ctx
		j.checkpoint(5)
		ck := j.ranks[0].ck
		if err := ck.Start(ctx, 5); !errors.Is(err, ErrBadID) {
			t.Fatalf("Start(5) again: %v, want ErrBadID", err)
		}
		if err := ck.Commit(ctx, 6); !errors.Is(err, ErrBadID) {
			t.Fatalf("Commit(6) without Start: %v, want ErrBadID", err)
		}
		if err := ck.Register("state", make([]byte, 1)); !errors.Is(err, ErrInvalid) {
			t.Fatalf("duplicate name: %v", err)
		}
		if err := ck.Register("", make([]byte, 1)); !errors.Is(err, ErrInvalid) {
			t.Fatalf("empty name: %v", err)
		}
		if err := ck.Register("big", make([]byte, j.cfg.MaxBytes)); !errors.Is(err, ErrTooLarge) {
			t.Fatalf("above MaxBytes: %v", err)
		}
		if err := ck.RegisterSegment("own", j.cfg.SegmentID+1, 0, 8); !errors.Is(err, ErrInvalid) {
			t.Fatalf("own segment: %v", err)
		}
		if err := ck.RegisterSegment("neg", appSeg, -1, 8); !errors.Is(err, ErrInvalid) {
			t.Fatalf("negative offset: %v", err)
		}
		ck.Close()
		ck.Close()
		if err := ck.Start(ctx, 9); !errors.Is(err, ErrClosed) {
			t.Fatalf("Start after Close: %v", err)
		}
	})
}

func TestConfigValidate(t *testing.T) {
	good := DefaultConfig()
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mut := range map[string]func(*Config){
		"mirrors":  func(c *Config) { c.Mirrors = 0 },
		"maxbytes": func(c *Config) { c.MaxBytes = 0 },
		"huge":     func(c *Config) { c.MaxBytes = 1 << 50 },
		"segid":    func(c *Config) { c.SegmentID = 0xFFFE },
		"queues":   func(c *Config) { c.DiskQueue = c.Queue },
		"negq":     func(c *Config) { c.Queue = -1 },
		"keep":     func(c *Config) { c.Dir = "/tmp/x"; c.DiskKeep = 0 },
	} {
		c := DefaultConfig()
		mut(&c)
		before := c
		if err := c.Validate(); err == nil {
			t.Errorf("%s: Validate accepted %+v", name, c)
		} else if !errors.Is(err, ErrConfig) {
			t.Errorf("%s: Validate's error %q does not wrap ErrConfig", name, err)
		}
		if c != before {
			t.Errorf("%s: Validate changed the config", name)
		}
	}
}

// A Commit whose own push is held back times out (pgas.ErrTimeout) without
// changing anything; called again once the push completes, it commits.
func TestCommitTimeoutIsRetryable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j := newTestJob(t, jobOpts{ranks: 4})
		j.checkpoint(1)
		const slow = 1
		mirror := uint16(j.cfg.SegmentID + 1)
		j.nw.BeforeFrame(func(from, to transport.Proc, h *transport.Header) mem.Action {
			if from == slow && h.Type == transport.FrameWrite && h.Seg == mirror {
				return mem.Hold
			}
			return mem.Deliver
		})
		ctx := j.ctx
		for r, m := range j.ranks {
			m.fill(r, 2)
			if err := m.ck.Start(ctx, 2); err != nil {
				t.Fatal(err)
			}
		}
		others := make(chan error, 3)
		for _, r := range []int{0, 2, 3} {
			go func() { others <- j.ranks[r].ck.Commit(ctx, 2) }()
		}
		short, cancel := context.WithTimeout(ctx, time.Second)
		err := j.ranks[slow].ck.Commit(short, 2)
		cancel()
		if !errors.Is(err, pgas.ErrTimeout) {
			t.Fatalf("Commit with its push held: %v, want pgas.ErrTimeout", err)
		}
		if id, _ := j.ranks[slow].ck.LastCommitted(); id != 1 {
			t.Fatalf("LastCommitted %d after the timeout", id)
		}
		j.nw.BeforeFrame(nil)
		if err := j.ranks[slow].ck.Commit(ctx, 2); err != nil {
			t.Fatalf("Commit again: %v", err)
		}
		for range 3 {
			if err := <-others; err != nil {
				t.Fatal(err)
			}
		}
		j.checkMirrors(2)
	})
}

// A RegisterVar region costs what is in use: Start saves and pushes the
// prefix only, and Restore writes the prefix back, leaving the rest.
func TestRegisterVar(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		j := newTestJob(t, jobOpts{ranks: 3})
		const capacity, inUse = 40000, 100
		bufs := make([][]byte, 3)
		for r, m := range j.ranks {
			bufs[r] = make([]byte, capacity)
			if err := m.ck.RegisterVar("var", bufs[r], func() int { return inUse }); err != nil {
				t.Fatal(err)
			}
		}
		if err := j.ranks[0].ck.RegisterVar("bad", nil, nil); !errors.Is(err, ErrInvalid) {
			t.Fatalf("RegisterVar with no length function: %v, want ErrInvalid", err)
		}
		for r := range bufs {
			fillBytes(bufs[r][:inUse], r, 1, 3)
		}
		j.checkpoint(1)
		st := j.ranks[0].ck.Stats()
		if full := uint64(stateLen + segLen + capacity); st.BytesPushed >= full {
			t.Fatalf("BytesPushed %d: the whole variable region was pushed (%d bytes with it)", st.BytesPushed, full)
		}
		if least := uint64(stateLen + segLen + inUse); st.BytesPushed < least {
			t.Fatalf("BytesPushed %d, want at least %d", st.BytesPushed, least)
		}
		for r := range bufs {
			for i := range bufs[r] {
				bufs[r][i] = 0xEE
			}
		}
		j.each(indexes(3), func(r int) error {
			_, err := j.ranks[r].ck.Restore(j.ctx)
			return err
		})
		j.checkAll(1)
		for r := range bufs {
			want := make([]byte, inUse)
			fillBytes(want, r, 1, 3)
			if string(bufs[r][:inUse]) != string(want) {
				t.Fatalf("rank %d: the variable region's prefix was not restored", r)
			}
			if bufs[r][inUse] != 0xEE || bufs[r][capacity-1] != 0xEE {
				t.Fatalf("rank %d: Restore wrote past the saved prefix", r)
			}
		}
	})
}
