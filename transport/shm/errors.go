package shm

import (
	"errors"
	"fmt"

	"github.com/gaspigo/gaspigo/transport"
)

var (
	// ErrConfig is wrapped by Config.Validate and New.
	ErrConfig = errors.New("shm: invalid config")
	// ErrNoPath is wrapped by Send when no shared-memory connection to the
	// peer could be made (nothing listens at its address in this kernel's
	// network namespace, it failed the job-token handshake, or it closed
	// during the set-up). The error wraps transport.ErrPeerDown too, but
	// nothing of the frame was sent and no PeerDown follows: the peer may
	// well be alive on another path, and a router (transport/route) sends
	// to it over TCP instead.
	// It is transport.ErrNoPath.
	ErrNoPath = transport.ErrNoPath
	// ErrUnsupported is returned by New where shared memory rings cannot
	// be built (not Linux).
	ErrUnsupported = errors.New("shm: shared-memory transport needs Linux (memfd_create, file seals, SCM_RIGHTS)")
	// ErrCorrupt is the cause of a peer failure when its ring's shared
	// control words or a frame header read from it do not make sense
	// (indices out of range, an undecodable header). Wraps
	// transport.ErrBadFrame.
	ErrCorrupt = fmt.Errorf("shm: corrupt ring: %w", transport.ErrBadFrame)
	// ErrDisconnected is the cause of a peer failure made by Disconnect
	// when no cause was given.
	ErrDisconnected = errors.New("shm: disconnected")
)

// PeerError is returned by Send to a peer whose connection failed and is
// passed to Handler.PeerDown. It wraps transport.ErrPeerDown and its Cause.
type PeerError struct {
	Peer  transport.Proc
	Cause error
}

func (e *PeerError) Error() string {
	return fmt.Sprintf("shm: connection to proc %d failed: %v", e.Peer, e.Cause)
}

// Unwrap returns transport.ErrPeerDown and the cause.
func (e *PeerError) Unwrap() []error { return []error{transport.ErrPeerDown, e.Cause} }

// noPathError is a Send's error when the first connection to a peer
// failed: it wraps ErrNoPath, transport.ErrPeerDown and the cause.
type noPathError struct {
	peer  transport.Proc
	addr  string
	cause error
}

func (e *noPathError) Error() string {
	return fmt.Sprintf("shm: no shared-memory path to proc %d at %s: %v", e.peer, e.addr, e.cause)
}

func (e *noPathError) Unwrap() []error { return []error{ErrNoPath, transport.ErrPeerDown, e.cause} }
