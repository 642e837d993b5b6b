package bootstrap

// The member table's way down: once every process has registered, the
// rendezvous writes the whole table to a few processes only, and to each
// of the others a notice naming the processes to fetch it from. Every
// process with children in the tree serves the table it holds on a small
// listener of its own (its relay), so the rendezvous writes O(N) bytes
// instead of N tables.
//
// The tree is a heap over process ids whose root is the rendezvous: it
// writes the table to processes 0..relayRoots-1, and each process p has
// the relayFanout children relayRoots+relayFanout*p onwards. Each level
// costs the processes below it a wake-up of their parent, which on a host
// of hundreds of processes per core is most of a second: the wide first
// level keeps jobs of up to relayRoots*(relayFanout+1) processes (576) at
// one relay, and 4,672 at two.
//
// A notice names up to relaySources of p's ancestors that have a relay,
// nearest first, the size of the table's message and its SHA-256:
// whoever forwards it, the process accepts only the bytes the rendezvous
// encoded. A process that cannot get the table from any of them
// (stopped, dead, not serving yet within the bound) asks the rendezvous
// for it on its control connection. A process whose relay could not be
// bound registers without one; the rendezvous writes it the whole table,
// and its descendants ask past it.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/gaspigo/gaspigo/internal/admit"
	"github.com/gaspigo/gaspigo/internal/auth"
	"github.com/gaspigo/gaspigo/internal/listen"
	"github.com/gaspigo/gaspigo/internal/tcpopt"
)

// The relay tree's shape: relayRoots is how many processes the rendezvous
// writes the whole table to (64 tables, 19.7 MB at 4,096 processes, where
// all 4,096 took 1.26 GB), relayFanout how many processes one relay serves
// below the roots. Variables only so that tests can run the tree's rules
// on a few processes; nothing else changes them.
var relayRoots, relayFanout = 64, 8

// relaySources is how many ancestors a notice names.
const relaySources = 3

// relayGate bounds the handshakes a relay holds at once, in a gate of its
// own: its children, and the descendants that skip a parent that does not
// answer. (In one test process of thousands of relays, the process's
// shared gate would shed them.)
func relayGate() int { return relayFanout * relayFanout }

// relayLeaf reports whether process p has no children in the relay tree
// of a job of n processes: nobody asks it, so it needs no relay (7 of 8
// processes of a large job).
func relayLeaf(p, n int) bool { return relayRoots+relayFanout*p >= n }

// relayParent is p's parent in the relay tree, or -1 when the rendezvous
// itself writes p the table.
func relayParent(p int) int {
	if p < relayRoots {
		return -1
	}
	return (p - relayRoots) / relayFanout
}

// relaySource is one process a notice sends a process to for the table.
type relaySource struct {
	Proc uint32 `msgpack:"proc"`
	Addr string `msgpack:"addr"`
}

// relayNotice tells a registered process that the table is complete and
// where to fetch it.
type relayNotice struct {
	From []relaySource `msgpack:"from"`
	Size int           `msgpack:"size"` // length of the table message's body
	Sum  []byte        `msgpack:"sum"`  // its SHA-256
}

// check refuses a notice that cannot be followed.
func (n *relayNotice) check() error {
	if len(n.From) == 0 || len(n.From) > relaySources {
		return fmt.Errorf("%w: a relay notice naming %d processes, want 1..%d", ErrProtocol, len(n.From), relaySources)
	}
	if n.Size < 1 || n.Size > MaxServerMessage || len(n.Sum) != sha256.Size {
		return fmt.Errorf("%w: a relay notice for a table of %d bytes with a %d-byte digest", ErrProtocol, n.Size, len(n.Sum))
	}
	return nil
}

// notices says, for each process of targets, how it gets the table: nil
// when the rendezvous writes it the whole table, else the encoded
// notice. body is the table message's body; a target's relay address is
// its srvConn.relay.
func notices(targets []*srvConn, body []byte) ([][]byte, error) {
	sum := sha256.Sum256(body)
	out := make([][]byte, len(targets))
	for p := range targets {
		var from []relaySource
		for a := relayParent(p); a >= 0 && len(from) < relaySources; a = relayParent(a) {
			if targets[a].relay != "" {
				from = append(from, relaySource{Proc: uint32(a), Addr: targets[a].relay})
			}
		}
		if len(from) == 0 {
			continue
		}
		msg, err := encodeMsg(&envelope{Kind: msgRelay, Relay: &relayNotice{From: from, Size: len(body), Sum: sum[:]}}, MaxServerMessage)
		if err != nil {
			return nil, err
		}
		out[p] = msg
	}
	return out, nil
}

