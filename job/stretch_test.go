package job

import (
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/internal/bootstrap"
	"github.com/gaspigo/gaspigo/spares"
)

func tableOn(hosts ...string) bootstrap.Table {
	var t bootstrap.Table
	for i, h := range hosts {
		t.Members = append(t.Members, bootstrap.Member{Proc: uint32(i), Host: h})
	}
	return t
}

func repeat(h string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = h
	}
	return out
}

// The membership's timeouts stretch with the processes per core of this
// process's host only, beyond perCore per core, up to maxStretch.
func TestStretch(t *testing.T) {
	for _, c := range []struct {
		hosts []string
		host  string
		cores int
		want  int
	}{
		{repeat("a", 8), "a", 2, 1},
		{repeat("a", 9), "a", 2, 2},
		{repeat("a", 258), "a", 2, 33 - 1}, // capped
		{repeat("a", 130), "a", 2, 17},
		{append(repeat("a", 100), repeat("b", 4)...), "b", 2, 1},
		{repeat("a", 64), "a", 16, 1},
		{repeat("a", 65), "a", 0, 17}, // an unknown core count counts as one
	} {
		if got := stretch(tableOn(c.hosts...), c.host, c.cores); got != c.want {
			t.Errorf("%d processes, %d on %s, %d cores: factor %d, want %d", len(c.hosts), count(c.hosts, c.host), c.host, c.cores, got, c.want)
		}
	}
	cfg := spares.DefaultConfig()
	cfg.CutOff = 7 * time.Second
	hb, cut := cfg.HeartbeatTimeout, cfg.CutOff
	stretchMembership(&cfg, 4, false)
	if cfg.HeartbeatTimeout != 4*hb || cfg.CutOff != cut {
		t.Errorf("heartbeat %v, cut-off %v; want %v and the user's %v", cfg.HeartbeatTimeout, cfg.CutOff, 4*hb, cut)
	}
	if cfg.LeaderLeaseTimeout > cfg.HeartbeatTimeout {
		t.Errorf("lease %v beyond the heartbeat timeout %v", cfg.LeaderLeaseTimeout, cfg.HeartbeatTimeout)
	}
}

func count(hs []string, h string) int {
	n := 0
	for _, x := range hs {
		if x == h {
			n++
		}
	}
	return n
}
