package health

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gaspigo/gaspigo/transport"
)

// Sender sends detector messages to other processes. The runtime
// implements it, usually by sending payload as a transport.FrameHeartbeat
// frame. SendHealth must return once payload may be reused and never block
// past ctx; an error wrapping transport.ErrPeerDown is taken as PeerDown.
type Sender interface {
	SendHealth(ctx context.Context, to transport.Proc, payload []byte) error
}

// Stats counts what a Detector did since New.
type Stats struct {
	Sent          uint64 // messages handed to Sender.SendHealth successfully
	SendErrors    uint64 // SendHealth calls that failed or timed out
	SendDrops     uint64 // messages dropped because a destination's queue was full
	Received      uint64 // messages given to Deliver that decoded
	BadMessages   uint64 // payloads given to Deliver that did not decode
	Suspicions    uint64
	Refutations   uint64
	Confirmations uint64
	DroppedEvents uint64 // events a slow subscriber did not take in time
	ProbesDropped uint64 // indirect probes refused at MaxPendingProbes
	Stalls        uint64 // ticks that came half an interval or more late (this process was starved)
	LateAcks      uint64 // heartbeat Acks far later than the peer's quickest
	LocalHealth   int    // current local health score (0 = healthy)
}

// Detector runs a Core on the real clock: one goroutine ticks it every
// Config.Tick, inputs come from the runtime's goroutines, and messages go
// out through per-destination sender goroutines so that neither the tick
// loop nor an input call ever waits on the network.
type Detector struct {
	cfg    Config
	net    Sender
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex // guards everything below; see doc.go for the lock order
	core    *Core
	clock   func() time.Time // time.Now; tests replace it to fake a stall
	lastRun time.Time        // when the tick loop last ran the Core
	closed  bool
	subs    []chan Event
	senders map[transport.Proc]*peerSender

	sent, sendErrors, sendDrops, received, badMessages, droppedEvents atomic.Uint64
}

type peerSender struct {
	ch   chan []byte
	stop chan struct{}
}

// New starts a detector for process self with the committed view members
// (in ring order; see NewCore). net carries its messages; logger receives
// suspected, refuted and confirmed events, each naming its peer (nil
// discards them; the caller's logger says which process it is). Stop it
// with Close.
func New(cfg Config, self transport.Proc, members []transport.Proc, net Sender, logger *slog.Logger) (*Detector, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	core, err := NewCore(cfg.Core(), self, members)
	if err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &Detector{
		cfg: cfg, net: net, log: logger,
		ctx: ctx, cancel: cancel, core: core, clock: time.Now,
		senders: map[transport.Proc]*peerSender{},
	}
	d.lastRun = d.clock()
	d.goFunc(d.run)
	return d, nil
}

// goFunc starts f as a goroutine owned by d; Close waits for it.
func (d *Detector) goFunc(f func()) {
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		f()
	}()
}

// run is the tick loop. Ticks the ticker drops (a slow or stopped process)
// are not replayed; instead the loop measures, on the real clock, how late
// each tick runs and reports it to the Core (Core.Late), which does not
// take what it did not hear meanwhile as evidence.
func (d *Detector) run() {
	t := time.NewTicker(d.cfg.Tick)
	defer t.Stop()
	for {
		select {
		case <-d.ctx.Done():
			return
		case <-t.C:
			d.mu.Lock()
			if !d.closed {
				now := d.clock()
				d.core.Late(missedTicks(now.Sub(d.lastRun), d.cfg.Tick))
				d.lastRun = now
				d.core.Tick()
				d.flushLocked()
			}
			d.mu.Unlock()
		}
	}
}

// missedTicks is how many whole ticks a gap of gap between two runs of
// the tick loop skipped.
func missedTicks(gap, tick time.Duration) int {
	if gap <= tick {
		return 0
	}
	return int(min(gap/tick-1, 1<<30))
}

// Deliver hands the detector a message payload received from another
// process (the payload of a transport.FrameHeartbeat frame). A payload
// that does not decode is counted and returned as an error wrapping
// ErrBadMessage. Deliver does not block on the network.
func (d *Detector) Deliver(from transport.Proc, payload []byte) error {
	m, err := DecodeMessage(payload)
	if err != nil {
		d.badMessages.Add(1)
		return err
	}
	return d.input(func(c *Core) {
		d.received.Add(1)
		c.Receive(from, m)
	})
}

// PeerDown reports strong evidence that p died: its connection closed or a
// dial to it was refused (transport.Handler.PeerDown).
func (d *Detector) PeerDown(p transport.Proc) error {
	return d.input(func(c *Core) { c.PeerDown(p) })
}

// Hint reports weak evidence against p, such as a timed-out collective. It
// never confirms a failure by itself.
func (d *Detector) Hint(p transport.Proc) error {
	return d.input(func(c *Core) { c.Hint(p) })
}

