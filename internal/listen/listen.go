// Package listen is the one way into a process over the network. A
// Listener accepts connections, admits each into an admission gate
// (internal/admit: the unauthenticated ones are bounded, the oldest shed
// when full), runs the job-token handshake for one purpose under a
// deadline (internal/auth, with TLS over the connection after it when the
// job asks for it), and gives every authenticated connection to a handler
// in a goroutine of its own. The data plane (transport/tcp), the
// membership (spares: Raft and the control connections) and the
// rendezvous (internal/bootstrap) all take their connections from one.
//
// A slow or silent client costs one goroutine and one descriptor until its
// deadline or until the gate sheds it, and never blocks the accept loop.
// Refusals are counted and logged within the gate's bounds, so a flood of
// stray connections costs a few log lines per interval.
package listen

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gaspigo/gaspigo/internal/admit"
	"github.com/gaspigo/gaspigo/internal/auth"
	"github.com/gaspigo/gaspigo/internal/tcpopt"
)

// Config says what a Listener admits and how.
type Config struct {
	// Name names the listener in its log lines and in the gate's refusal
	// summaries ("tcp", "spares raft", "rendezvous").
	Name string
	// Purpose, Token and Self are the handshake's: a connection is
	// accepted only from a process that proves Token for Purpose, and it
	// learns that this is process Self.
	Purpose auth.Purpose
	Token   []byte
	Self    uint32
	// TLS runs TLS over each connection after its handshake.
	TLS bool
	// HandshakeTimeout bounds the handshake (required, > 0).
	HandshakeTimeout time.Duration
	// Gate is the admission gate; nil is the process's (admit.Shared).
	Gate *admit.Gate
	// Peers is how many processes may dial the listener in the normal
	// course of a job (0: a few): handshakes that they close early (a dial
	// given up as a process leaves) make a warning only beyond a quarter
	// of them in one summary interval (admit.LogConfig.Flood), at least 100.
	Peers int
	// Log receives the listener's lines; nil discards them.
	Log *slog.Logger
	// Prepare, when set, wraps an accepted connection before the
	// handshake (socket options, a record of what the handshake read).
	// The handshake and the handler get what it returns; the listener
	// closes that on failure and at Close.
	Prepare func(net.Conn) net.Conn
	// Refused, when set, is told of a handshake that failed (not one the
	// gate shed, nor one cut by Close), after its connection was closed:
	// it counts and logs it as it likes, through Listener.Refuse for a
	// bounded log. When nil, the listener calls Refuse itself.
	Refused func(c net.Conn, remote string, err error)
}

// Handler serves one authenticated connection: c is the stream (TLS over
// the socket under Config.TLS) and peer the process that proved the
// token. The handshake's deadline is still set on c; the handler clears
// or moves it. The handler owns c, and must return once c is closed: the
// Listener's Close waits for it.
type Handler func(c net.Conn, peer uint32)

// Listener is a running accept loop; see the package doc.
type Listener struct {
	cfg  Config
	ln   net.Listener
	h    Handler
	log  *slog.Logger
	door *admit.Door

	done   chan struct{} // closed by Close
	failed chan struct{} // closed when the listener failed for good
	err    error         // why, set before failed is closed
	once   sync.Once
	wg     sync.WaitGroup

	handshake atomic.Int64 // Config.HandshakeTimeout, or SetHandshakeTimeout's

	mu      sync.Mutex
	closed  bool
	pending map[net.Conn]struct{} // handshakes under way
}

// SetHandshakeTimeout changes Config.HandshakeTimeout for the handshakes
// that start from now on (a job on an oversubscribed host lengthens it
// once it knows the host's load). Values below a millisecond count as one.
func (l *Listener) SetHandshakeTimeout(d time.Duration) {
	l.handshake.Store(int64(max(d, time.Millisecond)))
}

// New makes a Listener on ln; Start starts it. The Listener owns ln from
// here on: Close closes it.
func New(ln net.Listener, cfg Config, h Handler) (*Listener, error) {
	if cfg.HandshakeTimeout <= 0 {
		return nil, fmt.Errorf("listen: %s: HandshakeTimeout is %v; give a positive bound", cfg.Name, cfg.HandshakeTimeout)
	}
	if h == nil {
		return nil, fmt.Errorf("listen: %s: no handler", cfg.Name)
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	gate := cfg.Gate
	if gate == nil {
		gate = admit.Shared()
	}
	l := &Listener{
		cfg: cfg, ln: ln, h: h, log: log,
		door:    gate.Door(cfg.Name, log, admit.LogConfig{Flood: cfg.Peers / 4}),
		done:    make(chan struct{}),
		failed:  make(chan struct{}),
		pending: map[net.Conn]struct{}{},
	}
	l.handshake.Store(int64(cfg.HandshakeTimeout))
	return l, nil
}

// Start starts accepting, in a goroutine of the Listener's; call it once.
// It does nothing after Close.
func (l *Listener) Start() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.wg.Add(1)
	go l.acceptLoop()
}

