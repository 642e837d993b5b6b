package pgas

import (
	"context"

	"github.com/gaspigo/gaspigo/transport"
)

// The runtime's seams. A Runtime is given its transport
// (transport.Transport), its membership (Membership) and its launcher
// (Launcher) in Config; the composition root (package job) builds them
// from the environment. What only some implementations can do is declared
// here as a named optional capability, which the runtime looks for with a
// type assertion and does without when it is missing.

// Launcher is this process's line to the launcher that started it
// (gaspirun, through the rendezvous session), which shows progress and
// counts the ranks that are done. Its methods never block and never fail:
// a launcher that is gone drops what it is told. Init takes ownership:
// Close closes it if it implements io.Closer.
type Launcher interface {
	// Event reports a line of progress from rank in epoch.
	Event(rank int, epoch uint64, text string)
	// Vacant reports that rank became vacant in epoch (a job that shrinks),
	// so that the launcher counts it as done rather than lost.
	Vacant(rank int, epoch uint64)
}

// Disconnector is an optional capability of a transport: Disconnect closes
// the connection to peer for good, as if it had failed, so that nothing
// more of a frame it was sending is applied. transport/tcp has it; the
// runtime uses it on processes the membership declared failed, and on
// every peer when this process stops (fenced). Without it, those
// connections end when the transport closes.
type Disconnector interface {
	Disconnect(peer transport.Proc, cause error)
}

// Finisher is an optional capability of a Membership: Finish records that
// the job finished, so that idle spares stop waiting and exit. Finalize
// calls it on the lowest live rank (package spares has it).
type Finisher interface {
	Finish(ctx context.Context) error
}

// Queuer is an optional capability of a transport: Queue hands a small
// frame to the transport for sending without blocking, and reports false
// when it cannot (the caller then sends it through a goroutine that may
// block). It may be called while handling a frame from the same peer.
// transport/tcp has it (its batches, tcp.Config.BatchFrame); the runtime
// answers a peer's request for acknowledgement with it straight from the
// reader, sparing a goroutine hand-off on every Wait.
type Queuer interface {
	Queue(to transport.Proc, h *transport.Header, payload []byte) bool
}
