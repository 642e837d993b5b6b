package job

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime"

	"github.com/gaspigo/gaspigo/health"
	"github.com/gaspigo/gaspigo/internal/bootstrap"
	"github.com/gaspigo/gaspigo/internal/faultpoint"
	"github.com/gaspigo/gaspigo/internal/netfault"
	"github.com/gaspigo/gaspigo/pgas"
	"github.com/gaspigo/gaspigo/spares"
	"github.com/gaspigo/gaspigo/transport"
	"github.com/gaspigo/gaspigo/transport/route"
	"github.com/gaspigo/gaspigo/transport/shm"
	"github.com/gaspigo/gaspigo/transport/tcp"
)

// Compile-time checks of the capabilities the runtime looks for.
var (
	_ transport.Disconnector = (*tcp.Transport)(nil)
	_ transport.Queuer       = (*tcp.Transport)(nil)
	_ transport.Lingerer     = (*tcp.Transport)(nil)
	_ transport.Disconnector = (*shm.Transport)(nil)
	_ transport.MemorySharer = (*shm.Transport)(nil)
	_ transport.Disconnector = (*route.Router)(nil)
	_ transport.Queuer       = (*route.Router)(nil)
	_ transport.Lingerer     = (*route.Router)(nil)
	_ transport.Locality     = (*route.Router)(nil)
	_ transport.MemorySharer = (*route.Router)(nil)
	_ pgas.Launcher          = launcher{}
)

// Options tunes Init. The zero value joins a plain job: no membership, so
// no spares and no recovery.
type Options struct {
	// Runtime supplies the runtime settings (queues, spinning); nil means
	// pgas.DefaultConfig. Proc, NumProcs, NumRanks, Transport, Hosts,
	// Membership, Health, Launcher and Logger are filled in by Init.
	Runtime *pgas.Config
	// FaultTolerant runs the Raft membership (package spares) on listeners
	// of its own and the heartbeat failure detector: spares are promoted,
	// and survivors recover after a failure.
	FaultTolerant bool
	// Membership adjusts the membership's configuration (timings, Shrink)
	// after Init has filled in the members, token and listeners; nil keeps
	// spares.DefaultConfig's values. Only with FaultTolerant.
	Membership func(*spares.Config)
	// Health configures the failure detector; nil means
	// health.DefaultConfig(). Only with FaultTolerant.
	Health *health.Config
	// TCP adjusts the data plane's transport configuration (for example
	// PollSpin, BatchFrame) after Init has filled in the process, token,
	// listener and logger; nil keeps tcp.DefaultConfig's tuning.
	TCP func(*tcp.Config)
	// Logger receives runtime and membership events; nil means text on
	// stderr at the level PGAS_LOG names (see logLevels).
	Logger *slog.Logger
}

