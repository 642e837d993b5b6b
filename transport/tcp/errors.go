package tcp

import (
	"errors"
	"fmt"

	"github.com/gaspigo/gaspigo/transport"
)

// Sentinel errors of this package. Send also returns the sentinels of package
// transport: transport.ErrClosed after Close, transport.ErrUnknownPeer for a
// Proc with no address and no connection, transport.ErrTooLarge for a payload
// above transport.MaxPayload, and a *PeerDownError (which wraps
// transport.ErrPeerDown) for a peer whose connection failed.
var (
	// ErrConfig is wrapped by Config.Validate and New when a Config field is
	// out of range. The message names the field and the value.
	ErrConfig = errors.New("tcp: invalid config")
	// ErrNotStarted is returned by Send before Start.
	ErrNotStarted = errors.New("tcp: transport not started")
	// ErrStarted is returned by a second call to Start.
	ErrStarted = errors.New("tcp: transport already started")
	// ErrPeers is wrapped by SetPeers and AddPeer when an address is
	// unusable: a malformed address (not host:port with a port 1..65535),
	// NoProc, a new address for a known peer, or (AddPeer) this process.
	ErrPeers = errors.New("tcp: invalid peer table")
)

// PeerDownError is returned by Send to a peer whose connection failed.
// Handler.PeerDown receives the same cause as Err. errors.Is(err, transport.ErrPeerDown) holds for it, and so does
// errors.Is(err, cause) for whatever made the connection fail (io.EOF, a
// reset, context.DeadlineExceeded when a write was cut by the caller's
// deadline, ...).
type PeerDownError struct {
	Peer transport.Proc
	Err  error
}

func (e *PeerDownError) Error() string {
	return fmt.Sprintf("tcp: peer %d down: %v", e.Peer, e.Err)
}

// Unwrap returns transport.ErrPeerDown and the cause.
func (e *PeerDownError) Unwrap() []error { return []error{transport.ErrPeerDown, e.Err} }
