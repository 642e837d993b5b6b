// Package tcpopt holds the socket options that every TCP connection of a
// job carries, whichever side made it: the data plane's (transport/tcp,
// which also carries the failure detector's heartbeats), the
// membership's (spares: Raft and its control connections) and the
// rendezvous's (internal/bootstrap). Dials take them through Control,
// before connect, so that the handshake's retries obey them too; accepted
// connections through Tune (internal/listen applies it to every one).
//
// The option is a bound on the retransmission timeout. Linux doubles a
// connection's retransmission timeout at each unanswered retransmission,
// up to two minutes: through a silent cut of a few seconds (a host cut
// off and healed, a partition of a switch), the retransmissions come at
// 0.2, 0.6, 1.4, 3.0, 6.2 s ..., so after a cut of 3.8 s the queued
// heartbeats and frames wait 2.4 s more after the heal before the next
// one carries them, and the failure detector and the recovery's
// collectives wait with them. With the bound at MaxRetransmit a
// connection resends at least that often, and the cost after a heal is
// at most that. Kernels without the option (before Linux 6.15) keep
// their backoff; the options are best effort and never fail a
// connection.
package tcpopt

import (
	"net"
	"syscall"
	"time"
)

// MaxRetransmit bounds the time between two retransmissions of
// unacknowledged data, and of a connection request (the kernel accepts
// one second at least). During a long silent cut it costs one segment per
// connection per second.
const MaxRetransmit = time.Second

// Control is a net.Dialer's Control (or a net.ListenConfig's): it applies
// the options to the socket before it connects.
func Control(network, address string, rc syscall.RawConn) error {
	_ = rc.Control(func(fd uintptr) { setOptions(int(fd)) })
	return nil
}

// Tune applies the options to an established connection; a connection
// that is not TCP (a Unix socket, a test's pipe), or wraps none it can
// reach through a NetConn method, is left alone.
func Tune(c net.Conn) {
	for {
		w, ok := c.(interface{ NetConn() net.Conn })
		if !ok {
			break
		}
		c = w.NetConn()
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return
	}
	_ = Control("tcp", "", rc)
}
