package bootstrap

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os/signal"
	"syscall"
)

// ServeInProcess hosts the rendezvous in this process, for launchers that
// only start processes (Slurm, Open MPI, PMI, Kubernetes): process 0 calls
// it (Env.ServeRendezvous) and then registers like every other process. It
// listens on env.Rendezvous: on the address as given when its host is
// loopback, otherwise on every interface at its port, since the advertised
// name (a node or service name) need not be a local address. The server
// runs until ctx ends or Close is called. Listening failures wrap ErrServe.
func ServeInProcess(ctx context.Context, env Env, logger *slog.Logger) (*Server, error) {
	check := env
	if env.Launcher == LauncherNone && env.Rendezvous == singletonRendezvous {
		check.Rendezvous = "127.0.0.1:1" // a free port, bound below (Singleton)
	}
	if err := check.Validate(); err != nil {
		return nil, err
	}
	bind, err := listenAddr(env.Rendezvous)
	if err != nil {
		return nil, fmt.Errorf("%w: PGAS_RENDEZVOUS=%q: %v", ErrServe, env.Rendezvous, err)
	}
	l, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, fmt.Errorf("%w: process %d cannot listen on %s (from PGAS_RENDEZVOUS=%s): %v; pick a free port in PGAS_RENDEZVOUS, or set PGAS_SERVE_RENDEZVOUS=0 if another process hosts it",
			ErrServe, env.Proc, bind, env.Rendezvous, err)
	}
	cfg := DefaultServerConfig()
	cfg.Listener = l
	cfg.Token = env.Token
	cfg.TLS = env.TLS
	cfg.NumProcs = env.NumProcs
	cfg.NumRanks = env.NumRanks
	cfg.JobID = env.JobID
	cfg.RefillWait = env.RefillWait
	cfg.Logger = logger
	s := NewServer(cfg)
	if err := s.begin(); err != nil {
		return nil, err
	}
	go func() {
		if err := s.run(ctx); err != nil && logger != nil {
			logger.Error("bootstrap: rendezvous stopped", "err", err)
		}
	}()
	return s, nil
}

// listenAddr is where a process hosting the rendezvous at addr listens.
func listenAddr(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	if host == "localhost" {
		return addr, nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return addr, nil
	}
	return net.JoinHostPort("", port), nil
}

// Join is what a process runs at start: when env.ServeRendezvous is set it
// hosts the rendezvous (ServeInProcess, tied to the Session: Session.Close
// stops it), then it registers (RegisterWith). The rendezvous outlives ctx,
// which bounds only the registration.
func Join(ctx context.Context, cfg ClientConfig, env Env, self Member) (*Session, Table, error) {
	var srv *Server
	if env.ServeRendezvous {
		var err error
		srv, err = ServeInProcess(context.WithoutCancel(ctx), env, cfg.Logger)
		if err != nil {
			return nil, Table{}, err
		}
		if _, port, _ := net.SplitHostPort(env.Rendezvous); port == "0" {
			env.Rendezvous = srv.Addr().String() // a free port, taken now (Singleton)
		}
	}
	sess, t, err := RegisterWith(ctx, cfg, env, self)
	if err != nil {
		if srv != nil {
			srv.Close()
		}
		return nil, Table{}, err
	}
	sess.srv = srv
	return sess, t, nil
}

// SurviveLauncherExit makes this process outlive its launcher. A launcher
// such as gaspirun reads the process's stdout and stderr through pipes; when
// the launcher dies, a Go program writing to them would be killed by
// SIGPIPE. After this call such writes fail with EPIPE instead and the
// process carries on (its output is lost). The runtime calls it once at
// start; it is a process-wide setting.
func SurviveLauncherExit() { signal.Ignore(syscall.SIGPIPE) }
