// Package follow is the network side of the membership's dissemination
// tree (the voters-only mode): a client's follow loop, which asks the
// process above it in the tree for news and applies it, and a parent's
// answers to its children. The tree's layout and whom to ask are package
// tree's; the committed state, Raft and the connections are the
// membership's (package spares), which gives them through Member.
package follow

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/gaspigo/gaspigo/spares/internal/tree"
	"github.com/gaspigo/gaspigo/spares/internal/wire"
)

// Conn is an authenticated control connection.
type Conn interface {
	net.Conn
	Peer() uint32 // the process its handshake proved
}

// Member is what the membership gives the tree: its applied state, its
// Raft and its connections.
type Member interface {
	// Following: this process learns its state from the tree (a client,
	// or a promoted voter whose Raft has not received anything yet).
	Following() bool
	// MaybeStartRaft starts Raft when the applied state makes this
	// process a voter; StartsRaft reports whether it would.
	MaybeStartRaft()
	StartsRaft() bool
	// Upstream is whom to ask, best first, and the channel closed at the
	// next change of the applied state.
	Upstream() ([]uint32, <-chan struct{})
	// SkipDown marks in bad, until a while after now, the processes this
	// one's failure detector confirmed failed; OnDown calls f once proc
	// is confirmed failed, until stop.
	SkipDown(bad map[uint32]time.Time, now time.Time)
	OnDown(proc uint32, f func()) (stop func())
	// Dial opens a control connection to proc ("" address: an error).
	Dial(ctx context.Context, proc uint32) (Conn, error)
	// Request wraps a request's payload in the control envelope; Next
	// reads the payload of the next request on a follow connection.
	Request(payload []byte) ([]byte, error)
	Next(c Conn) ([]byte, error)

	// Version is the applied state's; Apply applies what a parent sent.
	Version() uint64
	Apply(Update) error
	// News is what a child at version have needs (full: the whole state),
	// and the channel closed at the next change.
	News(have uint64, full bool) (Update, <-chan struct{}, error)
	// Leader is the leader this process knows of; ContactTime when it
	// last knew the quorum alive (zero: never), InContact whether that
	// is fresh.
	Leader() (uint32, bool)
	ContactTime(now time.Time) time.Time
	InContact(now time.Time) bool
	// CodeOf is the code an answer carries for err.
	CodeOf(err error) string
}

// Config is the tree's part of the membership's configuration.
type Config struct {
	Hold       time.Duration // how long a parent holds a request with nothing new
	RPCTimeout time.Duration
	Fresh      time.Duration // how old a parent's contact may be to pass news on
	Limits     Limits
	Log        *slog.Logger
	Heard      *tree.Heard     // what the tree told of (the membership reads it)
	Ctx        context.Context // canceled when the membership shuts down
	Closed     <-chan struct{} // closed when it does
}

// Proc is this process's part in the tree.
type Proc struct {
	cfg    Config
	m      Member
	served atomic.Uint64 // answers sent to children
}

// New returns the tree's side of m.
func New(cfg Config, m Member) *Proc { return &Proc{cfg: cfg, m: m} }

// Served counts the answers this process sent to its children.
func (p *Proc) Served() uint64 { return p.served.Load() }

func (p *Proc) closed() bool {
	select {
	case <-p.cfg.Closed:
		return true
	default:
		return false
	}
}

