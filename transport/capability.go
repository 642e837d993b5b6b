package transport

import (
	"context"
	"path"
	"reflect"
)

// Optional capabilities. A Transport sends frames; what only some
// transports can do is declared here, once, as a named interface that a
// user (package pgas) looks for with a type assertion and does without
// when it is missing, and that a composite transport (transport/route)
// passes on.

// Disconnector: Disconnect closes the connection to peer for good, as if
// it had failed, so that nothing more of a frame it was sending is
// applied (transport/tcp, transport/shm, transport/route).
type Disconnector interface {
	Disconnect(peer Proc, cause error)
}

// Connector is the capability of a transport that connects to a peer on
// its first use (transport/tcp, transport/shm, transport/route):
// Connected reports whether a connection to peer is open now.
type Connector interface {
	Connected(peer Proc) bool
}

// Queuer: Queue hands a small frame to the transport for sending without
// blocking, and reports false when it cannot (the caller then sends it
// through a goroutine that may block). It may be called while handling a
// frame from the same peer (transport/tcp's batches, transport/route for
// its far peers).
type Queuer interface {
	Queue(to Proc, h *Header, payload []byte) bool
}

// Lingerer: SendLater is Send for a frame that nobody waits for yet (for
// package pgas, a write without a notification): a small one may wait in
// the connection's batch, for at most the transport's linger, until a
// frame that must leave now follows it to the same peer, so that a stream
// of them leaves as one train of frames. The order of frames to a peer is
// that of the calls, as with Send (transport/tcp, transport/route for its
// far peers).
type Lingerer interface {
	SendLater(ctx context.Context, to Proc, h *Header, payload []byte) error
}

// Locality answers the one question of where a peer is: IsNear reports
// whether frames to peer go through shared memory on this host now
// (transport/route). Only such peers can share memory (MemorySharer).
type Locality interface {
	IsNear(peer Proc) bool
}

// PeerAdder is the capability of a transport that can learn a process
// that joined the job after the transport started (transport/tcp,
// transport/route through its far transport, transport/mem for tests):
// AddPeer gives it p's address. Adding a known peer again with the same address is a no-op;
// with another address it is an error (process ids are never reused).
type PeerAdder interface {
	AddPeer(p Proc, addr string) error
}

// Paths is the capability of a composite transport (transport/route)
// that sends to some peers through one transport and to the others
// through another: PathNames names both (NameOf each), and IsNear says
// which one a peer's frames take now. The runtime labels its frame
// counters with it, so that shared-memory traffic is told from TCP.
type Paths interface {
	Locality
	PathNames() (near, far string)
}

// NameOf names transport t by its package ("tcp", "shm", "mem", "route"):
// the transport label of the frame counters.
func NameOf(t Transport) string {
	typ := reflect.TypeOf(t)
	if typ == nil {
		return "unknown"
	}
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	if p := typ.PkgPath(); p != "" {
		return path.Base(p)
	}
	return "unknown"
}

// MemorySharer is an optional capability of a transport between the
// processes of one host (transport/shm, and transport/route for its near
// peers): it passes memory (a memfd's descriptor) from one process to
// another over the transport's authenticated socket, the way rings are
// passed. Nothing else is needed to map a peer's memory: no pidfd_getfd,
// so no right to trace the peer (Yama's ptrace_scope 1 refuses that
// between sibling processes), and the owner knows every process it gave
// its memory to.
type MemorySharer interface {
	// FetchMemory asks peer for its memory named key. It returns a
	// descriptor the caller owns (and closes) and the owner's tag for that
	// memory (for package pgas, the segment's generation). It fails if
	// the peer is not reachable this way or its MemoryFunc refused.
	FetchMemory(ctx context.Context, peer Proc, key uint64) (fd int, tag uint64, err error)
	// ShareMemory sets the function that answers the peers' requests. It
	// returns a descriptor that the transport closes once it is sent.
	// Until it is set, every request is refused.
	ShareMemory(f MemoryFunc)
}

// MemoryFunc answers a request from process from for the memory named key:
// a descriptor (closed by the transport after sending it) and a tag, or an
// error (the request is refused; the requester learns only that).
type MemoryFunc func(from Proc, key uint64) (fd int, tag uint64, err error)
