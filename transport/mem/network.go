package mem

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gaspigo/gaspigo/transport"
)

// maxProcs bounds the size of a Network; the fault hub keeps one int32 per
// proc for partitions.
const maxProcs = 1 << 24

// Any is the wildcard Proc for Drop and Delay: Drop(Any, 3, p) applies to
// every link into proc 3.
const Any = transport.NoProc

// Action is what a BeforeFrame hook decides for one frame.
type Action int

const (
	// Deliver hands the frame to the receiver.
	Deliver Action = iota
	// DropFrame loses the frame. Since the transport contract forbids
	// silent loss, the connection between the two procs breaks: both ends
	// get PeerDown and later Sends between them fail with ErrPeerDown.
	DropFrame
	// Hold parks the frame, and with it every later frame on the same link,
	// until the fault configuration next changes (Heal, Partition, Drop,
	// Delay, a new hook); then the hook is asked again.
	Hold
)

func (a Action) String() string {
	switch a {
	case Deliver:
		return "deliver"
	case DropFrame:
		return "drop"
	case Hold:
		return "hold"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// BeforeFunc is a BeforeFrame hook. It runs on the link's delivery
// goroutine, concurrently for different links, and may modify *h (the
// receiver sees the change).
type BeforeFunc func(from, to transport.Proc, h *transport.Header) Action

// AfterFunc is an AfterFrame hook, called after the receiver's HandleFrame
// returned, on the link's delivery goroutine.
type AfterFunc func(from, to transport.Proc, h *transport.Header)

// Stats counts frames across the whole network.
type Stats struct {
	Sent      uint64 // frames accepted by Send
	Delivered uint64 // frames handed to a HandleFrame
	Rejected  uint64 // frames whose HandleFrame returned an error
	Dropped   uint64 // frames dropped by the fault hub (each broke a connection)
}

// Network is a set of in-process endpoints plus the fault hub that sits on
// every link between them. Create it with NewNetwork, get endpoints with
// Endpoint, and Close it when done.
type Network struct {
	base     int // the endpoints New made, known to every endpoint
	seed     int64
	queueLen int
	log      *slog.Logger
	faults   atomic.Pointer[faultState] // replaced, never mutated, under mu

	mu     sync.Mutex
	size   int          // endpoints now: base plus those AddEndpoint added
	eps    []*Transport // indexed by proc; only grows
	closed bool
	conns  map[uint64]*conn

	wg sync.WaitGroup // every goroutine of the network

	sent, delivered, rejected, dropped atomic.Uint64
}

// New returns a network of n endpoints, procs 0..n-1, none started.
func New(n int, cfg Config) (*Network, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if n < 1 || n > maxProcs {
		return nil, fmt.Errorf("%w: a network of %d procs; use 1..%d", ErrConfig, n, maxProcs)
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	nw := &Network{
		base:     n,
		size:     n,
		seed:     cfg.Seed,
		queueLen: cfg.queueLen(),
		log:      logger.With("transport", "mem"),
		eps:      make([]*Transport, n),
		conns:    make(map[uint64]*conn),
	}
	for i := range nw.eps {
		nw.eps[i] = nw.newEndpoint(transport.Proc(i))
	}
	nw.faults.Store(&faultState{changed: make(chan struct{})})
	return nw, nil
}

func (n *Network) newEndpoint(p transport.Proc) *Transport {
	return &Transport{
		net:       n,
		self:      p,
		startedCh: make(chan struct{}),
		deadCh:    make(chan struct{}),
	}
}

// AddEndpoint adds an endpoint for a process that joins the job after it
// formed: its Proc is the next one (Size before the call), and Size grows
// by one. As over TCP, where a joiner's address reaches the others
// through the membership, the other endpoints do not know it: a Send to
// it fails with transport.ErrUnknownPeer until the sender's AddPeer with
// its Addr (or until it sent them a frame first, which makes the
// connection). The new endpoint knows the network's first endpoints
// (New's n), and the later ones it is given with AddPeer. It returns
// ErrNetworkClosed after Close, and ErrBadProc when the network is at its
// size limit.
func (n *Network) AddEndpoint() (*Transport, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, ErrNetworkClosed
	}
	if n.size >= maxProcs {
		return nil, fmt.Errorf("%w: AddEndpoint on a network of %d procs, the most it may have", ErrBadProc, n.size)
	}
	ep := n.newEndpoint(transport.Proc(n.size))
	n.eps = append(n.eps, ep)
	n.size++
	n.log.Info("endpoint added", "proc", ep.self)
	return ep, nil
}

// endpoint returns proc p's endpoint, nil when there is none.
func (n *Network) endpoint(p transport.Proc) *Transport {
	n.mu.Lock()
	defer n.mu.Unlock()
	if int64(p) >= int64(n.size) {
		return nil
	}
	return n.eps[p]
}

// NewNetwork is New for tests and simulations, where a bad argument is a bug
// in the caller: it panics with New's error instead of returning it.
func NewNetwork(n int, cfg Config) *Network {
	nw, err := New(n, cfg)
	if err != nil {
		panic(err)
	}
	return nw
}

// Seed returns the seed the fault decisions are drawn from.
func (n *Network) Seed() int64 { return n.seed }

// Size returns the number of endpoints (AddEndpoint adds to it).
func (n *Network) Size() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.size
}

// Endpoint returns proc p's transport; repeated calls return the same one.
// It panics if p is not in 0..Size()-1, which is a bug in the caller.
func (n *Network) Endpoint(p transport.Proc) *Transport {
	ep := n.endpoint(p)
	if ep == nil {
		panic(fmt.Sprintf("mem: Endpoint(%d) on a network of %d procs", p, n.Size()))
	}
	return ep
}

// Transports returns every endpoint as a transport.Transport, indexed by
// proc.
func (n *Network) Transports() []transport.Transport {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make([]transport.Transport, n.size)
	for i, ep := range n.eps {
		out[i] = ep
	}
	return out
}

// Stats returns the network's frame counters.
func (n *Network) Stats() Stats {
	return Stats{
		Sent:      n.sent.Load(),
		Delivered: n.delivered.Load(),
		Rejected:  n.rejected.Load(),
		Dropped:   n.dropped.Load(),
	}
}

// Close stops every endpoint and goroutine of the network and waits for
// them. No PeerDown calls are made for it. It is idempotent; Sends after it
// return transport.ErrClosed. Do not call it from a Handler or hook.
func (n *Network) Close() error {
	n.mu.Lock()
	if !n.closed {
		n.closed = true
		for _, ep := range n.eps {
			if !ep.dead {
				ep.dead = true
				ep.cause = ErrNetworkClosed
				close(ep.deadCh)
			}
		}
		for _, c := range n.conns {
			n.breakLocked(c, ErrNetworkClosed, false)
		}
		n.log.Info("network closed")
	}
	n.mu.Unlock()
	n.wg.Wait()
	return nil
}

// Kill crashes proc p: its connections fail, frames in flight to and from it
// are lost, every peer connected to it gets PeerDown(p) (a peer that was not
// connected gets it on its next Send to p, which fails), and its own Sends
// return transport.ErrClosed. Kill does not wait for a HandleFrame that p is
// running; p.Close does. Killing a dead proc does nothing.
func (n *Network) Kill(p transport.Proc) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if int64(p) >= int64(n.size) {
		return fmt.Errorf("%w: Kill(%d) on a network of %d procs", ErrBadProc, p, n.size)
	}
	if n.closed {
		return ErrNetworkClosed
	}
	n.killLocked(n.eps[p], ErrKilled)
	return nil
}