// Follow is run by a process of the voters-only mode while it learns its
// state from the tree. It asks the first process of its upstream list that
// has not failed it lately, starts Raft when the state makes this process
// a voter, and ends once Raft feeds the state.
func (p *Proc) Follow() {
	bad := map[uint32]time.Time{} // upstream processes that failed us, until when to skip them
	badFor := 2 * p.cfg.Hold
	full := false
	failed := false // the last attempt failed
	for !p.closed() {
		p.m.MaybeStartRaft()
		if !p.m.Following() {
			return
		}
		up, changed := p.m.Upstream()
		now := time.Now()
		p.m.SkipDown(bad, now)
		// Right after a failure no mark runs out: a dial to a silent host
		// fails only at its time-out (RPCTimeout, longer than badFor), and
		// two such hosts first in the list would otherwise take turns for
		// ever and keep this process from the live ones after them.
		target, fallback := tree.Pick(up, bad, now, !failed)
		if target == noProc || fallback {
			// Nobody to ask, or everybody failed us lately: wait a little.
			t := time.NewTimer(p.cfg.Hold / 4)
			select {
			case <-t.C:
			case <-changed:
				t.Stop()
			case <-p.cfg.Closed:
				t.Stop()
				return
			}
			if target == noProc {
				continue
			}
		}
		err := p.followFrom(target, &full, bad)
		failed = err != nil
		if failed {
			if until := time.Now().Add(badFor); until.After(bad[target]) {
				bad[target] = until
			}
			p.cfg.Log.Debug("spares: tree parent did not answer; asking the next one up", "parent", target, "err", err)
		}
	}
}

// followFrom follows target on one connection until it fails, this
// process stops following, or target is no longer the one to ask.
func (p *Proc) followFrom(target uint32, full *bool, bad map[uint32]time.Time) error {
	ctx, cancel := context.WithCancel(p.cfg.Ctx)
	defer cancel()
	// This process's failure detector confirming target failed ends the
	// attempt at once, dial or held request, instead of at its deadline.
	stopDown := p.m.OnDown(target, cancel)
	defer stopDown()
	c, err := p.m.Dial(ctx, target)
	if err != nil && ctx.Err() != nil && p.cfg.Ctx.Err() == nil {
		return fmt.Errorf("spares: proc %d was confirmed failed: %w", target, err)
	}
	if err != nil {
		return err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	stale := 0 // answers in a row from a parent out of contact
	for {
		payload, err := EncodeRequest(p.m.Version(), *full)
		if err != nil {
			return err
		}
		req, err := p.m.Request(payload)
		if err != nil {
			return err
		}
		_ = c.SetDeadline(time.Now().Add(p.cfg.Hold + p.cfg.RPCTimeout))
		// The deadline just set replaces the past one that ending ctx
		// sets (stop, above): an end that came before must be seen here,
		// or a Shutdown would wait for this loop, which the parent keeps
		// answering, until its bound.
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := wire.WriteFrame(c, req, p.cfg.Limits.Frame()); err != nil {
			return err
		}
		body, err := wire.ReadFrame(c, uint32(p.cfg.Limits.Frame()))
		if err != nil {
			return err
		}
		got := time.Now()
		a, err := DecodeAnswer(body, p.cfg.Limits)
		if err != nil {
			return err
		}
		if a.Code != wire.CodeOK {
			return fmt.Errorf("spares: proc %d: follow answer %q", c.Peer(), a.Code)
		}
		p.cfg.Heard.Record(a.Leader, a.Fresh, a.Age, got)
		if !p.m.Following() {
			return nil
		}
		// A parent that answers but has itself lost the quorum for more
		// than a whole hold (cut off from its own upstream) cannot pass
		// news on: ask the next one up.
		if !a.Fresh || a.Age > p.cfg.Fresh {
			stale++
		} else {
			stale = 0
		}
		if stale >= 2 {
			return fmt.Errorf("spares: proc %d answers but is out of contact with the quorum (last contact %v ago)", c.Peer(), a.Age)
		}
		*full = false
		if err := p.m.Apply(a.Update); err != nil {
			p.cfg.Log.Warn("spares: news from the tree does not apply; asking for the whole state", "parent", c.Peer(), "err", err)
			*full = true
		}
		if p.m.StartsRaft() {
			return nil
		}
		up, _ := p.m.Upstream()
		now := time.Now()
		p.m.SkipDown(bad, now)
		if next, _ := tree.Pick(up, bad, now, true); next != target {
			return nil // the tree moved, or a closer ancestor may answer again
		}
	}
}
