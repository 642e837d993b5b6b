package shm

import (
	"testing"

	"github.com/gaspigo/gaspigo/internal/auth"
	"github.com/gaspigo/gaspigo/transport"
)

// newCluster returns n transports for procs 0..n-1 that know each other's
// addresses, not started, closed at the end of the test.
func newCluster(t testing.TB, n int, mod func(*Config)) []*Transport {
	t.Helper()
	token := auth.NewToken()
	ts := make([]*Transport, n)
	addrs := make(map[transport.Proc]string, n)
	for i := range ts {
		cfg := DefaultConfig()
		cfg.Self, cfg.Token = transport.Proc(i), token
		cfg.RingSize = MinRingSize
		if mod != nil {
			mod(&cfg)
		}
		tr, err := New(cfg)
		if err != nil {
			t.Fatalf("New(proc %d): %v", i, err)
		}
		t.Cleanup(func() { _ = tr.Close() })
		ts[i] = tr
		addrs[transport.Proc(i)] = tr.Addr()
	}
	for i, tr := range ts {
		if err := tr.SetPeers(addrs); err != nil {
			t.Fatalf("SetPeers(proc %d): %v", i, err)
		}
	}
	return ts
}
