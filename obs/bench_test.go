package obs

import (
	"testing"
	"time"
)

// The cost of recording on the hot path (go test -run X -bench . ./obs).

func BenchmarkCounterInc(b *testing.B) {
	c := new(Counter)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c.Inc()
		}
	})
}

func BenchmarkHistogramObserve(b *testing.B) {
	h := newHistogram(LatencyBuckets)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			h.Observe(0.0003)
		}
	})
}

func BenchmarkFrameStatsSent(b *testing.B) {
	f := NewFrameStats("bench", func(uint8) string { return "write" })
	for b.Loop() {
		f.Sent(1, 4096)
	}
}

func BenchmarkSpanTracingOff(b *testing.B) {
	tracer.Store(nil)
	for b.Loop() {
		Begin("iteration", "it").End()
	}
}

func BenchmarkSpanTracingOn(b *testing.B) {
	StartTracing(1 << 10) // full after 1024 events: the rest are dropped and counted
	defer tracer.Store(nil)
	t0 := time.Now()
	for b.Loop() {
		Record("iteration", "it", t0)
	}
}
