package kmtier

import (
	"bytes"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
)

// TestKillRankTLS: TestKillRank's job under gaspirun --tls (mutual TLS on
// the rendezvous, data plane, Raft and control connections): the spare
// takes the rank and the result is the failure-free run's, which runs
// without TLS (unless PGAS_TLS=1 runs the whole suite under TLS). Every
// process of the job is checked to have been started with PGAS_TLS=1.
func TestKillRankTLS(t *testing.T) {
	var mu sync.Mutex
	tlsOf := map[int]string{} // pid -> PGAS_TLS in its environment
	during := func(pids *proctest.Procs, launcher int) func() {
		stop, done := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for {
				for _, pid := range pids.PIDs() {
					mu.Lock()
					_, ok := tlsOf[pid]
					mu.Unlock()
					if ok {
						continue
					}
					env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
					if err != nil {
						continue
					}
					v := "unset"
					for kv := range bytes.SplitSeq(env, []byte{0}) {
						if val, ok := bytes.CutPrefix(kv, []byte("PGAS_TLS=")); ok {
							v = string(val)
						}
					}
					mu.Lock()
					tlsOf[pid] = v
					mu.Unlock()
				}
				select {
				case <-stop:
					return
				case <-tick.C:
				}
			}
		}()
		return func() { close(stop); <-done }
	}
	res := run(t, spec{spares: 1, launcher: []string{"--tls"}, extra: []string{"--inject", "kill:rank=2,iter=12"}, during: during})
	checkRecovered(t, res, 1)
	if p, ok := res.promotions()[2]; !ok || p != ranks {
		t.Fatalf("promotions %v, want spare process %d to hold rank 2", res.promotions(), ranks)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(tlsOf) == 0 {
		t.Fatal("no process of the job was seen")
	}
	for pid, v := range tlsOf {
		if v != "1" {
			t.Errorf("process pid %d ran with PGAS_TLS=%s, want 1", pid, v)
		}
	}
	t.Logf("%d processes seen, all with PGAS_TLS=1", len(tlsOf))
}
