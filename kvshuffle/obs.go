package kvshuffle

import (
	"time"

	"github.com/gaspigo/gaspigo/obs"
)

// phase begins a shuffle phase's trace span (category cat); the function
// it returns ends it.
func phase(cat, name string) func() {
	sp := obs.Begin(cat, name)
	return func() { sp.End() }
}

// sendPhaseDone records the send phase, from New to the end of CloseSend.
func sendPhaseDone(born time.Time, rank int) {
	obs.Record("shuffle", "shuffle send", born, "rank", rank)
}

// noteSpill counts a spill file of n bytes.
func noteSpill(n int64) {
	obs.ShuffleSpills.Inc()
	obs.ShuffleSpillBytes.Add(uint64(n))
}

// noteMem adds d bytes to the process's shuffle memory gauge.
func noteMem(d int64) { obs.ShuffleMemory.Add(float64(d)) }
