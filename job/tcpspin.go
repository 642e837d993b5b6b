package job

import (
	"strings"
	"time"

	"github.com/gaspigo/gaspigo/internal/bootstrap"
	"github.com/gaspigo/gaspigo/transport/tcp"
)

// VarTCPSpin is how long each data-plane TCP connection's reader polls its
// socket before it sleeps in the network poller (tcp.Config.PollSpin), as
// a Go duration of at most 10ms; "0" never polls. Unset, the job chooses
// (autoTCPSpin): AutoTCPSpin when this machine runs no more of the job's
// processes than it has CPUs, whatever their host labels (machine.go), 0
// otherwise. Options.TCP overrides both.
const VarTCPSpin = "PGAS_TCP_SPIN"

// AutoTCPSpin is the reader's polling when every process of the host has
// a CPU of its own and PGAS_TCP_SPIN is unset. A frame then lands in a
// running reader: no wake-up through the kernel and the scheduler, which
// made the 8-byte round trip over TCP take 2-4 times as long on a 2-core
// host (bench/RESULTS.md, issue 35). 200 µs rather than shared memory's 50:
// between two windows of writes a receiver waits for the ack to reach the
// writer and the writer's next window to leave, often longer than 50 µs,
// and a reader that slept by then cost the 8-byte message rate half its
// figure (bench/RESULTS.md, "A longer poll").
const AutoTCPSpin = 200 * time.Microsecond

// tcpSpin reads PGAS_TCP_SPIN; auto is true when it is unset.
func tcpSpin(lookup func(string) (string, bool)) (spin time.Duration, auto bool, err error) {
	v, ok := lookup(VarTCPSpin)
	if !ok || strings.TrimSpace(v) == "" {
		return 0, true, nil
	}
	s := strings.TrimSpace(v)
	if s == "0" {
		return 0, false, nil
	}
	d, perr := time.ParseDuration(s)
	if perr != nil || d < 0 || d > 10*time.Millisecond {
		return 0, false, &bootstrap.EnvError{Var: VarTCPSpin, Value: v, Problem: "is not a duration between 0 and 10ms",
			Fix: "give a Go duration such as 50us, or 0 to sleep at once; leave it unset to poll only when every process of the host has a CPU"}
	}
	return d, false, nil
}

// autoTCPSpin is the reader's polling for a host running local of the
// job's processes on cpus CPUs: only when each can have a CPU, since a
// polling reader holds its CPU for up to AutoTCPSpin after each frame.
func autoTCPSpin(local, cpus int) time.Duration {
	if local <= cpus {
		return AutoTCPSpin
	}
	return 0
}

// adjustTCP applies Options.TCP (adjust) to c over PGAS_TCP_SPIN's spin
// (auto: unset), and reports whether the job still chooses the reader's
// polling: neither the variable nor adjust set it.
func adjustTCP(c *tcp.Config, adjust func(*tcp.Config), spin time.Duration, auto bool) bool {
	c.PollSpin = -1
	if adjust != nil {
		adjust(c)
	}
	if c.PollSpin >= 0 {
		return false
	}
	c.PollSpin = spin
	return auto
}
