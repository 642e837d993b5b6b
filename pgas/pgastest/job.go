package pgastest

import (
	"context"
	"testing"

	"github.com/gaspigo/gaspigo/pgas"
	"github.com/gaspigo/gaspigo/transport"
	"github.com/gaspigo/gaspigo/transport/mem"
)

// NewJob starts a job of n ranks (no spares, no membership) in this
// process over one transport/mem network configured by mc. mut, when not
// nil, adjusts each process's pgas.LocalConfig before Init. The runtimes,
// then the network, are closed when the test ends. Inside a synctest
// bubble, call it from the bubble.
func NewJob(t testing.TB, n int, mc mem.Config, mut func(*pgas.Config)) ([]*pgas.Runtime, *mem.Network) {
	t.Helper()
	nw, err := mem.New(n, mc)
	if err != nil {
		t.Fatal(err)
	}
	rts := make([]*pgas.Runtime, 0, n)
	t.Cleanup(func() {
		for _, rt := range rts {
			rt.Close()
		}
		nw.Close()
	})
	for i := 0; i < n; i++ {
		cfg := pgas.LocalConfig()
		cfg.Proc = transport.Proc(i)
		cfg.NumProcs, cfg.NumRanks = n, n
		cfg.Transport = nw.Endpoint(transport.Proc(i))
		if mut != nil {
			mut(&cfg)
		}
		rt, err := pgas.Init(context.Background(), cfg)
		if err != nil {
			t.Fatalf("pgas.Init of process %d: %v", i, err)
		}
		rts = append(rts, rt)
	}
	return rts, nw
}