// Init joins the job that gaspirun (or srun, mpirun, a Kubernetes Indexed
// Job) started this process in. It reads the environment contract once
// (see cmd/gaspirun), binds the data-plane listener (with the fault
// injection of PGAS_NETFAULT_DIR, if set), registers with the rendezvous,
// connects to the other processes, starts the membership when
// opts.FaultTolerant, and starts the runtime. A spare blocks here until it
// is promoted; it returns an error wrapping pgas.ErrNotPromoted if the job
// ends first (the spare should exit 0: ExitCode). A process that no
// launcher started (bootstrap.NotLaunched: run from the shell alone) is a
// job of one rank, with its own rendezvous (bootstrap.Singleton), as an
// MPI program runs without mpirun.
func Init(ctx context.Context, opts Options) (*pgas.Runtime, error) {
	bootstrap.SurviveLauncherExit()
	env, singleton, err := environment()
	if err != nil {
		return nil, err
	}
	logs := newLogs(opts.Logger, os.Getenv("PGAS_LOG"))
	if singleton {
		logs.runtime.Info("no launcher started this process: a job of one rank (gaspirun -n N starts more)")
	}
	var raftLn, ctlLn net.Listener
	extra := map[string]string{}
	publishMachine(extra, thisMachine())
	o, err := startObserver(env, extra)
	if err != nil {
		return nil, err
	}
	// The network-fault injector of the chaos suite, if configured: the
	// runtime's launcher closes it (its watcher) with the runtime.
	o.faults = netfault.FromEnv(env.Proc)
	if opts.FaultTolerant {
		var raftAddr, ctlAddr string
		raftLn, raftAddr, err = listen(env, o.faults)
		if err != nil {
			o.close()
			return nil, fmt.Errorf("spares: raft listener: %w", err)
		}
		ctlLn, ctlAddr, err = listen(env, o.faults)
		if err != nil {
			raftLn.Close()
			o.close()
			return nil, fmt.Errorf("spares: control listener: %w", err)
		}
		extra["raft"], extra["ctl"] = raftAddr, ctlAddr
		publishCPUs(extra, runtime.NumCPU(), affinity())
	}
	rt, err := start(ctx, env, opts, logs, extra, raftLn, ctlLn, o)
	if err != nil && raftLn != nil {
		raftLn.Close()
		ctlLn.Close()
	}
	if err != nil {
		o.close()
	}
	return rt, err
}

// start is Init once the membership's listeners are bound: the data
// plane, the rendezvous, the membership and the runtime. A process
// started after the job formed takes join's way instead.
func start(ctx context.Context, env bootstrap.Env, opts Options, logs logs, extra map[string]string, raftLn, ctlLn net.Listener, o *observer) (*pgas.Runtime, error) {
	if env.Join {
		return join(ctx, env, opts, logs, extra, raftLn, ctlLn, o)
	}
	tr, err := newDataPlane(env, o.faults, logs.tcp, opts.TCP)
	if err != nil {
		return nil, err
	}
	addr, err := advertise(tr.tcp.Addr(), env.Rendezvous)
	if err != nil {
		tr.Close()
		return nil, fmt.Errorf("pgas: init: %w", err)
	}
	self := bootstrap.Member{Proc: env.Proc, Addr: addr, Host: env.Host, Pid: os.Getpid(), Extra: tr.addExtra(extra)}
	sess, table, err := bootstrap.Join(ctx, clientConfig(env, logs), env, self)
	if err != nil {
		tr.Close()
		return nil, fmt.Errorf("pgas: init: rendezvous: %w", err)
	}
	data, err := tr.connect(env.Proc, env.Host, table)
	if err != nil {
		tr.Close()
		sess.Close()
		return nil, fmt.Errorf("pgas: init: %w", err)
	}
	var m *spares.Membership
	if opts.FaultTolerant {
		mc, f, worst := membershipConfig(env, table, opts, logs, raftLn, ctlLn, o.faults)
		if err := shrinkContract(env, mc, sess); err != nil {
			tr.Close()
			sess.Close()
			return nil, err
		}
		if m, err = newMembership(mc, f, worst); err != nil {
			tr.Close()
			sess.Close()
			return nil, fmt.Errorf("pgas: init: membership: %w", err)
		}
	}
	cfg, err := runtimeConfig(env, table, opts, data, m, logs, sess, o)
	if err != nil {
		tr.Close()
		sess.Close()
		if m != nil {
			m.Close()
		}
		return nil, fmt.Errorf("pgas: init: %w", err)
	}
	cfg.DirectShm = cfg.DirectShm || (tr.segments && tr.shm != nil)
	return launchRuntime(ctx, cfg, env, sess, o)
}

// clientConfig is the rendezvous client's configuration for env.
func clientConfig(env bootstrap.Env, logs logs) bootstrap.ClientConfig {
	cc := bootstrap.DefaultClientConfig()
	cc.Logger = logs.runtime.With("proc", int(env.Proc), "layer", "rendezvous")
	if env.RendezvousTimeout > 0 {
		cc.Timeout = env.RendezvousTimeout
	}
	return cc
}

