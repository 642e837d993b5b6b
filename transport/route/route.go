package route

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/gaspigo/gaspigo/transport"
)

var (
	// ErrConfig is wrapped by Config.Validate and New.
	ErrConfig = errors.New("route: invalid config")
	// ErrPeers is wrapped by AddPeer when the peer cannot be added: Far
	// cannot learn peers, or the peer is near.
	ErrPeers = errors.New("route: cannot add the peer")
)

// Config configures a Router.
type Config struct {
	// Near carries frames to the peers in NearPeers; Far to every other.
	Near, Far transport.Transport
	// NearPeers are the peers that start on Near.
	NearPeers []transport.Proc
	// Fallback reports whether an error from Near.Send means that Near
	// cannot reach the peer at all and nothing was sent (the peer moves to
	// Far). Nil means errors.Is(err, transport.ErrNoPath).
	Fallback func(error) bool
}

// Validate checks the configuration without changing it.
func (c *Config) Validate() error {
	switch {
	case c.Near == nil || c.Far == nil:
		return fmt.Errorf("%w: Near and Far are both required", ErrConfig)
	case c.Near.Self() != c.Far.Self():
		return fmt.Errorf("%w: Near is for proc %d, Far for proc %d", ErrConfig, c.Near.Self(), c.Far.Self())
	}
	for _, p := range c.NearPeers {
		if p == c.Far.Self() {
			return fmt.Errorf("%w: NearPeers names this process (%d)", ErrConfig, p)
		}
	}
	return nil
}

// Router is the transport. See the package doc.
type Router struct {
	near, far transport.Transport
	fallback  func(error) bool

	mu    sync.RWMutex
	route map[transport.Proc]bool // true: Near
	moved map[transport.Proc]bool // moved from Near to Far
}

// New returns a router over cfg's transports; it owns them from here on
// (Close closes both).
func New(cfg Config) (*Router, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &Router{near: cfg.Near, far: cfg.Far, fallback: cfg.Fallback,
		route: map[transport.Proc]bool{}, moved: map[transport.Proc]bool{}}
	if r.fallback == nil {
		r.fallback = func(err error) bool { return errors.Is(err, transport.ErrNoPath) }
	}
	for _, p := range cfg.NearPeers {
		r.route[p] = true
	}
	return r, nil
}

// Self returns this process's ID.
func (r *Router) Self() transport.Proc { return r.far.Self() }

// Near returns the transport for same-host peers (for its counters).
func (r *Router) Near() transport.Transport { return r.near }

// Far returns the transport for the other peers (for its counters).
func (r *Router) Far() transport.Transport { return r.far }

// PathNames names Near and Far (transport.Paths).
func (r *Router) PathNames() (near, far string) {
	return transport.NameOf(r.near), transport.NameOf(r.far)
}

// IsNear reports whether frames to peer go through Near now
// (transport.Locality).
func (r *Router) IsNear(peer transport.Proc) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.route[peer]
}

var _ transport.PeerAdder = (*Router)(nil)

// AddPeer gives Far the address of p, a process that joined the job after
// the router started (transport.PeerAdder). Such a process is never near:
// it shares no memory with this one (collectives place it on a host of
// its own), so its frames always go through Far. It returns an error
// wrapping ErrPeers when Far cannot learn peers or p is one of NearPeers,
// and Far's own error (a bad address, a known peer at another address).
func (r *Router) AddPeer(p transport.Proc, addr string) error {
	pa, ok := r.far.(transport.PeerAdder)
	if !ok {
		return fmt.Errorf("%w: proc %d: the far transport (%s) cannot learn peers after it started", ErrPeers, p, transport.NameOf(r.far))
	}
	r.mu.RLock()
	near := r.route[p]
	r.mu.RUnlock()
	if near {
		return fmt.Errorf("%w: proc %d is a near peer (shared memory on this host), and a process that joined the job is never near: give it a new id", ErrPeers, p)
	}
	return pa.AddPeer(p, addr)
}

// Start starts both transports with h.
func (r *Router) Start(h transport.Handler) error {
	if err := r.near.Start(nearHandler{r, h}); err != nil {
		return err
	}
	return r.far.Start(h)
}