// sendTable answers a process's msgTableAsk with the whole table. A
// write that fails closes the connection: the process registers again and
// gets the table then.
func (s *Server) sendTable(sc *srvConn) {
	s.mu.Lock()
	msg := s.tmsg
	s.mu.Unlock()
	if msg == nil {
		s.nBad.Add(1)
		s.log.Debug("rendezvous: a process asked for the table before it was complete", "proc", sc.proc)
		return
	}
	s.nTables.Add(1)
	s.nAsked.Add(1)
	s.log.Info("rendezvous: a process asked for the table: none of its relays gave it", "proc", sc.proc)
	sc.wmu.Lock()
	sc.rw.SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout))
	_, err := sc.rw.Write(msg)
	sc.wmu.Unlock()
	if err != nil {
		sc.rw.Close()
	}
}

// relay is a process's server of the table: it accepts the job's
// processes (job-token handshake, auth.PurposeTable) from the start of the
// registration, holds each until this process has the table, writes it
// and closes. It stops hold after the table came, when the registration
// fails, or with the session.
type relay struct {
	lis  *listen.Listener
	addr string
	wait time.Duration // how long an asker is held for the table
	log  *slog.Logger

	ready chan struct{} // closed once frame is set
	done  chan struct{} // closed by close
	frame []byte        // the table message, length prefix included
	once  sync.Once
	serve sync.Once
	timer *time.Timer
}

// startRelay binds the relay on the interface of the data-plane address
// self.Addr and starts it; nil for a leaf of the tree, and nil (with a
// debug line) when it cannot: the rendezvous then writes this process the
// table, and its descendants ask past it.
func startRelay(env Env, self Member, wait time.Duration, lg *slog.Logger) *relay {
	if relayLeaf(int(env.Proc), env.NumProcs) {
		return nil
	}
	host, _, err := net.SplitHostPort(self.Addr)
	if err == nil {
		var lc net.ListenConfig
		var ln net.Listener
		if ln, err = lc.Listen(context.Background(), "tcp", net.JoinHostPort(host, "0")); err == nil {
			rl := &relay{addr: ln.Addr().String(), wait: wait, log: lg, ready: make(chan struct{}), done: make(chan struct{})}
			var gate *admit.Gate
			if gate, err = admit.NewGate(admit.Limits{MaxPending: relayGate(), MaxPerSource: relayGate()}); err != nil {
				ln.Close()
				return nil
			}
			rl.lis, err = listen.New(ln, listen.Config{
				Name: "table relay", Purpose: auth.PurposeTable, Token: env.Token, Self: env.Proc, TLS: env.TLS,
				HandshakeTimeout: wait, Gate: gate, Peers: relayFanout, Log: lg,
			}, rl.handle)
			if err == nil {
				rl.lis.Start()
				return rl
			}
			ln.Close()
		}
	}
	lg.Debug("bootstrap: no table relay; the rendezvous will send this process the table", "addr", self.Addr, "err", err)
	return nil
}

// handle holds one asker until the table is here, then writes it.
func (rl *relay) handle(c net.Conn, peer uint32) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(rl.wait))
	select {
	case <-rl.ready:
	case <-rl.done:
		return
	}
	if _, err := c.Write(rl.frame); err != nil {
		rl.log.Debug("bootstrap: table relay: could not send the table", "to", peer, "err", err)
		return
	}
	// Close only once the asker has read it all and closed: a socket
	// closed with the table still unsent is an orphan, and a kernel short
	// of socket memory (thousands of tables in flight on one host) resets
	// orphans, the unsent table with them.
	io.Copy(io.Discard, c)
}

// hand gives the relay the table message to serve for hold from now.
func (rl *relay) hand(frame []byte, hold time.Duration) {
	if rl == nil {
		return
	}
	rl.serve.Do(func() {
		rl.frame = frame
		close(rl.ready)
		rl.timer = time.AfterFunc(hold, rl.close)
	})
}

// close stops the relay and waits for its handlers. Idempotent; nil-safe.
func (rl *relay) close() {
	if rl == nil {
		return
	}
	rl.once.Do(func() {
		rl.serve.Do(func() {}) // no hand from now on: its timer is not started
		if rl.timer != nil {
			rl.timer.Stop()
		}
		close(rl.done)
		rl.lis.Close()
	})
}

