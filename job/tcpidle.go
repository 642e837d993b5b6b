package job

import (
	"strings"
	"time"

	"github.com/gaspigo/gaspigo/internal/bootstrap"
	"github.com/gaspigo/gaspigo/transport/tcp"
)

// VarTCPIdle is how long a data-plane TCP connection may carry no frame
// before both ends close it (tcp.Config.IdleTimeout), as a Go duration;
// "0" keeps every connection open. Unset: tcp.DefaultIdleTimeout (2m).
// The next frame to the peer dials it again; the connections a rank
// works with every iteration never go idle.
const VarTCPIdle = "PGAS_TCP_IDLE"

// tcpIdle reads PGAS_TCP_IDLE.
func tcpIdle(lookup func(string) (string, bool)) (time.Duration, error) {
	v, ok := lookup(VarTCPIdle)
	if !ok || strings.TrimSpace(v) == "" {
		return tcp.DefaultIdleTimeout, nil
	}
	s := strings.TrimSpace(v)
	if s == "0" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 10*time.Millisecond {
		return 0, &bootstrap.EnvError{Var: VarTCPIdle, Value: v, Problem: "is not a duration of at least 10ms",
			Fix: "give a Go duration such as 2m, or 0 to keep idle connections open"}
	}
	return d, nil
}
