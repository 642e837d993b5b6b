package mem_test

import (
	"testing"
	"testing/synctest"

	"github.com/gaspigo/gaspigo/transport"
	"github.com/gaspigo/gaspigo/transport/mem"
	"github.com/gaspigo/gaspigo/transport/transporttest"
)

func factory(cfg mem.Config) transporttest.Factory {
	return func(t *testing.T, n int) []transport.Transport {
		nw := mem.NewNetwork(n, cfg)
		t.Cleanup(func() {
			if err := nw.Close(); err != nil {
				t.Errorf("Network.Close: %v", err)
			}
		})
		return nw.Transports()
	}
}

// TestConformance runs the suite on the real clock, with default queues.
func TestConformance(t *testing.T) {
	transporttest.Run(t, factory(mem.DefaultConfig()))
}

// TestConformanceSynctest runs every case in a synctest bubble with short
// queues: fake time, and a leaked goroutine fails the bubble.
func TestConformanceSynctest(t *testing.T) {
	for _, c := range transporttest.Cases() {
		t.Run(c.Name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { c.Test(t, factory(mem.LocalConfig())) })
		})
	}
}