// Alive reports whether proc p has been neither killed nor closed.
func (n *Network) Alive(p transport.Proc) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return int64(p) < int64(n.size) && !n.eps[p].dead
}

// --- connections ---

// conn is the connection between two procs a <= b: two directed links,
// created on first send, that fail together.
type conn struct {
	a, b     transport.Proc
	stop     chan struct{} // closed when the connection breaks
	broken   bool
	cause    error
	links    [2]*link // [0] a->b, [1] b->a
	notified [2]bool  // [0] a was told about b, [1] b about a
}

func connKey(x, y transport.Proc) (uint64, transport.Proc, transport.Proc) {
	if x > y {
		x, y = y, x
	}
	return uint64(x)<<32 | uint64(y), x, y
}

// side is the index of proc p's end of c.
func (c *conn) side(p transport.Proc) int {
	if p == c.a {
		return 0
	}
	return 1
}

func (c *conn) other(p transport.Proc) transport.Proc {
	if p == c.a {
		return c.b
	}
	return c.a
}

// errFor is the error proc p sees for the broken connection.
func (c *conn) errFor(p transport.Proc) error {
	return &PeerError{Peer: c.other(p), Cause: c.cause}
}

// connLocked returns the connection between from and to, creating it. A
// connection to a dead proc is created broken.
func (n *Network) connLocked(from, to transport.Proc) *conn {
	key, a, b := connKey(from, to)
	c := n.conns[key]
	if c != nil {
		return c
	}
	c = &conn{a: a, b: b, stop: make(chan struct{})}
	n.conns[key] = c
	n.eps[a].addConn(b, c)
	n.eps[b].addConn(a, c)
	if peer := n.eps[to]; peer.dead {
		n.breakLocked(c, peer.cause, true)
	}
	return c
}

