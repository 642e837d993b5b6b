package pgas

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"

	"github.com/gaspigo/gaspigo/health"
	"github.com/gaspigo/gaspigo/internal/bootstrap"
	"github.com/gaspigo/gaspigo/internal/netfault"
	"github.com/gaspigo/gaspigo/transport"
	"github.com/gaspigo/gaspigo/transport/tcp"
)

// JobInfo is what a process learns when it joins a job: its environment
// and the member table from the rendezvous.
type JobInfo struct {
	Env   bootstrap.Env
	Table bootstrap.Table
}

// EnvOptions tunes InitFromEnv. The zero value runs a plain job: no
// membership, so no spares and no recovery.
type EnvOptions struct {
	// Base supplies the runtime settings (queues, spinning). Zero means
	// DefaultConfig. Proc, NumProcs, NumRanks, Transport and Hosts are
	// filled in from the environment.
	Base *Config
	// Extra is published in this process's entry of the member table, for
	// example the addresses of the membership's own listeners.
	Extra map[string]string
	// NewMembership, when set, builds the membership once the member table
	// is known. Spares and recovery need it (package spares provides it).
	NewMembership func(ctx context.Context, job JobInfo) (Membership, error)
	// Health configures the failure detector; nil means
	// health.DefaultConfig() when NewMembership is set.
	Health *health.Config
	// Logger receives runtime events; nil means text on stderr at the level
	// PGAS_LOG names (debug, info, warn, error; default info).
	Logger *slog.Logger
}

// InitFromEnv joins the job that gaspirun (or srun, mpirun, a Kubernetes
// Indexed Job) started this process in: it reads the environment contract
// (see cmd/gaspirun), binds the data-plane listener, registers with the
// rendezvous, connects to the other processes and starts the runtime. A
// spare blocks here until it is promoted.
func InitFromEnv(ctx context.Context, opts EnvOptions) (*Runtime, error) {
	bootstrap.SurviveLauncherExit()
	env, err := bootstrap.FromEnv()
	if err != nil {
		return nil, err
	}
	log, tcpLog := opts.Logger, opts.Logger
	if log == nil {
		level := logLevel(os.Getenv("PGAS_LOG"), slog.LevelInfo)
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
		// Connections closing at the end of a job are routine; the runtime
		// itself reports the ones that matter.
		tcpLog = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: max(level, slog.LevelWarn)}))
	}
	tc := tcp.DefaultConfig()
	tc.Self = transport.Proc(env.Proc)
	tc.Token, tc.TLS = env.Token, env.TLS
	tc.ListenAddr = net.JoinHostPort(listenHost(env.Rendezvous), "0")
	if inj := netfault.FromEnv(env.Proc); inj != nil {
		ln, err := net.Listen("tcp", tc.ListenAddr)
		if err != nil {
			return nil, fmt.Errorf("pgas: init: data-plane listener: %w", err)
		}
		tc.Listener, tc.WrapConn = inj.Listener(ln), inj.Wrap
	}
	tc.Logger = tcpLog.With("proc", int(env.Proc), "layer", "tcp")
	tr, err := tcp.New(tc)
	if err != nil {
		return nil, fmt.Errorf("pgas: init: data-plane listener: %w", err)
	}
	cc := bootstrap.DefaultClientConfig()
	cc.Logger = log.With("proc", int(env.Proc), "layer", "rendezvous")
	if env.RendezvousTimeout > 0 {
		cc.Timeout = env.RendezvousTimeout
	}
	addr, err := advertise(tr.Addr(), env.Rendezvous)
	if err != nil {
		tr.Close()
		return nil, fmt.Errorf("pgas: init: %w", err)
	}
	self := bootstrap.Member{Proc: env.Proc, Addr: addr, Host: env.Host, Pid: os.Getpid(), Extra: opts.Extra}
	sess, table, err := bootstrap.Join(ctx, cc, env, self)
	if err != nil {
		tr.Close()
		return nil, fmt.Errorf("pgas: init: rendezvous: %w", err)
	}
	peers := make(map[transport.Proc]string, len(table.Members))
	hosts := make([]string, len(table.Members))
	for _, m := range table.Members {
		hosts[m.Proc] = m.Host
		if m.Proc != env.Proc {
			peers[transport.Proc(m.Proc)] = m.Addr
		}
	}
	if err := tr.SetPeers(peers); err != nil {
		tr.Close()
		sess.Close()
		return nil, fmt.Errorf("pgas: init: %w", err)
	}
	cfg := DefaultConfig()
	if opts.Base != nil {
		cfg = *opts.Base
	}
	cfg.Proc = transport.Proc(env.Proc)
	cfg.NumProcs, cfg.NumRanks = env.NumProcs, env.NumRanks
	cfg.Transport = tr
	cfg.Hosts = hosts
	cfg.Logger = log
	var closeMember func() error
	if opts.NewMembership != nil {
		m, err := opts.NewMembership(ctx, JobInfo{Env: env, Table: table})
		if err != nil {
			tr.Close()
			sess.Close()
			return nil, fmt.Errorf("pgas: init: membership: %w", err)
		}
		cfg.Membership = m
		if c, ok := m.(interface{ Close() error }); ok {
			closeMember = c.Close
		}
		hc := health.DefaultConfig()
		if opts.Health != nil {
			hc = *opts.Health
		}
		cfg.Health = &hc
	}
	rt, err := Init(ctx, cfg)
	if err != nil {
		if closeMember != nil {
			closeMember()
		}
		sess.Close()
		return nil, err
	}
	rt.session = sess
	rt.launcher.Store(sess)
	rt.reportVacant(nil, rt.view.Load())
	rt.closeMember = closeMember
	sess.Report(bootstrap.Report{Proc: env.Proc, Kind: bootstrap.KindRole, Rank: rt.Rank(), Epoch: rt.Epoch()})
	return rt, nil
}

// Report sends a line of progress to the launcher, if there is one. It
// never blocks and never fails.
func (rt *Runtime) Report(text string) {
	if rt.session != nil {
		rt.session.Report(bootstrap.Report{Proc: uint32(rt.self), Kind: bootstrap.KindEvent, Rank: rt.Rank(), Epoch: rt.Epoch(), Text: text})
	}
}

// Listen binds a TCP listener on the interface the job's processes use to
// reach each other, and returns it with the address they should dial. The
// membership uses it for its own listeners.
func Listen(env bootstrap.Env) (net.Listener, string, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(listenHost(env.Rendezvous), "0"))
	if err != nil {
		return nil, "", err
	}
	addr, err := advertise(ln.Addr().String(), env.Rendezvous)
	if err != nil {
		ln.Close()
		return nil, "", err
	}
	return netfault.FromEnv(env.Proc).Listener(ln), addr, nil
}

// listenHost picks the interface to listen on: loopback when the job's
// rendezvous is on loopback (one machine), every interface otherwise.
func listenHost(rendezvous string) string {
	if isLoopback(rendezvous) {
		return "127.0.0.1"
	}
	return "0.0.0.0"
}

func isLoopback(hostport string) bool {
	h, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return false
	}
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// logLevel parses PGAS_LOG (debug, info, warn, error).
func logLevel(s string, def slog.Level) slog.Level {
	var l slog.Level
	if s == "" || l.UnmarshalText([]byte(s)) != nil {
		return def
	}
	return l
}