// SetMembers installs a new committed view (in ring order).
func (d *Detector) SetMembers(members []transport.Proc) error {
	var err error
	if cerr := d.input(func(c *Core) { err = c.SetMembers(members) }); cerr != nil {
		return cerr
	}
	if err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for p, s := range d.senders {
		if !d.core.IsMember(p) {
			close(s.stop)
			delete(d.senders, p)
		}
	}
	return nil
}

func (d *Detector) input(f func(*Core)) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return ErrClosed
	}
	f(d.core)
	d.flushLocked()
	return nil
}

// Subscribe returns a channel that receives every event from now on. It is
// buffered (Config.EventBuffer); when it is full, events are dropped and
// counted in Stats.DroppedEvents rather than blocking the detector. The
// channel is closed by Close.
func (d *Detector) Subscribe() <-chan Event {
	ch := make(chan Event, d.cfg.EventBuffer)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		close(ch)
		return ch
	}
	d.subs = append(d.subs, ch)
	return ch
}

// Suspects returns the processes this one currently suspects or has
// confirmed, in ring order: the local-suspicion part of the error-state
// vector.
func (d *Detector) Suspects() []transport.Proc {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.core.Suspects()
}

// Status returns this process's view of p; ok is false when p is not
// another member.
func (d *Detector) Status(p transport.Proc) (Status, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.core.Status(p)
}

// Stats returns a snapshot of the counters.
func (d *Detector) Stats() Stats {
	d.mu.Lock()
	cs, h := d.core.Stats(), d.core.LocalHealth()
	d.mu.Unlock()
	return Stats{
		Sent:          d.sent.Load(),
		SendErrors:    d.sendErrors.Load(),
		SendDrops:     d.sendDrops.Load(),
		Received:      d.received.Load(),
		BadMessages:   d.badMessages.Load(),
		Suspicions:    cs.Suspicions,
		Refutations:   cs.Refutations,
		Confirmations: cs.Confirmations,
		DroppedEvents: d.droppedEvents.Load(),
		ProbesDropped: cs.ProbesDropped,
		Stalls:        cs.Stalls,
		LateAcks:      cs.LateAcks,
		LocalHealth:   h,
	}
}

// Close stops the tick loop and the sender goroutines, waits for them,
// and closes the subscriber channels. It is idempotent and always returns
// nil.
func (d *Detector) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	d.cancel()
	d.mu.Unlock()
	d.wg.Wait()
	d.mu.Lock()
	for _, ch := range d.subs {
		close(ch)
	}
	d.subs = nil
	d.mu.Unlock()
	return nil
}

// flushLocked drains the Core: messages are queued to their sender
// goroutines, events are logged and fanned out. Nothing here blocks.
func (d *Detector) flushLocked() {
	out, events := d.core.Ready()
	for _, o := range out {
		b := make([]byte, MessageSize)
		if _, err := o.Msg.Encode(b); err != nil {
			d.sendErrors.Add(1) // cannot happen: the Core only makes valid messages
			continue
		}
		s := d.senders[o.To]
		if s == nil {
			s = &peerSender{ch: make(chan []byte, d.cfg.SendQueue), stop: make(chan struct{})}
			d.senders[o.To] = s
			to := o.To
			d.goFunc(func() { d.sendLoop(to, s) })
		}
		select {
		case s.ch <- b:
		default:
			d.sendDrops.Add(1)
		}
	}
	now := time.Now()
	for _, ev := range events {
		ev.At = now
		d.logEvent(ev)
		for _, ch := range d.subs {
			select {
			case ch <- ev:
			default:
				d.droppedEvents.Add(1)
			}
		}
	}
}

func (d *Detector) logEvent(ev Event) {
	attrs := []any{"peer", uint32(ev.Proc), "tick", ev.Tick, "reason", ev.Reason}
	switch ev.Kind {
	case Suspected:
		d.log.Info("health: suspected", attrs...)
	case Refuted:
		d.log.Info("health: refuted", attrs...)
	case Confirmed:
		d.log.Info("health: confirmed failure", attrs...)
	}
}

// sendLoop sends the messages queued for one destination, in order, each
// within SendTimeout. A send failing with transport.ErrPeerDown is fed
// back as PeerDown.
func (d *Detector) sendLoop(to transport.Proc, s *peerSender) {
	for {
		select {
		case <-d.ctx.Done():
			return
		case <-s.stop:
			return
		case b := <-s.ch:
			ctx, cancel := context.WithTimeout(d.ctx, d.cfg.SendTimeout)
			err := d.net.SendHealth(ctx, to, b)
			cancel()
			if err == nil {
				d.sent.Add(1)
				continue
			}
			d.sendErrors.Add(1)
			if errors.Is(err, transport.ErrPeerDown) {
				_ = d.PeerDown(to) // ErrClosed only, during Close
			}
		}
	}
}
