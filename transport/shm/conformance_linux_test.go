package shm

import (
	"testing"

	"github.com/gaspigo/gaspigo/transport"
	"github.com/gaspigo/gaspigo/transport/transporttest"
)

func factory(mod func(*Config)) transporttest.Factory {
	return func(t *testing.T, n int) []transport.Transport {
		ts := newCluster(t, n, mod)
		out := make([]transport.Transport, n)
		for i, tr := range ts {
			out[i] = tr
		}
		return out
	}
}

// TestConformance runs the suite with the smallest rings (frames of the
// suite's 1 MiB stream through them) and the default spin.
func TestConformance(t *testing.T) {
	transporttest.Run(t, factory(nil))
}

// TestConformanceNoSpin runs it with receivers and senders that sleep at
// once, so every wait goes through a wake-up byte.
func TestConformanceNoSpin(t *testing.T) {
	transporttest.Run(t, factory(func(c *Config) { c.Spin = 0 }))
}

// TestConformanceBigRing runs it with rings that hold a whole 1 MiB frame.
func TestConformanceBigRing(t *testing.T) {
	transporttest.Run(t, factory(func(c *Config) { c.RingSize = DefaultRingSize }))
}
