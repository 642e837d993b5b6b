package tcp

import (
	"testing"

	"github.com/gaspigo/gaspigo/transport"
	"github.com/gaspigo/gaspigo/transport/transporttest"
)

// factory returns n TCP transports on loopback for procs 0..n-1 that know
// each other's addresses, not started.
func factory(t *testing.T, n int) []transport.Transport {
	ts := newCluster(t, n, nil)
	out := make([]transport.Transport, n)
	for i, tr := range ts {
		out[i] = tr
	}
	return out
}

func TestConformance(t *testing.T) {
	transporttest.Run(t, factory)
}
