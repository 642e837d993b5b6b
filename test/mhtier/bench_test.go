package mhtier

import (
	"context"
	"strings"
	"testing"

	"github.com/gaspigo/gaspigo/internal/testkit/mhjob"
)

// TestBenchAcrossHosts: gaspibench between node1 and node2, with its
// plain-TCP baselines, ends with exit 0 and prints its measurements. Rank
// 1's baseline listener must be reachable from the other host: it once
// advertised the machine's hostname, which only its own host resolves.
func TestBenchAcrossHosts(t *testing.T) {
	c := newCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), resultWait)
	defer cancel()
	j, err := mhjob.Start(ctx, mhjob.Config{Cluster: c, Program: bins.gaspibench, Hosts: []int{0, 1},
		Args: []string{"--csv", "--tests", "lat,raw", "--lat-sizes", "8", "--iters", "20", "--warmup", "5", "--min-time", "0"},
		Env:  []string{"GOMAXPROCS=1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Kill()
	if err := j.Wait(ctx); err != nil {
		t.Fatalf("gaspibench did not end: %v\n%s", err, strings.Join(j.Text(), "\n"))
	}
	for _, p := range j.Procs() {
		if code, sig, _, _ := p.Exit(); code != 0 || sig != 0 {
			t.Fatalf("process %d on %s: exit %d, signal %v\n%s", p.ID, j.Host(p.ID).Name(), code, sig, strings.Join(j.Text(), "\n"))
		}
	}
	for _, l := range j.Lines() {
		// write_notify_rtt,ranks,size,,iters,,,raw_iters,...: a raw baseline
		// was measured when raw_iters is set.
		if f := strings.Split(l.Text, ","); l.Proc == 0 && f[0] == "write_notify_rtt" && len(f) > 7 && f[7] != "" {
			return
		}
	}
	t.Fatalf("no write+notify ping-pong with a raw baseline in rank 0's output\n%s", strings.Join(j.Text(), "\n"))
}
