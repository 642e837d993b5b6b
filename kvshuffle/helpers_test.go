package kvshuffle

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/gaspigo/gaspigo/pgas"
	"github.com/gaspigo/gaspigo/pgas/pgastest"
	"github.com/gaspigo/gaspigo/transport/mem"
)

// newJob starts n ranks over one in-memory network.
func newJob(t testing.TB, n int, seed int64) ([]*pgas.Runtime, *mem.Network) {
	t.Helper()
	return newJobOn(t, n, seed, nil)
}

// newJobOn is newJob with host labels (pgas Config.Hosts; nil: one host).
func newJobOn(t testing.TB, n int, seed int64, hosts []string) ([]*pgas.Runtime, *mem.Network) {
	t.Helper()
	return pgastest.NewJob(t, n, mem.Config{Seed: seed}, func(cfg *pgas.Config) { cfg.Hosts = hosts })
}

// finishSend resends recs from s's Consumed count to the end, ends the
// stream and collects what s received.
func finishSend(t testing.TB, s *Shuffle, recs [][]kv) ([]kv, error) {
	if err := sendRecords(s, recs, int(s.Consumed()), len(recs)); err != nil {
		return nil, err
	}
	if err := s.CloseSend(context.Background()); err != nil {
		return nil, err
	}
	return collect(t, s, nil), nil
}

// each runs f for every index concurrently and fails on any error.
func each(t testing.TB, n int, f func(i int) error) {
	t.Helper()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(i)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", i, err)
		}
	}
}

// newShuffles creates a shuffle on every rank with LocalConfig changed by mut.
func newShuffles(t testing.TB, rts []*pgas.Runtime, mut func(*Config)) []*Shuffle {
	t.Helper()
	cfg := LocalConfig()
	if mut != nil {
		mut(&cfg)
	}
	return newShufflesEach(t, rts, func(int) Config { return cfg })
}

type kv struct{ k, v string }

func cmpKV(a, b kv) int {
	if c := cmp.Compare(a.k, b.k); c != 0 {
		return c
	}
	return cmp.Compare(a.v, b.v)
}

// randPairs makes n pairs with keys from a small alphabet (so keys repeat),
// some empty keys and values, and values up to maxVal bytes.
func randPairs(r *rand.Rand, n, keySpace, maxVal int) []kv {
	out := make([]kv, n)
	for i := range out {
		k := fmt.Sprintf("k%05d", r.IntN(keySpace))
		if r.IntN(50) == 0 {
			k = ""
		}
		v := make([]byte, r.IntN(maxVal+1))
		for j := range v {
			v[j] = byte('a' + r.IntN(26))
		}
		out[i] = kv{k, string(v)}
	}
	return out
}

// collect ranges over Recv and returns the pairs, checking the order.
func collect(t testing.TB, s *Shuffle, cmpKey func(a, b []byte) int) []kv {
	t.Helper()
	if cmpKey == nil {
		cmpKey = bytes.Compare
	}
	var out []kv
	var prev []byte
	first := true
	for k, v := range s.Recv(context.Background()) {
		if !first && cmpKey(prev, k) > 0 {
			t.Errorf("rank %d: key %q after %q", s.Rank(), k, prev)
		}
		first = false
		prev = append(prev[:0], k...)
		out = append(out, kv{string(k), string(v)})
	}
	if err := s.Err(); err != nil {
		t.Fatalf("rank %d: recv: %v", s.Rank(), err)
	}
	return out
}

// expectPartitioned checks that got[r] holds exactly the pairs of all
// inputs whose partition is r (as multisets).
func expectPartitioned(t testing.TB, inputs [][]kv, got [][]kv, part func([]byte, int) int) {
	t.Helper()
	parts := len(got)
	want := make([][]kv, parts)
	for _, in := range inputs {
		for _, p := range in {
			r := part([]byte(p.k), parts)
			want[r] = append(want[r], p)
		}
	}
	for r := range parts {
		w := slices.Clone(want[r])
		g := slices.Clone(got[r])
		slices.SortFunc(w, cmpKV)
		slices.SortFunc(g, cmpKV)
		if len(w) != len(g) {
			t.Fatalf("partition %d: got %d pairs, want %d", r, len(g), len(w))
		}
		for i := range w {
			if w[i] != g[i] {
				t.Fatalf("partition %d: pair %d is %q=%d bytes, want %q=%d bytes", r, i, g[i].k, len(g[i].v), w[i].k, len(w[i].v))
			}
		}
	}
}