// breakLocked fails c: its links stop, queued frames are lost, and with
// notify both live ends get PeerDown (once each).
func (n *Network) breakLocked(c *conn, cause error, notify bool) {
	if c.broken {
		return
	}
	c.broken = true
	c.cause = cause
	close(c.stop)
	if notify {
		n.notifyLocked(n.eps[c.a], c)
		if c.b != c.a {
			n.notifyLocked(n.eps[c.b], c)
		}
	}
}

// notifyLocked schedules PeerDown on ep for the broken c, unless ep is dead,
// was told already, or has not started (Start catches up).
func (n *Network) notifyLocked(ep *Transport, c *conn) {
	s := c.side(ep.self)
	if ep.dead || n.closed || !ep.started || c.notified[s] {
		return
	}
	c.notified[s] = true
	peer := c.other(ep.self)
	in := c.links[1-s] // peer -> ep, may be nil
	if c.a == c.b {
		in = c.links[0]
	}
	err := c.errFor(ep.self)
	h := ep.handler
	ep.goFunc(func() {
		// PeerDown comes after the last HandleFrame from peer has returned.
		if in != nil {
			select {
			case <-in.done:
			case <-ep.deadCh:
				return
			}
		}
		n.mu.Lock()
		dead := ep.dead
		n.mu.Unlock()
		if !dead {
			h.PeerDown(peer, err)
		}
	})
}

func (n *Network) killLocked(ep *Transport, cause error) {
	if ep.dead {
		return
	}
	ep.dead = true
	ep.cause = cause
	close(ep.deadCh)
	for _, c := range ep.conns {
		n.breakLocked(c, cause, true)
	}
	n.log.Info("proc down", "proc", ep.self, "cause", cause, "connections", len(ep.conns))
}

// --- links ---

type frame struct {
	h       transport.Header
	payload []byte
	sent    time.Time
}

// link is one direction of a conn, with its queue and delivery goroutine.
// The goroutine belongs to the receiver.
type link struct {
	c        *conn
	from, to *Transport
	q        chan *frame
	done     chan struct{} // closed when the delivery goroutine has exited
	drop     *rand.Rand    // drop decisions, used only by the delivery goroutine
	jitter   *rand.Rand    // delay jitter, likewise
}

