package job

import (
	"time"

	"github.com/gaspigo/gaspigo/internal/bootstrap"
	"github.com/gaspigo/gaspigo/spares"
)

// Oversubscribed hosts.
//
// The membership's timeouts are set for a host with a core or so per
// process: a Raft heartbeat of 150 ms, a handshake of 2 s. With hundreds
// of processes on a few cores (a job tried at scale on one machine, or a
// node packed for throughput) the kernel runs each process for a few
// milliseconds in every round of hundreds, a round takes hundreds of
// milliseconds, and those timeouts measure the scheduler, not the peers:
// handshakes time out, Raft's voters elect and re-elect, and processes
// that hear no leader for the cut-off give up (at 256 processes on 2
// cores: no leader for 35 s, 239 processes cut off). So the membership's
// timeouts grow with the processes per core of this process's host, once
// there are more than perCore of them per core. Failure detection of a
// SIGKILLed process does not wait for them (a closed connection is strong
// evidence, and the voters' fast failover dials the leader's address);
// what grows is the time to notice a silent leader and the time a
// partitioned process takes to give up.

// perCore is how many processes per core the default timeouts suit.
const perCore = 4

// maxStretch caps the factor: at 64 the cut-off is over ten minutes.
const maxStretch = 32

// stretch returns the factor for the membership's timeouts of a process
// on host, in a job whose member table is table, on a machine of cores
// cores: 1 up to perCore processes per core, then their number per
// perCore cores, rounded up, at most maxStretch.
func stretch(table bootstrap.Table, host string, cores int) int {
	n := 0
	for _, m := range table.Members {
		if m.Host == host {
			n++
		}
	}
	cap := perCore * max(cores, 1)
	return min(max(1, (n+cap-1)/cap), maxStretch)
}

// stretchMembership multiplies the membership's timeouts by f, the
// cut-off too unless the user set it (PGAS_CUTOFF).
func stretchMembership(cfg *spares.Config, f int, cutOff bool) {
	ds := []*time.Duration{&cfg.HeartbeatTimeout, &cfg.ElectionTimeout, &cfg.LeaderLeaseTimeout,
		&cfg.TransportTimeout, &cfg.HandshakeTimeout, &cfg.RPCTimeout, &cfg.StandingInterval, &cfg.ShutdownTimeout}
	if cutOff {
		ds = append(ds, &cfg.CutOff)
	}
	for _, d := range ds {
		*d *= time.Duration(f)
	}
}
