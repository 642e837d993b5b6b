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
	tier int           // silent or greeted
	all  *list.Element // in core.all[tier]
	own  *list.Element // in core.bySrc[src].l[tier]
	shed bool          // closed by the gate
}

// The tiers of pending connections: a silent one has not sent a valid
// hello yet (an idle flood connection never does; a real peer sends its
// hello at once); a greeted one has. The silent are shed first.
const (
	silent = iota
	greeted
	tiers
)

// source is one remote address's pending connections, per tier.
type source struct {
	l [tiers]list.List
	n int
}

// core is the admission state machine: who is pending, per tier in
// admission order, and whom a new arrival displaces. It does no I/O and
// reads no clock.
type core struct {
	lim   Limits
	all   [tiers]list.List // of *entry, oldest first
	n     int
	bySrc map[string]*source
}

func newCore(l Limits) *core { return &core{lim: l, bySrc: map[string]*source{}} }

// victim is the oldest silent entry of ls, else the oldest greeted one.
func victim(ls *[tiers]list.List) *entry {
	for t := range ls {
		if f := ls[t].Front(); f != nil {
			return f.Value.(*entry)
		}
	}
	return nil
}

// admit adds e (silent) and returns the entries shed to make room for it
// (already removed and marked shed): first one of e's source when that
// source is at MaxPerSource, then others while the total is at MaxPending;
// each time the oldest silent entry, or the oldest greeted one when none
// is silent.
func (c *core) admit(e *entry) []*entry {
	var shed []*entry
	if src := c.bySrc[e.src]; src != nil && src.n >= c.lim.MaxPerSource {
		shed = append(shed, c.shedLocked(victim(&src.l)))
	}
	for c.n >= c.lim.MaxPending {
		shed = append(shed, c.shedLocked(victim(&c.all)))
	}
	src := c.bySrc[e.src]
	if src == nil {
		src = &source{}
		c.bySrc[e.src] = src
	}
	c.insert(e, src, silent)
	return shed
}

func (c *core) insert(e *entry, src *source, tier int) {
	e.tier = tier
	e.all = c.all[tier].PushBack(e)
	e.own = src.l[tier].PushBack(e)
	c.n++
	src.n++
}

// greet moves a pending silent e to the greeted tier (newest there).
func (c *core) greet(e *entry) {
	if e.all == nil || e.tier == greeted {
		return
	}
	src := c.bySrc[e.src]
	c.all[e.tier].Remove(e.all)
	src.l[e.tier].Remove(e.own)
	c.n--
	src.n--
	c.insert(e, src, greeted)
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
	src := c.bySrc[e.src]
	c.all[e.tier].Remove(e.all)
	src.l[e.tier].Remove(e.own)
	c.n--
	src.n--
	if src.n == 0 {
		delete(c.bySrc, e.src)
	}
	e.all, e.own = nil, nil
	return true
}

func (c *core) pending() int { return c.n }

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

// Slack is the room For keeps beyond one pending handshake per expected
// peer (strays, reconnections).
const Slack = 64

// For is the gate of a listener that expects up to n peers to connect at
// once from one address: the shared gate when it has room for them, else
// a gate of the listener's own with room for every one of them plus
// Slack. The shared gate (DefaultLimits) holds the handshakes of a few
// hundred processes from one address; 512 local processes registering at
// once (all from 127.0.0.1, or all over one host's Unix sockets) would
// have the oldest of their own handshakes shed and repeated. The bound on
// what a flood can take grows with the job, not without limit.
func For(n int) *Gate {
	def := DefaultLimits()
	n += Slack
	if n <= def.MaxPerSource {
		return Shared()
	}
	g, err := NewGate(Limits{MaxPending: max(n, def.MaxPending), MaxPerSource: n})
	if err != nil {
		return Shared() // cannot happen: n > 0
	}
	return g
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
	p.g.mu.Unlock()
	if removed {
		p.e.door.pending.Add(-1)
	}
	return shed
}

// Greeted records that the remote end sent a valid hello: the connection
// moves behind every silent one in the order of shedding. A real peer
// greets at once; a flood of idle connections never does, so it cannot
// displace a peer's handshake however fast it arrives.
func (p *Pending) Greeted() {
	p.g.mu.Lock()
	p.g.core.greet(p.e)
	p.g.mu.Unlock()
}

// Admit is Done for the end of a successful handshake: ErrShed if the
// connection was shed meanwhile, else nil (for auth.AcceptHooks.Admit).
func (p *Pending) Admit() error {
	if p.Done() {
		return ErrShed
	}
	return nil
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