// Addr is the address the listener is bound to.
func (l *Listener) Addr() net.Addr { return l.ln.Addr() }

// Refuse counts and logs a connection refused after (or in) its
// handshake, within the gate's log bounds.
func (l *Listener) Refuse(remote string, err error, attrs ...any) {
	l.door.Refuse(remote, err, attrs...)
}

// Stats are the listener's admission counters.
func (l *Listener) Stats() admit.Stats { return l.door.Stats() }

// Failed is closed when the listener stopped accepting for good by itself
// (its socket was closed under it); Err then says why.
func (l *Listener) Failed() <-chan struct{} { return l.failed }

// Err is why the listener failed, nil while it has not.
func (l *Listener) Err() error {
	select {
	case <-l.failed:
		return l.err
	default:
		return nil
	}
}

// Close stops accepting, cuts the handshakes under way and waits for
// every goroutine the listener started, handlers included (close the
// connections they serve first, or they must end by themselves).
// Idempotent.
func (l *Listener) Close() error {
	l.once.Do(func() {
		l.mu.Lock()
		l.closed = true
		close(l.done)
		cut := make([]net.Conn, 0, len(l.pending))
		for c := range l.pending {
			cut = append(cut, c)
		}
		l.mu.Unlock()
		_ = l.ln.Close()
		for _, c := range cut {
			_ = c.Close()
		}
		l.wg.Wait()
		l.door.Close()
	})
	return nil
}

func (l *Listener) isClosed() bool {
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}

// acceptLoop accepts until Close. A failing Accept (out of descriptors,
// say) is retried after a pause that doubles up to a second, as net/http
// does; a socket closed under the listener ends it (Failed).
func (l *Listener) acceptLoop() {
	defer l.wg.Done()
	var pause time.Duration
	for {
		nc, err := l.ln.Accept()
		if err != nil {
			if l.isClosed() {
				return
			}
			if errors.Is(err, net.ErrClosed) {
				l.err = fmt.Errorf("%s: listener closed under it: %w", l.cfg.Name, err)
				l.log.Error(l.cfg.Name+": listener closed under it; no more peers can connect", "err", err)
				close(l.failed)
				return
			}
			pause = min(max(2*pause, 5*time.Millisecond), time.Second)
			l.log.Warn(l.cfg.Name+": accept failed; retrying", "err", err, "retry_in", pause)
			t := time.NewTimer(pause)
			select {
			case <-l.done:
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		pause = 0
		tcpopt.Tune(nc)
		c := nc
		if l.cfg.Prepare != nil {
			c = l.cfg.Prepare(nc)
		}
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			_ = c.Close()
			return
		}
		l.pending[c] = struct{}{}
		l.wg.Add(1)
		l.mu.Unlock()
		pend := l.door.Admit(nc)
		go func() {
			defer l.wg.Done()
			l.serve(c, pend)
		}()
	}
}

// serve authenticates c and hands it to the handler.
func (l *Listener) serve(c net.Conn, pend *admit.Pending) {
	remote := c.RemoteAddr().String()
	_ = c.SetDeadline(time.Now().Add(time.Duration(l.handshake.Load())))
	sc, peer, err := auth.Serve(c, l.cfg.Token, l.cfg.Purpose, l.cfg.Self,
		auth.AcceptHooks{Hello: pend.Greeted, Admit: pend.Admit}, l.cfg.TLS)
	l.mu.Lock()
	delete(l.pending, c)
	closed := l.closed
	l.mu.Unlock()
	if err != nil {
		_ = c.Close()
		if pend.Done() || closed {
			return // shed (counted by the gate) or cut by Close
		}
		if l.cfg.Refused != nil {
			l.cfg.Refused(c, remote, err)
		} else {
			l.Refuse(remote, fmt.Errorf("job-token handshake failed: %w", err))
		}
		return
	}
	if closed {
		_ = sc.Close()
		return
	}
	l.door.Authenticated()
	l.h(sc, peer)
}
