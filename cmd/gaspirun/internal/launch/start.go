package launch

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"

	"github.com/gaspigo/gaspigo/internal/auth"
	"github.com/gaspigo/gaspigo/internal/bootstrap"
)

// The steps Run takes before the loop: place the processes, host the
// rendezvous, choose the back end, and start every process.

// placement places the ranks and spares of a job across hosts: those of
// --host or --hostfile, or of the Slurm allocation. A local job has none
// (nil).
func placement(cfg Config, kind LauncherKind) (*Placement, error) {
	var hosts []HostSlots
	var err error
	switch {
	case kind == LauncherLocal:
		return nil, nil
	case kind == LauncherSSH && len(cfg.HostList) > 0:
		hosts = cfg.HostList
	case kind == LauncherSSH:
		hosts, err = ReadHostfile(cfg.Hostfile)
	default:
		hosts, err = SlurmHosts(cfg.lookupEnv)
	}
	if err != nil {
		return nil, err
	}
	p, err := Place(hosts, cfg.Ranks, cfg.Spares)
	if err != nil {
		if fe, ok := err.(*FlagError); ok && kind == LauncherSlurm {
			fe.Flag = "the Slurm allocation"
			fe.Fix = fmt.Sprintf("ask sbatch or salloc for at least %d tasks (-n %d), or run fewer processes", cfg.NumProcs(), cfg.NumProcs())
		}
		return nil, err
	}
	return &p, nil
}

// jobLogger is cfg.Logger, or warnings among gaspirun's notices.
func jobLogger(cfg Config, out *output) *slog.Logger {
	if cfg.Logger != nil {
		return cfg.Logger
	}
	return slog.New(slog.NewTextHandler(out.noticeWriter(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// jobID is cfg.JobID, or a new random one.
func jobID(cfg Config) string {
	if cfg.JobID != "" {
		return cfg.JobID
	}
	var b [4]byte
	rand.Read(b[:])
	return "gaspirun-" + hex.EncodeToString(b[:])
}

// rendezvous is the job's rendezvous server, served by Run.
type rendezvous struct {
	srv   *bootstrap.Server
	addr  string // host:port, as the processes dial it
	token []byte
	done  chan struct{} // closed when Serve has returned
}

// startRendezvous listens where the processes can reach it
// (rendezvousBind) and serves the job's rendezvous there.
func startRendezvous(ctx context.Context, cfg Config, kind LauncherKind, place *Placement, id string, logger *slog.Logger) (*rendezvous, error) {
	var hosts []HostSlots
	if place != nil {
		hosts = place.Hosts
	}
	bind, adv, err := rendezvousBind(ctx, cfg, kind, hosts)
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, fmt.Errorf("%w: rendezvous cannot listen on %s: %v", ErrStart, bind, err)
	}
	rv := &rendezvous{addr: l.Addr().String(), token: auth.NewToken(), done: make(chan struct{})}
	if adv != "" {
		_, port, _ := net.SplitHostPort(rv.addr)
		rv.addr = net.JoinHostPort(adv, port)
	}
	scfg := bootstrap.LocalServerConfig()
	if kind != LauncherLocal {
		scfg = bootstrap.DefaultServerConfig()
	}
	scfg.Listener = l
	scfg.Token = rv.token
	scfg.TLS = cfg.TLSOn()
	scfg.NumProcs = cfg.NumProcs()
	scfg.NumRanks = cfg.Ranks
	scfg.JobID = id
	scfg.Logger = logger
	scfg.ReportBuffer = 4096
	scfg.RefillWait = cfg.RefillWait
	rv.srv = bootstrap.NewServer(scfg)
	go func() {
		defer close(rv.done)
		if err := rv.srv.Serve(context.Background()); err != nil {
			logger.Error("rendezvous stopped", "err", err)
		}
	}()
	return rv, nil
}

// close stops the rendezvous and waits for it.
func (rv *rendezvous) close() {
	rv.srv.Close()
	<-rv.done
}

// complete says whether every process has registered with srv: the
// member table is complete.
func complete(srv *bootstrap.Server) bool {
	select {
	case <-srv.Complete():
		return true
	default:
		return false
	}
}

// newBackend is what starts the job's processes: a fork here, one srun
// step under Slurm, or ssh.
func newBackend(cfg Config, kind LauncherKind, out *output) (backend, error) {
	switch kind {
	case LauncherLocal:
		path, err := exec.LookPath(cfg.Program)
		if err != nil {
			return nil, cmp.Or(checkProgram(cfg.Program), err)
		}
		return &localBackend{path: path, args: cfg.Args, nice: childNice(cfg.NumProcs(), runtime.NumCPU())}, nil
	case LauncherSlurm:
		sb, err := newStepBackend(cfg, cfg.NumProcs(), out.notice)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrStart, err)
		}
		return sb, nil
	}
	rb, err := newRemoteBackend(kind, cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrStart, err)
	}
	return rb, nil
}

// newJob is the front end's state for a job whose rendezvous runs and
// whose back end is chosen.
func newJob(cfg Config, be backend, place *Placement, out *output, rv *rendezvous, id string) *job {
	hostname, err := os.Hostname()
	if err != nil || hostname == "" {
		hostname = "localhost"
	}
	j := &job{
		cfg:   cfg,
		be:    be,
		place: place,
		out:   out,
		srv:   rv.srv,
		tr:    newTracker(cfg.Ranks, cfg.NumProcs(), cfg.Policy()),
		exits: make(chan exitEvent, cfg.NumProcs()),
		base: bootstrap.Env{
			NumProcs: cfg.NumProcs(), NumRanks: cfg.Ranks, Rendezvous: rv.addr, Token: rv.token,
			JobID: id, StateDir: cfg.StateDir, Launcher: bootstrap.LauncherPGAS, TLS: cfg.TLSOn(),
			Racks:       cfg.RacksOn(),
			DeathAborts: cfg.OnDeath == DeathAbort,
		},
		hostname: hostname,
		byID:     map[int]*proc{},
	}
	j.tr.maxRestarts = cfg.MaxRestarts
	j.tr.autoAbort = cfg.OnDeath == DeathAuto
	if cfg.Respawn() {
		j.refill = newRespawner()
	}
	if place != nil {
		j.tr.hosts = make([]string, cfg.NumProcs())
		for p := range j.tr.hosts {
			j.tr.hosts[p] = place.Host(p)
		}
	}
	return j
}

// noticePlacement says where a multi-host job runs, and warns when its
// spares cannot cover the loss of a host.
func noticePlacement(out *output, cfg Config, kind LauncherKind, rendezvous string, place *Placement) {
	if place == nil {
		return
	}
	if !cfg.Quiet {
		out.notice(fmt.Sprintf("%s launch, rendezvous %s; placement: %s", kind, rendezvous, place))
	}
	if u := place.Uncovered(); len(u) > 0 && cfg.Spares > 0 {
		out.notice(fmt.Sprintf("warning: the spares cannot cover the loss of %s; give hosts fewer slots or add spares so that no host holds more than %d processes",
			strings.Join(u, ", "), cfg.Spares))
	}
}

// startAll starts every process of the job as placed. When one cannot
// start, it kills those started, waits for them, and closes the back end
// and the copies of the standard input.
func (j *job) startAll() error {
	for p := 0; p < j.cfg.NumProcs(); p++ {
		if err := j.start(p); err != nil {
			j.signalAll(syscall.SIGKILL)
			for range j.procs {
				<-j.exits
			}
			j.closePumps()
			j.be.close()
			for _, w := range j.stdinCopies {
				w.Close()
			}
			return err
		}
	}
	return nil
}
