package mem

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/gaspigo/gaspigo/transport"
)

// memFuncs holds each endpoint's answer to memory requests, by endpoint.
type memFuncs struct {
	f atomic.Pointer[transport.MemoryFunc]
}

// ShareMemory sets the function that answers the peers' memory requests
// (transport.MemorySharer). Within one process a descriptor is valid as
// it is: FetchMemory returns the peer's answer unchanged.
func (t *Transport) ShareMemory(f transport.MemoryFunc) { t.mem.f.Store(&f) }

// FetchMemory asks peer for its memory named key (transport.MemorySharer).
// It fails like a send would: the peer dead or partitioned from this
// endpoint, or not answering memory requests.
func (t *Transport) FetchMemory(ctx context.Context, peer transport.Proc, key uint64) (int, uint64, error) {
	n := t.net
	n.mu.Lock()
	var ep *Transport
	if int64(peer) < int64(n.size) && peer != t.self && t.knowsLocked(peer) {
		ep = n.eps[peer]
	}
	n.mu.Unlock()
	if ep == nil {
		return -1, 0, fmt.Errorf("mem: fetch memory from proc %d: %w", peer, transport.ErrUnknownPeer)
	}
	if err := ctx.Err(); err != nil {
		return -1, 0, err
	}
	if !n.Alive(t.self) || !n.Alive(peer) || n.faults.Load().partitioned(t.self, peer) {
		return -1, 0, fmt.Errorf("mem: fetch memory from proc %d: %w", peer, transport.ErrPeerDown)
	}
	f := ep.mem.f.Load()
	if f == nil {
		return -1, 0, fmt.Errorf("mem: proc %d shares no memory", peer)
	}
	return (*f)(t.self, key)
}
