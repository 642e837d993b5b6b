package shm

import (
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/transport"
	"github.com/gaspigo/gaspigo/transport/transporttest"
)

func factory(mod func(*Config)) transporttest.Factory { return factoryThen(mod, nil) }

// factoryThen is factory with then applied to each transport once made.
func factoryThen(mod func(*Config), then func(*Transport)) transporttest.Factory {
	return func(t *testing.T, n int) []transport.Transport {
		ts := newCluster(t, n, mod)
		out := make([]transport.Transport, n)
		for i, tr := range ts {
			if then != nil {
				then(tr)
			}
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

// TestConformanceNoNap runs it with waits that sleep at once and a
// safety-net nap of an hour, as a job stretches it on an oversubscribed
// host: a wait that rested on the nap instead of a wake-up (a lost one)
// would outlast the suite's deadlines and fail it.
func TestConformanceNoNap(t *testing.T) {
	transporttest.Run(t, factoryThen(func(c *Config) { c.Spin = 0 }, func(tr *Transport) { tr.SetNap(time.Hour) }))
}

// TestConformanceBigRing runs it with rings that hold a whole 1 MiB frame.
func TestConformanceBigRing(t *testing.T) {
	transporttest.Run(t, factory(func(c *Config) { c.RingSize = DefaultRingSize }))
}
