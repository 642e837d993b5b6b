package mem

import (
	"errors"
	"fmt"

	"github.com/gaspigo/gaspigo/transport"
)

var (
	// ErrNotStarted is returned by Send before Start.
	ErrNotStarted = errors.New("mem: transport not started")
	// ErrStarted is returned by a second Start.
	ErrStarted = errors.New("mem: transport already started")
	// ErrNilHandler is returned by Start(nil).
	ErrNilHandler = errors.New("mem: nil handler")
	// ErrNetworkClosed is returned by the fault-hub calls (Kill, Partition,
	// Drop, Delay) after Network.Close, and is the cause inside errors of
	// Sends cut short by it.
	ErrNetworkClosed = errors.New("mem: network closed")
	// ErrBadProc is returned by Kill, Partition, Drop and Delay for a Proc
	// outside 0..Size()-1 (and not Any where a wildcard is allowed), by
	// Partition for a Proc named in two groups, by AddPeer for a Proc with
	// no endpoint, this endpoint or a wrong address, and by AddEndpoint on
	// a network at its size limit.
	ErrBadProc = errors.New("mem: bad proc")
	// ErrBadFault is returned by Drop and Delay for a probability outside
	// [0, 1] or a negative duration.
	ErrBadFault = errors.New("mem: bad fault parameter")
	// ErrConfig is wrapped by Config.Validate and New.
	ErrConfig = errors.New("mem: invalid config")

	// ErrKilled is the cause inside a PeerError when the peer was killed by
	// Network.Kill.
	ErrKilled = errors.New("mem: peer killed")
	// ErrPeerClosed is the cause inside a PeerError when the peer called
	// Close.
	ErrPeerClosed = errors.New("mem: peer closed")
	// ErrDropped is the cause inside a PeerError when the fault hub dropped
	// a frame on the connection (Drop or a BeforeFrame hook returning
	// DropFrame), which breaks it.
	ErrDropped = errors.New("mem: frame dropped by fault hub")
)

// PeerError is returned by Send to a peer whose connection failed and is
// passed to Handler.PeerDown. It wraps transport.ErrPeerDown and its Cause
// (ErrKilled, ErrPeerClosed or ErrDropped), so both errors.Is checks work.
type PeerError struct {
	Peer  transport.Proc
	Cause error
}

func (e *PeerError) Error() string {
	return fmt.Sprintf("mem: connection to proc %d failed: %v", e.Peer, e.Cause)
}

// Unwrap returns transport.ErrPeerDown and the cause.
func (e *PeerError) Unwrap() []error { return []error{transport.ErrPeerDown, e.Cause} }