// address is the relay's address for the hello, "" without one.
func (rl *relay) address() string {
	if rl == nil {
		return ""
	}
	return rl.addr
}

// relayTry bounds the wait for one relay, from the dial to the whole
// table: the handshake bound, and a quarter of the rendezvous's per
// process (thousands of processes on a few cores take seconds to be
// scheduled). A relay that is itself still waiting past it is skipped for
// the next one up.
func (r *registrar) relayTry() time.Duration {
	return r.cfg.HandshakeTimeout + time.Duration(r.env.NumProcs)*perProcWait/4
}

// relayed follows a relay notice: the table's body and message from one
// of its relays, or, when none gave it, a msgTableAsk sent on the
// rendezvous's connection rw and a nil message (the table comes there).
func (r *registrar) relayed(ctx context.Context, rw net.Conn, n *relayNotice) ([]byte, *envelope, error) {
	body, err := r.fetch(ctx, n, r.relayTry())
	if err != nil {
		if ctx.Err() != nil {
			return nil, nil, ctx.Err()
		}
		r.log.Info("bootstrap: no relay gave the table; asking the rendezvous", "proc", procAttr(r.presented()), "err", err)
		rw.SetWriteDeadline(time.Now().Add(r.cfg.WriteTimeout))
		if err := writeMsg(rw, &envelope{Kind: msgTableAsk}, MaxClientMessage); err != nil {
			return nil, nil, fmt.Errorf("ask the rendezvous for the table: %w", err)
		}
		rw.SetWriteDeadline(time.Time{})
		return nil, nil, nil
	}
	m, err := decodeBody(body)
	if err == nil && m.Kind != msgTable {
		err = fmt.Errorf("%w: the relayed message is of kind %d, not a table", ErrProtocol, m.Kind)
	}
	if err != nil {
		// The bytes are the rendezvous's own (their digest came from it).
		return nil, nil, backoff.Permanent(err)
	}
	return body, m, nil
}

// errRelay: none of a notice's sources gave the table.
var errRelay = errors.New("no relay gave the table")

// fetch gets the table a notice announces from the processes it names,
// nearest first, each within try. It returns the message's body.
func (r *registrar) fetch(ctx context.Context, n *relayNotice, try time.Duration) ([]byte, error) {
	var errs []error
	for _, src := range n.From {
		body, err := r.fetchFrom(ctx, src, n, try)
		if err == nil {
			return body, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		errs = append(errs, fmt.Errorf("process %d at %s: %w", src.Proc, src.Addr, err))
	}
	return nil, fmt.Errorf("%w: %w", errRelay, errors.Join(errs...))
}

// fetchFrom asks one relay for the table and checks it against the
// notice.
func (r *registrar) fetchFrom(ctx context.Context, src relaySource, n *relayNotice, try time.Duration) ([]byte, error) {
	// One bound for the dial, the handshake and the table: on a host of
	// hundreds of processes per core even a dial to a listening relay
	// waits for the scheduler (ClientConfig.DialTimeout, 1 s for a local
	// job, ran out under load).
	deadline := time.Now().Add(try)
	d := net.Dialer{Deadline: deadline, Control: tcpopt.Control}
	c, err := d.DialContext(ctx, "tcp", src.Addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(aLongTimeAgo) })
	defer stop()
	c.SetDeadline(deadline)
	rw, peer, err := auth.Dial(c, r.env.Token, auth.PurposeTable, r.presented(), r.env.TLS)
	if err != nil {
		return nil, fmt.Errorf("handshake: %w", err)
	}
	if peer != src.Proc {
		return nil, fmt.Errorf("%w: the relay presented id %d", ErrProtocol, peer)
	}
	body, err := readFrame(rw, n.Size)
	if err != nil {
		return nil, err
	}
	if sum := sha256.Sum256(body); len(body) != n.Size || !bytes.Equal(sum[:], n.Sum) {
		return nil, fmt.Errorf("%w: the relay sent %d bytes that are not the rendezvous's table", ErrProtocol, len(body))
	}
	return body, nil
}

// framed puts the length prefix back on a message body.
func framed(body []byte) []byte {
	out := make([]byte, 4+len(body))
	binary.BigEndian.PutUint32(out, uint32(len(body)))
	copy(out[4:], body)
	return out
}
