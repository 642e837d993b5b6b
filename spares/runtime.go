package spares

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"

	"github.com/gaspigo/gaspigo/health"
	"github.com/gaspigo/gaspigo/internal/bootstrap"
	"github.com/gaspigo/gaspigo/internal/netfault"
	"github.com/gaspigo/gaspigo/pgas"
	"github.com/gaspigo/gaspigo/transport"
)

// Membership adapts a Node to pgas.Membership: the runtime reads committed
// views from it and reports confirmed failures to it.
type Membership struct {
	node *Node

	once sync.Once
	ch   chan pgas.View
}

var (
	_ pgas.Membership     = (*Membership)(nil)
	_ pgas.MembershipLoss = (*Membership)(nil)
)

// NewMembership wraps a running node.
func NewMembership(n *Node) *Membership { return &Membership{node: n} }

// Node returns the wrapped node.
func (m *Membership) Node() *Node { return m.node }

// Current returns the locally applied state as a view.
func (m *Membership) Current() pgas.View { return toView(m.node.View()) }

// Watch converts the node's states to views. Only one reader may use it.
func (m *Membership) Watch() <-chan pgas.View {
	m.once.Do(func() {
		m.ch = make(chan pgas.View, 1)
		src := m.node.Watch()
		go func() {
			defer close(m.ch)
			for st := range src {
				v := toView(st)
				select {
				case <-m.ch: // keep only the latest
				default:
				}
				m.ch <- v
			}
		}()
	})
	return m.ch
}

// ReportFailure proposes DeclareFailed for proc through the leader.
func (m *Membership) ReportFailure(ctx context.Context, proc transport.Proc, epoch uint64) error {
	_, err := m.node.ReportFailure(ctx, uint32(proc), m.node.Proc(), epoch)
	return err
}

// Finish marks the job finished, so idle spares stop waiting and exit.
func (m *Membership) Finish(ctx context.Context) error {
	_, err := m.node.Propose(ctx, Finish{})
	return err
}

// CommitCheckpoint records checkpoint id as the job's last committed one.
func (m *Membership) CommitCheckpoint(ctx context.Context, id uint64) error {
	_, err := m.node.Propose(ctx, CommitCheckpoint{ID: id})
	return err
}

// Close shuts the node down.
func (m *Membership) Close() error { return m.node.Shutdown() }

// Lost is closed when the node gives up on this process (Node.Lost): the
// runtime then stops with LostErr.
func (m *Membership) Lost() <-chan struct{} { return m.node.Lost() }

// LostErr is why (Node.LostErr).
func (m *Membership) LostErr() error { return m.node.LostErr() }

func toView(st State) pgas.View {
	v := pgas.View{Epoch: st.Epoch, Ranks: make([]transport.Proc, len(st.Ranks)), Finished: st.Status == Finished, Err: st.Err()}
	for r, p := range st.Ranks {
		v.Ranks[r] = transport.Proc(p)
	}
	for _, p := range st.FailedProcs() {
		v.Failed = append(v.Failed, transport.Proc(p))
	}
	return v
}

// Options tunes Init.
type Options struct {
	// Runtime is the base runtime configuration (nil: pgas.DefaultConfig).
	Runtime *pgas.Config
	// Membership adjusts the node's configuration (timings, Shrink) after
	// Init has filled in the members, token and listeners; nil keeps
	// DefaultConfig's values.
	Membership func(*Config)
	// Health configures the failure detector (nil: health.DefaultConfig).
	Health *health.Config
	// Logger receives runtime and membership events (nil: stderr, level
	// from PGAS_LOG).
	Logger *slog.Logger
}

// Init joins a fault-tolerant job started by gaspirun: the data plane as in
// pgas.InitFromEnv, plus the Raft membership on its own listeners and the
// failure detector. On a spare it blocks until the spare is promoted and
// returns the runtime then; it returns an error wrapping
// pgas.ErrNotPromoted if the job ends first (the spare should exit 0).
func Init(ctx context.Context, opts Options) (*pgas.Runtime, error) {
	env, err := bootstrap.FromEnv()
	if err != nil {
		return nil, err
	}
	raftLn, raftAddr, err := pgas.Listen(env)
	if err != nil {
		return nil, fmt.Errorf("spares: raft listener: %w", err)
	}
	ctlLn, ctlAddr, err := pgas.Listen(env)
	if err != nil {
		raftLn.Close()
		return nil, fmt.Errorf("spares: control listener: %w", err)
	}
	log := opts.Logger
	eo := pgas.EnvOptions{
		Base:   opts.Runtime,
		Extra:  map[string]string{"raft": raftAddr, "ctl": ctlAddr},
		Health: opts.Health,
		Logger: log,
		NewMembership: func(ctx context.Context, job pgas.JobInfo) (pgas.Membership, error) {
			cfg := DefaultConfig()
			cfg.Proc = job.Env.Proc
			cfg.NumRanks = job.Table.NumRanks
			cfg.Token, cfg.TLS = job.Env.Token, job.Env.TLS
			cfg.RaftListener, cfg.CtlListener = raftLn, ctlLn
			if inj := netfault.FromEnv(env.Proc); inj != nil {
				cfg.WrapConn = inj.Wrap
			}
			if job.Env.StateDir != "" {
				cfg.StateDir = job.Env.StateDir
			}
			if job.Env.CutOff > 0 {
				cfg.CutOff = job.Env.CutOff
			}
			for _, m := range job.Table.Members {
				cfg.Members = append(cfg.Members, Member{
					Proc: m.Proc, Host: m.Host, Addr: m.Addr,
					RaftAddr: m.Extra["raft"], CtlAddr: m.Extra["ctl"],
					Spare: int(m.Proc) >= job.Table.NumRanks,
				})
			}
			if log != nil {
				cfg.Logger = log.With("proc", int(job.Env.Proc), "layer", "membership")
			} else {
				cfg.Logger = defaultLogger().With("proc", int(job.Env.Proc), "layer", "membership")
			}
			if opts.Membership != nil {
				opts.Membership(&cfg)
			}
			n, err := NewNode(cfg)
			if err != nil {
				return nil, err
			}
			return NewMembership(n), nil
		},
	}
	rt, err := pgas.InitFromEnv(ctx, eo)
	if err != nil {
		raftLn.Close()
		ctlLn.Close()
		return nil, err
	}
	return rt, nil
}

// defaultLogger: the membership's events reach the user through the
// runtime (view applied, spare promoted) and the launcher, so its own log,
// mostly Raft's dial retries to a process that just died, shows only
// errors unless PGAS_LOG asks for more.
func defaultLogger() *slog.Logger {
	var l slog.Level
	if l.UnmarshalText([]byte(os.Getenv("PGAS_LOG"))) != nil {
		l = slog.LevelError
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
}

// ExitCodeOf is the exit code for a fault-tolerant program's main, from
// the error that ended it: 0 for a spare that was never needed,
// ExitSparesExhausted when no spare was left, ExitDeclaredFailed for a
// fenced process, ExitNoRendezvous when the rendezvous was not reached in
// time, 1 otherwise.
func ExitCodeOf(err error) int {
	switch {
	case err == nil, errors.Is(err, pgas.ErrNotPromoted) && !errors.Is(err, ErrSparesExhausted):
		return 0
	case errors.Is(err, pgas.ErrFenced):
		return ExitDeclaredFailed
	case errors.Is(err, pgas.ErrRendezvousTimeout):
		return ExitNoRendezvous
	}
	return ExitCode(err)
}