// Send sends through the peer's transport; see the package doc for the
// move to Far.
func (r *Router) Send(ctx context.Context, to transport.Proc, h *transport.Header, payload []byte) error {
	if !r.IsNear(to) {
		return r.far.Send(ctx, to, h, payload)
	}
	err := r.near.Send(ctx, to, h, payload)
	if err == nil || !r.fallback(err) {
		return err
	}
	r.mu.Lock()
	r.route[to] = false
	r.moved[to] = true
	r.mu.Unlock()
	return r.far.Send(ctx, to, h, payload)
}

// SendLater hands a frame to Far's SendLater when the peer is reached
// through Far and Far can hold frames back (transport.Lingerer); every
// other frame takes Send.
func (r *Router) SendLater(ctx context.Context, to transport.Proc, h *transport.Header, payload []byte) error {
	if l, ok := r.far.(transport.Lingerer); ok && !r.IsNear(to) {
		return l.SendLater(ctx, to, h, payload)
	}
	return r.Send(ctx, to, h, payload)
}

// FetchMemory asks a near peer for its memory (transport.MemorySharer)
// through Near; it fails with transport.ErrNoSharedMemory for a peer that
// is not near (on another host, or moved to Far when Near could not reach
// it: a peer never moves back), or when Near cannot share memory.
func (r *Router) FetchMemory(ctx context.Context, peer transport.Proc, key uint64) (int, uint64, error) {
	ms, ok := r.near.(transport.MemorySharer)
	if !ok || !r.IsNear(peer) {
		return -1, 0, fmt.Errorf("route: proc %d: %w (%w)", peer, transport.ErrNoSharedMemory, transport.ErrUnknownPeer)
	}
	return ms.FetchMemory(ctx, peer, key)
}

// ShareMemory sets Near's answer to memory requests
// (transport.MemorySharer), if Near can share memory.
func (r *Router) ShareMemory(f transport.MemoryFunc) {
	if ms, ok := r.near.(transport.MemorySharer); ok {
		ms.ShareMemory(f)
	}
}

// Disconnect cuts peer on both transports (those that can:
// transport.Disconnector).
func (r *Router) Disconnect(peer transport.Proc, cause error) {
	for _, t := range []transport.Transport{r.near, r.far} {
		if d, ok := t.(transport.Disconnector); ok {
			d.Disconnect(peer, cause)
		}
	}
}

// Connected reports whether a connection to peer is open on either
// transport (transport.Connector); a transport that cannot tell counts
// as connected to every peer.
func (r *Router) Connected(peer transport.Proc) bool {
	for _, t := range []transport.Transport{r.near, r.far} {
		c, ok := t.(transport.Connector)
		if !ok || c.Connected(peer) {
			return true
		}
	}
	return false
}

// Queue hands a small frame to Far without blocking, when Far can
// (transport.Queuer) and the peer is reached through it; it reports
// false otherwise, and the caller sends the frame with Send. Frames to
// Near peers always take Send: a ring may be full, and Queue must not
// block.
func (r *Router) Queue(to transport.Proc, h *transport.Header, payload []byte) bool {
	q, ok := r.far.(transport.Queuer)
	if !ok || r.IsNear(to) {
		return false
	}
	return q.Queue(to, h, payload)
}

// Close closes both transports and returns the first error.
func (r *Router) Close() error {
	return errors.Join(r.near.Close(), r.far.Close())
}

// nearHandler passes Near's frames on, and its PeerDowns except those of
// peers that moved to Far (or will: the error says Near cannot reach them).
type nearHandler struct {
	r *Router
	h transport.Handler
}

func (n nearHandler) HandleFrame(from transport.Proc, h *transport.Header, p transport.Payload) error {
	return n.h.HandleFrame(from, h, p)
}

func (n nearHandler) PeerDown(peer transport.Proc, err error) {
	if n.r.fallback(err) {
		return
	}
	n.r.mu.RLock()
	moved := n.r.moved[peer]
	n.r.mu.RUnlock()
	if moved {
		return
	}
	n.h.PeerDown(peer, err)
}