// runtimeConfig is the runtime's configuration for this process of the
// job the table describes, over the data plane data, with the membership
// m (nil: none) and the failure detector timed for the job's stretch.
func runtimeConfig(env bootstrap.Env, table bootstrap.Table, opts Options, data transport.Transport, m *spares.Membership, logs logs, sess *bootstrap.Session, o *observer) (pgas.Config, error) {
	cfg := pgas.DefaultConfig()
	if opts.Runtime != nil {
		cfg = *opts.Runtime
	}
	hosts := make([]string, len(table.Members))
	for _, mb := range table.Members {
		hosts[mb.Proc] = mb.Host
	}
	cfg.Proc = transport.Proc(env.Proc)
	cfg.NumProcs, cfg.NumRanks = table.NumProcs(), table.NumRanks
	cfg.Transport = data
	cfg.Hosts = hosts
	cfg.Racks = racksOf(hosts, env.Racks)
	cfg.Logger = logs.runtime
	cfg.Launcher = launcher{sess: sess, proc: env.Proc, obs: o}
	var err error
	if cfg.FaultPoint, err = faultpoint.FromEnv(env.Proc); err != nil {
		return cfg, err
	}
	if o.faults != nil {
		cfg.Faults = o.faults // a partition holds the collectives in shared memory too
	}
	if m != nil {
		cfg.Membership = m
		f, _ := stretch(table)
		hc := health.DefaultConfig()
		if opts.Health != nil {
			hc = *opts.Health
		} else if f > 1 {
			hc = hc.Stretched(f)
		}
		cfg.Health = &hc
	}
	return cfg, nil
}

// launchRuntime starts the runtime; Init owns the membership and the
// session from here on, also when it fails.
func launchRuntime(ctx context.Context, cfg pgas.Config, env bootstrap.Env, sess *bootstrap.Session, o *observer) (*pgas.Runtime, error) {
	rt, err := pgas.Init(ctx, cfg)
	if err != nil {
		return nil, err
	}
	o.rt = rt
	sess.Report(bootstrap.Report{Proc: env.Proc, Kind: bootstrap.KindRole, Rank: rt.Rank(), Epoch: rt.Epoch()})
	return rt, nil
}

// newTransport binds the data plane's listener, wrapped by the fault
// injector of PGAS_NETFAULT_DIR when one is configured.
func newTransport(env bootstrap.Env, inj *netfault.Injector, log *slog.Logger, adjust func(*tcp.Config)) (*tcp.Transport, error) {
	tc := tcp.DefaultConfig()
	tc.Self = transport.Proc(env.Proc)
	tc.Token, tc.TLS = env.Token, env.TLS
	tc.ListenAddr = net.JoinHostPort(listenHost(env.Rendezvous), "0")
	if inj != nil {
		ln, err := net.Listen("tcp", tc.ListenAddr)
		if err != nil {
			return nil, fmt.Errorf("pgas: init: data-plane listener: %w", err)
		}
		tc.Listener, tc.WrapConn = inj.Listener(ln), inj.Wrap
	}
	tc.Logger = log.With("proc", int(env.Proc), "layer", "tcp")
	if adjust != nil {
		adjust(&tc)
	}
	tr, err := tcp.New(tc)
	if err != nil {
		return nil, fmt.Errorf("pgas: init: data-plane listener: %w", err)
	}
	return tr, nil
}

