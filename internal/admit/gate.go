package admit

import (
	"container/list"
	"fmt"
	"io"
	"net"
	"sync"
)

// Limits bound the pending connections of one Gate.
type Limits struct {
	// MaxPending is the number of unauthenticated connections held at once
	// over all the gate's listeners; beyond it the oldest is shed. It bounds
	// the file descriptors and goroutines a flood can take. Must be >= 1.
	MaxPending int
	// MaxPerSource is the number held at once from one remote IP address;
	// beyond it that source's oldest is shed, so one flooding host cannot
	// displace the others' connections. 1..MaxPending.
	MaxPerSource int
}

// DefaultLimits are the limits of Shared: room for the simultaneous
// handshakes of a job of a thousand processes, and well below the
// descriptor limits of any host that runs one.
func DefaultLimits() Limits { return Limits{MaxPending: 512, MaxPerSource: 384} }

// Validate checks l without changing it.
func (l Limits) Validate() error {
	if l.MaxPending < 1 || l.MaxPerSource < 1 || l.MaxPerSource > l.MaxPending {
		return fmt.Errorf("admit: limits MaxPending=%d MaxPerSource=%d: want MaxPending >= 1 and 1 <= MaxPerSource <= MaxPending",
			l.MaxPending, l.MaxPerSource)
	}
	return nil
}

// entry is one pending connection.
type entry struct {
	src  string
	c    io.Closer
	door *Door
	all  *list.Element // in core.all
	own  *list.Element // in core.bySrc[src]
	shed bool          // closed by the gate
	done bool          // removed by Done
}

// core is the admission state machine: who is pending, in admission order,
// and whom a new arrival displaces. It does no I/O and reads no clock.
type core struct {
	lim   Limits
	all   list.List             // of *entry, oldest first
	bySrc map[string]*list.List // of *entry, oldest first
}

func newCore(l Limits) *core { return &core{lim: l, bySrc: map[string]*list.List{}} }

// admit adds e and returns the entries shed to make room for it (already
// removed and marked shed): first the oldest of e's source when that
// source is at MaxPerSource, then the oldest of all while the total is at
// MaxPending.
func (c *core) admit(e *entry) []*entry {
	var shed []*entry
	if own := c.bySrc[e.src]; own != nil && own.Len() >= c.lim.MaxPerSource {
		shed = append(shed, c.shedLocked(own.Front().Value.(*entry)))
	}
	for c.all.Len() >= c.lim.MaxPending {
		shed = append(shed, c.shedLocked(c.all.Front().Value.(*entry)))
	}
	e.all = c.all.PushBack(e)
	own := c.bySrc[e.src]
	if own == nil {
		own = list.New()
		c.bySrc[e.src] = own
	}
	e.own = own.PushBack(e)
	return shed
}

func (c *core) shedLocked(e *entry) *entry {
	c.remove(e)
	e.shed = true
	return e
}

// remove takes e out of the pending set; it reports false when e was
// removed already (shed, or done twice).
func (c *core) remove(e *entry) bool {
	if e.all == nil {
		return false
	}
	c.all.Remove(e.all)
	own := c.bySrc[e.src]
	own.Remove(e.own)
	if own.Len() == 0 {
		delete(c.bySrc, e.src)
	}
	e.all, e.own = nil, nil
	return true
}

func (c *core) pending() int { return c.all.Len() }

// Gate bounds the pending connections of the listeners that share it.
type Gate struct {
	mu   sync.Mutex
	core *core
}

// NewGate makes a Gate; invalid limits are an error.
func NewGate(l Limits) (*Gate, error) {
	if err := l.Validate(); err != nil {
		return nil, err
	}
	return &Gate{core: newCore(l)}, nil
}

var (
	sharedOnce sync.Once
	shared     *Gate
)

// Shared is the process's gate, with DefaultLimits: every listener of the
// process uses it unless told otherwise, so the bound holds for the
// process as a whole.
func Shared() *Gate {
	sharedOnce.Do(func() {
		g, err := NewGate(DefaultLimits())
		if err != nil {
			panic(err)
		}
		shared = g
	})
	return shared
}

// Pending reports how many connections are pending on g now.
func (g *Gate) Pending() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.core.pending()
}

// Stats are a Door's counters. Every admitted connection ends as exactly
// one of Authenticated, Shed, Refused (TimedOut included) or untracked
// (a probe closed by the remote end before it sent a byte, or a connection
// cut by the listener's Close), so Accepted >= Authenticated + Shed + Refused.
type Stats struct {
	Accepted      uint64 // connections admitted (each accepted connection is)
	Authenticated uint64 // passed the handshake
	Shed          uint64 // closed by the gate to make room for a newer connection
	Refused       uint64 // failed the handshake or broke a connection rule, timeouts included
	TimedOut      uint64 // of Refused: the handshake deadline passed
	Pending       int    // of this door, now
}

// Pending is an admitted connection whose handshake is under way.
type Pending struct {
	e *entry
	g *Gate
}

// Admit registers nc, just accepted on d's listener, as pending, and sheds
// (closes) older pending connections if the bounds require it. The caller
// runs the handshake and then calls Done.
func (d *Door) Admit(nc net.Conn) *Pending {
	return d.admit(sourceOf(nc.RemoteAddr()), nc)
}

func (d *Door) admit(src string, c io.Closer) *Pending {
	e := &entry{src: src, c: c, door: d}
	g := d.g
	g.mu.Lock()
	shed := g.core.admit(e)
	g.mu.Unlock()
	d.accepted.Add(1)
	d.pending.Add(1)
	for _, v := range shed {
		v.door.shed.Add(1)
		v.door.pending.Add(-1)
		_ = v.c.Close()
		v.door.noteShed(v.src)
	}
	return &Pending{e: e, g: g}
}

// Done ends the pending state of p; it reports whether the gate shed the
// connection meanwhile, in which case the caller drops it quietly: it is
// counted already and was closed. Idempotent.
func (p *Pending) Done() (shed bool) {
	p.g.mu.Lock()
	removed := p.g.core.remove(p.e)
	shed = p.e.shed
	p.e.done = true
	p.g.mu.Unlock()
	if removed {
		p.e.door.pending.Add(-1)
	}
	return shed
}

// sourceOf is the IP address of a remote address, or its whole string when
// it has no port.
func sourceOf(a net.Addr) string {
	if a == nil {
		return ""
	}
	if ta, ok := a.(*net.TCPAddr); ok {
		return ta.IP.String()
	}
	s := a.String()
	if host, _, err := net.SplitHostPort(s); err == nil {
		return host
	}
	return s
}

// SourceOf is the source key of a remote address string ("ip:port"): the
// IP address.
func SourceOf(remote string) string {
	if host, _, err := net.SplitHostPort(remote); err == nil {
		return host
	}
	return remote
}

// Plus adds up the counters of two doors.
func (s Stats) Plus(o Stats) Stats {
	return Stats{
		Accepted:      s.Accepted + o.Accepted,
		Authenticated: s.Authenticated + o.Authenticated,
		Shed:          s.Shed + o.Shed,
		Refused:       s.Refused + o.Refused,
		TimedOut:      s.TimedOut + o.TimedOut,
		Pending:       s.Pending + o.Pending,
	}
}
