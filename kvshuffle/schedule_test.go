package kvshuffle

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// scheduleTime runs an all-to-all exchange of n ranks on the fake clock of
// a synctest bubble, with every receiver taking at most one frame per
// perFrame (a receiver-bound network: each receiver's link or memory
// bandwidth is the limit). Send buffers hold all the data, so almost all
// of it moves in CloseSend's flush, in strict schedule order (Send itself
// takes no fake time). It returns how long the exchange took.
func scheduleTime(t *testing.T, n, framesPerPair int, sc Schedule) time.Duration {
	var took time.Duration
	synctest.Test(t, func(t *testing.T) {
		const perFrame = 100 * time.Microsecond
		rts, _ := newJob(t, n, 60)
		done := make(chan struct{})
		var feeders sync.WaitGroup
		defer feeders.Wait()
		defer close(done)
		gates := make([]chan struct{}, n)
		for i := range gates {
			gates[i] = make(chan struct{})
			feeders.Add(1)
			go func() {
				defer feeders.Done()
				for {
					time.Sleep(perFrame)
					select {
					case gates[i] <- struct{}{}:
					case <-done:
						return
					}
				}
			}()
		}
		shs := newShufflesEach(t, rts, func(i int) Config {
			c := LocalConfig()
			c.Schedule = sc
			c.SendBuffers = framesPerPair + 2 // everything is still buffered when CloseSend flushes
			c.drainGate = gates[i]
			c.Partition = func(k []byte, parts int) int { return int(k[0]) % parts }
			return c
		})
		val := make([]byte, 1000)
		perFramePairs := (LocalConfig().SlotSize - frameHeader) / PairSize(1, len(val))
		start := time.Now()
		each(t, n, func(i int) error {
			ctx := context.Background()
			for j := range framesPerPair * perFramePairs * n {
				if err := shs[i].Send(ctx, []byte{byte(j % n)}, val); err != nil {
					return err
				}
			}
			return shs[i].CloseSend(ctx)
		})
		took = time.Since(start)
		for _, s := range shs {
			st := s.Stats()
			if want := uint64(framesPerPair * perFramePairs * n * n); st.PairsReceived != want/uint64(n) {
				t.Fatalf("rank %d received %d pairs, want %d", s.Rank(), st.PairsReceived, want/uint64(n))
			}
		}
	})
	return took
}

// Rule (exchange order): the diagonal schedule pairs each receiver with
// one sender per step; the naive one sends everybody to rank 0, then to
// rank 1, ... With receiver-bound links the diagonal flush is close to the
// ideal (every receiver busy all the time) and the naive one several times
// slower (a sender runs ahead by at most Slots frames, which softens the
// steps). Measured: x2.9 at 4 ranks and x4.0 at 8 with 24 frames per pair;
// require x2.
func TestScheduleVirtualTime(t *testing.T) {
	const framesPerPair = 16
	for _, n := range []int{4, 8} {
		naive := scheduleTime(t, n, framesPerPair, Naive)
		diag := scheduleTime(t, n, framesPerPair, Diagonal)
		ideal := time.Duration(n*framesPerPair) * 100 * time.Microsecond
		t.Logf("ranks=%d: naive %v, diagonal %v (x%.1f), ideal %v", n, naive, diag, float64(naive)/float64(diag), ideal)
		if naive < 2*diag {
			t.Errorf("ranks=%d: naive %v is not twice the diagonal %v", n, naive, diag)
		}
		if diag > ideal*3/2 {
			t.Errorf("ranks=%d: diagonal %v is far from the ideal %v", n, diag, ideal)
		}
	}
}

func ExampleRangePartitioner() {
	part := RangePartitioner([][]byte{[]byte("g"), []byte("p")})
	for _, k := range []string{"apple", "grape", "melon", "plum", "zucchini"} {
		fmt.Println(k, part([]byte(k), 3))
	}
	// Output:
	// apple 0
	// grape 1
	// melon 1
	// plum 2
	// zucchini 2
}