// membershipConfig is this process's Raft membership configuration over
// the listeners Init bound, with the members of the rendezvous's table,
// its timeouts stretched by the job's factor f, which worst sets (stretch).
func membershipConfig(env bootstrap.Env, table bootstrap.Table, opts Options, logs logs, raftLn, ctlLn net.Listener, inj *netfault.Injector) (cfg spares.Config, f int, worst hostLoad) {
	cfg = spares.DefaultConfig()
	cfg.Proc = env.Proc
	cfg.NumRanks = table.NumRanks
	cfg.RefillWait = table.RefillWait
	cfg.Token, cfg.TLS = env.Token, env.TLS
	cfg.RaftListener, cfg.CtlListener = raftLn, ctlLn
	if inj != nil {
		cfg.WrapConn = inj.Wrap
	}
	if env.StateDir != "" {
		cfg.StateDir = env.StateDir
	}
	if env.CutOff > 0 {
		cfg.CutOff = env.CutOff
	}
	for _, m := range table.Members {
		cfg.Members = append(cfg.Members, spares.Member{
			Proc: m.Proc, Host: m.Host, Addr: m.Addr,
			RaftAddr: m.Extra["raft"], CtlAddr: m.Extra["ctl"],
			Spare: int(m.Proc) >= table.NumRanks,
		})
	}
	cfg.Logger = logs.membership.With("layer", "membership") // spares adds proc
	f, worst = stretch(table)
	if f > 1 {
		stretchMembership(&cfg, f, env.CutOff == 0)
	}
	if opts.Membership != nil {
		opts.Membership(&cfg)
	}
	return cfg, f, worst
}

// newMembership starts the membership node of cfg (membershipConfig,
// then Options.Membership's adjustments are the caller's).
func newMembership(cfg spares.Config, f int, worst hostLoad) (*spares.Membership, error) {
	if f > 1 {
		cfg.Logger.Info("membership timeouts stretched for the job's most oversubscribed host", "factor", f,
			"host", worst.Host, "host_processes", worst.Procs, "host_cpus", worst.Cores,
			"heartbeat_timeout", cfg.HeartbeatTimeout, "handshake_timeout", cfg.HandshakeTimeout, "cut_off", cfg.CutOff)
	}
	n, err := spares.NewNode(cfg)
	if err != nil {
		return nil, err
	}
	return spares.NewMembership(n), nil
}

// Listen binds a TCP listener on the interface the job's processes use to
// reach each other, and returns it with the address they should dial. It
// reads the environment contract as Init does.
func Listen() (net.Listener, string, error) {
	env, _, err := environment()
	if err != nil {
		return nil, "", err
	}
	return listen(env, nil)
}

// environment reads the environment contract once: the launcher's, or,
// for a process that no launcher started (bootstrap.NotLaunched: run from
// the shell alone, as an MPI program may be), a job of one rank with its
// own rendezvous and membership (bootstrap.Singleton).
func environment() (env bootstrap.Env, singleton bool, err error) {
	env, err = bootstrap.FromEnv()
	if err != nil && bootstrap.NotLaunched(os.LookupEnv) {
		return bootstrap.Singleton(), true, nil
	}
	return env, false, err
}

// listen is Listen, the listener wrapped by inj (nil: none).
func listen(env bootstrap.Env, inj *netfault.Injector) (net.Listener, string, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(listenHost(env.Rendezvous), "0"))
	if err != nil {
		return nil, "", err
	}
	addr, err := advertise(ln.Addr().String(), env.Rendezvous)
	if err != nil {
		ln.Close()
		return nil, "", err
	}
	return inj.Listener(ln), addr, nil
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

// launcher is pgas.Launcher over the rendezvous session: reports go to
// gaspirun, which prints the events and counts vacant ranks as done.
type launcher struct {
	sess *bootstrap.Session
	proc uint32
	obs  *observer // closed with the session: the trace is written then
}

func (l launcher) Event(rank int, epoch uint64, text string) {
	l.sess.Report(bootstrap.Report{Proc: l.proc, Kind: bootstrap.KindEvent, Rank: rank, Epoch: epoch, Text: text})
}

func (l launcher) Vacant(rank int, epoch uint64) {
	l.sess.Report(bootstrap.Report{Proc: l.proc, Kind: bootstrap.KindVacant, Rank: rank, Epoch: epoch})
}

func (l launcher) Close() error { return errors.Join(l.obs.close(), l.sess.Close()) }