// linkLocked returns the from->to link, creating it and its goroutine on
// first use, or the error for a broken connection.
func (n *Network) linkLocked(from *Transport, to transport.Proc) (*link, error) {
	c := n.connLocked(from.self, to)
	if c.broken {
		return nil, c.errFor(from.self)
	}
	i := c.side(from.self)
	if l := c.links[i]; l != nil {
		return l, nil
	}
	stream := uint64(from.self)<<32 | uint64(to)
	l := &link{
		c:      c,
		from:   from,
		to:     n.eps[to],
		q:      make(chan *frame, n.queueLen),
		done:   make(chan struct{}),
		drop:   rand.New(rand.NewPCG(uint64(n.seed), stream)),
		jitter: rand.New(rand.NewPCG(uint64(n.seed)^0x9e3779b97f4a7c15, stream)),
	}
	c.links[i] = l
	l.to.goFunc(func() { n.runLink(l) })
	return l, nil
}

func (n *Network) runLink(l *link) {
	defer close(l.done)
	select {
	case <-l.to.startedCh:
	case <-l.c.stop:
		return
	}
	h := l.to.handler // written before startedCh was closed
	for {
		var f *frame
		select {
		case f = <-l.q:
		case <-l.c.stop:
			return
		}
		if !n.deliver(l, f, h) {
			return
		}
	}
}

// deliver runs one frame through the fault hub and into the handler. It
// reports false when the link is finished.
func (n *Network) deliver(l *link, f *frame, h transport.Handler) bool {
	from, to := l.from.self, l.to.self
	fs := n.faults.Load()
	if d, ok := fs.delayFor(from, to); ok {
		wait := d.d
		if d.jitter > 0 {
			wait += time.Duration(l.jitter.Int64N(int64(d.jitter)))
		}
		if wait = time.Until(f.sent.Add(wait)); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-l.c.stop:
				t.Stop()
				return false
			}
		}
	}
	if !n.waitConnected(l) {
		return false
	}
	fs = n.faults.Load()
	if p := fs.dropFor(from, to); p > 0 && l.drop.Float64() < p {
		n.dropFrame(l, f, "random drop")
		return false
	}
	for {
		fs = n.faults.Load()
		if fs.before == nil {
			break
		}
		act := fs.before(from, to, &f.h)
		if act == DropFrame {
			n.dropFrame(l, f, "hook")
			return false
		}
		if act != Hold {
			break
		}
		select {
		case <-fs.changed:
		case <-l.c.stop:
			return false
		}
		if !n.waitConnected(l) {
			return false
		}
	}
	select {
	case <-l.c.stop:
		return false
	default:
	}
	if err := h.HandleFrame(from, &f.h, transport.BytesPayload(f.payload)); err != nil {
		n.rejected.Add(1)
		n.log.Debug("frame rejected by handler", "from", from, "to", to,
			"type", f.h.Type, "seq", f.h.Seq, "err", err)
	}
	n.delivered.Add(1)
	if after := n.faults.Load().after; after != nil {
		after(from, to, &f.h)
	}
	return true
}

// waitConnected blocks while a partition separates the link's ends. It
// reports false if the link stopped meanwhile.
func (n *Network) waitConnected(l *link) bool {
	for {
		fs := n.faults.Load()
		if !fs.partitioned(l.from.self, l.to.self) {
			return true
		}
		select {
		case <-fs.changed:
		case <-l.c.stop:
			return false
		}
	}
}

func (n *Network) dropFrame(l *link, f *frame, why string) {
	n.dropped.Add(1)
	cause := fmt.Errorf("%w (%s of frame %d->%d type %d seq %d)", ErrDropped, why, l.from.self, l.to.self, f.h.Type, f.h.Seq)
	n.mu.Lock()
	defer n.mu.Unlock()
	if l.c.broken {
		return
	}
	n.log.Info("frame dropped, connection broken", "from", l.from.self, "to", l.to.self,
		"type", f.h.Type, "seq", f.h.Seq, "why", why, "seed", n.seed)
	n.breakLocked(l.c, cause, true)
}
