package transport

import "context"

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
