package kvshuffle

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// Spill moves what an A task holds in memory to a file, and every pair
// is still received once.
func TestSpillNow(t *testing.T) {
	const n = 2
	rts, _ := newJob(t, n, 11)
	dir := t.TempDir()
	shs := newShuffles(t, rts, func(c *Config) { c.SpillDir = dir })
	got := make([]int, n)
	each(t, n, func(i int) error {
		ctx := context.Background()
		s := shs[i]
		for k := range 500 {
			if err := s.Send(ctx, fmt.Appendf(nil, "k%03d", k), []byte{byte(i)}); err != nil {
				return err
			}
		}
		// A checkpoint: every pair sent so far is held here.
		if _, err := s.Checkpoint(ctx, 1); err != nil {
			return err
		}
		if err := s.Spill(); err != nil {
			return err
		}
		a := s.a
		for {
			a.mu.Lock()
			spilled, ch := s.st.spills.Load() > 0, a.changed
			a.mu.Unlock()
			if spilled {
				break
			}
			<-ch
		}
		if err := s.CloseSend(ctx); err != nil {
			return err
		}
		for range s.Recv(ctx) {
			got[i]++
		}
		return s.Err()
	})
	if got[0]+got[1] != 1000 {
		t.Fatalf("received %v pairs, want 1000 in all", got)
	}
	rts2, _ := newJob(t, 1, 12)
	noDir := newShuffles(t, rts2, nil)[0]
	if err := noDir.Spill(); !errors.Is(err, ErrConfig) {
		t.Fatalf("Spill without SpillDir: %v, want ErrConfig", err)
	}
}
