package shm

import (
	"testing"

	"github.com/gaspigo/gaspigo/internal/auth"
	"github.com/gaspigo/gaspigo/transport"
	"github.com/gaspigo/gaspigo/transport/transporttest"
)

// newCluster returns n transports for procs 0..n-1 that know each other's
// addresses, not started, closed at the end of the test.
func newCluster(t testing.TB, n int, mod func(*Config)) []*Transport {
	t.Helper()
	token := auth.NewToken()
	return transporttest.NewCluster(t, n, func(self transport.Proc) (*Transport, error) {
		cfg := DefaultConfig()
		cfg.Self, cfg.Token = self, token
		cfg.RingSize = MinRingSize
		if mod != nil {
			mod(&cfg)
		}
		return New(cfg)
	})
}

// startCluster is newCluster of n started, each with a Recorder.
func startCluster(t *testing.T, n int) ([]*Transport, []*transporttest.Recorder) {
	t.Helper()
	ts := newCluster(t, n, nil)
	return ts, transporttest.StartAll(t, ts)
}
