package kvshuffle

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/gaspigo/gaspigo/pgas"
	"github.com/gaspigo/gaspigo/transport"
)

// newShufflesEach is newShuffles with a config per rank.
func newShufflesEach(t testing.TB, rts []*pgas.Runtime, cfgOf func(i int) Config) []*Shuffle {
	t.Helper()
	shs := make([]*Shuffle, len(rts))
	each(t, len(rts), func(i int) error {
		var err error
		shs[i], err = New(context.Background(), rts[i], cfgOf(i))
		return err
	})
	t.Cleanup(func() {
		for _, s := range shs {
			s.Close()
			spillBlocks.Add(s.st.blockSpills.Load())
		}
	})
	return shs
}

// spillBlocks counts the blocks the tests' shuffles spilled as they lay
// (TestSpillWholeBlocks).
var spillBlocks atomic.Uint64

// Rule (flow control): a receiver that takes nothing out of its rings
// stops its senders. Each sender gets at most Slots frames into the
// receiver's ring (counted on the wire) and accepts at most what its fixed
// send buffers hold; then Send blocks. When the receiver drains, all the
// data arrives.
func TestSlowReceiverThrottlesSenders(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 3
		rts, nw := newJob(t, n, 20)
		var mu sync.Mutex
		arrived := map[transport.Proc]int{}
		nw.AfterFrame(func(from, to transport.Proc, h *transport.Header) {
			if to == 0 && h.Type == transport.FrameWrite && h.Seg == uint16(DefaultSegmentID) && h.Flags&transport.FlagNotify != 0 {
				mu.Lock()
				arrived[from]++
				mu.Unlock()
			}
		})
		gate := make(chan struct{})
		toZero := func([]byte, int) int { return 0 }
		shs := newShufflesEach(t, rts, func(i int) Config {
			c := LocalConfig()
			c.Partition = toZero
			if i == 0 {
				c.drainGate = gate
			}
			return c
		})
		cfg := LocalConfig()
		inputs := make([][]kv, n)
		for i := 1; i < n; i++ {
			inputs[i] = randPairs(rand.New(rand.NewPCG(21, uint64(i))), 5000, 1000, 100) // ~500 KB each
		}
		var done [n]atomic.Bool
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = sendAll(shs[i], inputs[i])
				done[i].Store(true)
			}()
		}
		synctest.Wait() // every goroutine is blocked: the receiver holds the gate

		// Accepted data is in the receiver's ring (Slots frames) or in the
		// sender's own buffers (SendBuffers frames); nothing else holds it.
		bound := uint64((cfg.Slots + cfg.SendBuffers) * (cfg.SlotSize - frameHeader))
		for i := 1; i < n; i++ {
			st := shs[i].Stats()
			if done[i].Load() {
				t.Fatalf("rank %d finished sending %d pairs into a receiver that consumed nothing", i, len(inputs[i]))
			}
			mu.Lock()
			got := arrived[transport.Proc(i)]
			mu.Unlock()
			if got > cfg.Slots {
				t.Errorf("rank %d: %d frames reached the stalled receiver, Slots is %d", i, got, cfg.Slots)
			}
			if st.MaxInFlight > int64(cfg.Slots) {
				t.Errorf("rank %d: %d frames in flight", i, st.MaxInFlight)
			}
			if st.SendWaits == 0 {
				t.Errorf("rank %d: Send never waited", i)
			}
			if st.BytesSent > bound {
				t.Errorf("rank %d: accepted %d bytes while stalled; the fixed buffers hold about %d", i, st.BytesSent, bound)
			}
			t.Logf("rank %d stalled after accepting %d pairs (%d bytes, bound %d), %d frames on the wire", i, st.PairsSent, st.BytesSent, bound, got)
		}
		close(gate)
		got := collect(t, shs[0], nil)
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("rank %d: %v", i, err)
			}
		}
		expectPartitioned(t, inputs, [][]kv{got, nil, nil}, toZero)
	})
}

// Without SpillDir, data beyond MemoryBudget fails the receiver with
// ErrBudget, and its peers learn it (ErrAborted) instead of waiting.
func TestBudgetWithoutSpill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 3
		rts, _ := newJob(t, n, 22)
		shs := newShuffles(t, rts, func(c *Config) {
			c.MemoryBudget = 16 * int64(c.SlotSize)
			c.RunSize = c.MemoryBudget / 4
			c.Partition = func([]byte, int) int { return 0 }
		})
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				if err := sendAll(shs[i], randPairs(rand.New(rand.NewPCG(23, uint64(i))), 4000, 500, 100)); err != nil {
					errs[i] = err
					return
				}
				for range shs[i].Recv(ctx) {
				}
				errs[i] = shs[i].Err()
			}()
		}
		wg.Wait()
		if !errors.Is(errs[0], ErrBudget) {
			t.Errorf("receiver: %v, want ErrBudget", errs[0])
		}
		for i := 1; i < n; i++ {
			var ae *AbortError
			if !errors.As(errs[i], &ae) || ae.Rank != 0 {
				t.Errorf("rank %d: %v, want an AbortError from rank 0", i, errs[i])
			}
		}
	})
}
