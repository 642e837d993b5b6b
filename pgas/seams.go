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

// Disconnector, Queuer and Connector are the transport's optional
// capabilities the runtime uses (package transport declares them):
// Disconnect on the processes the membership declared failed, and on every
// peer when this process stops (fenced); Queue to answer a peer's request
// for acknowledgement straight from the reader, sparing a goroutine
// hand-off on every Wait; Connected to send goodbyes and fenced notices
// only over connections that are up; SendLater (Lingerer) for a write
// without a notification, which the transport may hold back until the
// next frame that must leave now (a notification, the Wait's request for
// acknowledgement), so that a window of small writes leaves as one train.
// transport.Locality and transport.MemorySharer serve direct writes
// (direct.go).
type (
	Disconnector = transport.Disconnector
	Queuer       = transport.Queuer
	Connector    = transport.Connector
	Lingerer     = transport.Lingerer
)

// Leading is an optional capability of a Membership: Leader returns the
// process it believes leads it (package spares: the Raft leader), and
// false when it knows none. Runtime.Leader passes it on.
type Leading interface {
	Leader() (proc transport.Proc, ok bool)
}

// LeaderMover is an optional capability of a Membership:
// MoveLeaderToRank moves its leadership onto a process that holds a rank,
// unless its leader holds one already (package spares: a Raft leadership
// transfer to the lowest live voter holding one), and returns the leader. An idle spare often leads; a
// program or test that means the leader to die with a rank (kill:leader)
// moves it first.
type LeaderMover interface {
	MoveLeaderToRank(ctx context.Context) (transport.Proc, error)
}

// Finisher is an optional capability of a Membership: Finish records that
// the job finished, so that idle spares stop waiting and exit. Finalize
// calls it on the lowest live rank (package spares has it).
type Finisher interface {
	Finish(ctx context.Context) error
}
