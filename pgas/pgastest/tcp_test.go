package pgastest

import (
	"context"
	"math/bits"
	"sync"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/internal/auth"
	"github.com/gaspigo/gaspigo/pgas"
	"github.com/gaspigo/gaspigo/transport"
	"github.com/gaspigo/gaspigo/transport/tcp"
)

var _ transport.Connector = (*tcp.Transport)(nil)

// Rule (transport/doc.go, connections on first use; pgas sayGoodbye): a
// job of 64 processes over TCP on loopback, in this test process, runs a
// barrier and an allreduce; each process then holds connections only to
// its partners (at most 2*log2(64) = 12, where connecting every pair
// gave 63), no handshake timed out or was refused, and Close says
// goodbye only over the connections that exist: it dials nobody.
func TestTCPJobConnectsToPartnersOnly(t *testing.T) {
	const n = 64
	token := auth.NewToken()
	trs := make([]*tcp.Transport, n)
	addrs := map[transport.Proc]string{}
	for i := range trs {
		cfg := tcp.LocalConfig()
		cfg.Self, cfg.Token = transport.Proc(i), token
		tr, err := tcp.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.Close() })
		trs[i], addrs[transport.Proc(i)] = tr, tr.Addr()
	}
	rts := make([]*pgas.Runtime, n)
	for i, tr := range trs {
		if err := tr.SetPeers(addrs); err != nil {
			t.Fatal(err)
		}
		cfg := pgas.LocalConfig()
		cfg.Proc, cfg.NumProcs, cfg.NumRanks, cfg.Transport = transport.Proc(i), n, n, tr
		rt, err := pgas.Init(context.Background(), cfg)
		if err != nil {
			t.Fatalf("Init of process %d: %v", i, err)
		}
		t.Cleanup(func() { rt.Close() })
		rts[i] = rt
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i, rt := range rts {
		wg.Go(func() {
			if err := rt.Barrier(ctx, nil); err != nil {
				errs <- err
				return
			}
			sum := []int64{int64(i)}
			if err := pgas.Allreduce(ctx, rt, nil, sum, pgas.OpSum); err != nil {
				errs <- err
				return
			}
			if sum[0] != n*(n-1)/2 {
				t.Errorf("rank %d: allreduce sum %d, want %d", i, sum[0], n*(n-1)/2)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	limit := 2 * bits.Len(n-1)
	most := 0
	dials := make([]uint64, n)
	for i, tr := range trs {
		st := tr.Stats()
		most, dials[i] = max(most, st.Connections), st.DialAttempts
		if st.Connections > limit || st.HandshakesTimedOut != 0 || st.HandshakesRefused != 0 || st.PeersDown != 0 {
			t.Errorf("proc %d: %+v: want at most %d connections, no handshake timed out or refused, nobody down", i, st, limit)
		}
	}
	t.Logf("%d processes: at most %d connections each", n, most)
	for _, rt := range rts {
		wg.Go(func() { rt.Close() })
	}
	wg.Wait()
	for i, tr := range trs {
		if st := tr.Stats(); st.DialAttempts != dials[i] {
			t.Errorf("proc %d dialed %d times while closing: a goodbye went to a peer it was not connected to", i, st.DialAttempts-dials[i])
		}
	}
}
