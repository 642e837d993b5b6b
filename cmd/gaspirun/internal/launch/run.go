package launch

import (
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
	"sync"
	"syscall"
	"time"

	"github.com/gaspigo/gaspigo/internal/auth"
	"github.com/gaspigo/gaspigo/internal/bootstrap"
)

// Run starts the job described by cfg and waits for it to end. Cancelling
// ctx (the user's Ctrl-C; see Interrupt) tears the job down. The error is
// non-nil only when the job could not be started (ErrConfig, ErrStart);
// how the job ended is in the Result.
func Run(ctx context.Context, cfg Config) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	kind := cfg.Backend()
	var place *Placement
	switch kind {
	case LauncherSSH, LauncherSlurm:
		var hosts []HostSlots
		var err error
		switch {
		case kind == LauncherSSH && len(cfg.HostList) > 0:
			hosts = cfg.HostList
		case kind == LauncherSSH:
			hosts, err = ReadHostfile(cfg.Hostfile)
		default:
			hosts, err = SlurmHosts(cfg.lookupEnv)
		}
		if err != nil {
			return Result{}, err
		}
		p, err := Place(hosts, cfg.Ranks, cfg.Spares)
		if err != nil {
			if fe, ok := err.(*FlagError); ok && kind == LauncherSlurm {
				fe.Flag = "the Slurm allocation"
				fe.Fix = fmt.Sprintf("ask sbatch or salloc for at least %d tasks (-n %d), or run fewer processes", cfg.NumProcs(), cfg.NumProcs())
			}
			return Result{}, err
		}
		place = &p
	}
	out := newOutput(cfg.Stdout, cfg.Stderr)
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.NewTextHandler(out.noticeWriter(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	if cfg.StateDir != "" {
		if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
			return Result{}, fmt.Errorf("%w: --state-dir %s: %v; give a directory you can write", ErrStart, cfg.StateDir, err)
		}
	}
	jobID := cfg.JobID
	if jobID == "" {
		var b [4]byte
		rand.Read(b[:])
		jobID = "gaspirun-" + hex.EncodeToString(b[:])
	}
	hostname, err := os.Hostname()
	if err != nil || hostname == "" {
		hostname = "localhost"
	}

	var hosts []HostSlots
	if place != nil {
		hosts = place.Hosts
	}
	bind, adv, err := rendezvousBind(ctx, cfg, kind, hosts)
	if err != nil {
		return Result{}, err
	}
	l, err := net.Listen("tcp", bind)
	if err != nil {
		return Result{}, fmt.Errorf("%w: rendezvous cannot listen on %s: %v", ErrStart, bind, err)
	}
	rendezvous := l.Addr().String()
	if adv != "" {
		_, port, _ := net.SplitHostPort(rendezvous)
		rendezvous = net.JoinHostPort(adv, port)
	}
	token := auth.NewToken()
	scfg := bootstrap.LocalServerConfig()
	if kind != LauncherLocal {
		scfg = bootstrap.DefaultServerConfig()
	}
	scfg.Listener = l
	scfg.Token = token
	scfg.TLS = cfg.TLSOn()
	scfg.NumProcs = cfg.NumProcs()
	scfg.NumRanks = cfg.Ranks
	scfg.JobID = jobID
	scfg.Logger = logger
	scfg.ReportBuffer = 4096
	scfg.RefillWait = cfg.RefillWait
	srv := bootstrap.NewServer(scfg)
	srvDone := make(chan struct{})
	go func() {
		defer close(srvDone)
		if err := srv.Serve(context.Background()); err != nil {
			logger.Error("rendezvous stopped", "err", err)
		}
	}()
	defer func() {
		srv.Close()
		<-srvDone
	}()
	// Identical lines collapse once the job formed: a plain job's (one
	// that never registers) are printed each with its prefix, as mpirun
	// prints them.
	out.collapse(cfg.Collapse, cfg.NumProcs(), func() bool {
		select {
		case <-srv.Complete():
			return true
		default:
			return false
		}
	})
	ob, obEnv, err := startObservability(cfg, srv)
	if err != nil {
		return Result{}, err
	}
	defer ob.finish(out, cfg.Quiet)
	cfg.Env = append(cfg.Env, obEnv...)
	if a := ob.MetricsAddr(); a != "" && !cfg.Quiet {
		out.notice("metrics of the whole job at http://" + a + "/metrics")
	}

	var be backend
	if kind == LauncherLocal {
		path, err := exec.LookPath(cfg.Program)
		if err != nil {
			return Result{}, checkProgram(cfg.Program)
		}
		be = &localBackend{path: path, args: cfg.Args, nice: childNice(cfg.NumProcs(), runtime.NumCPU())}
	} else if kind == LauncherSlurm {
		sb, err := newStepBackend(cfg, cfg.NumProcs(), out.notice)
		if err != nil {
			return Result{}, fmt.Errorf("%w: %v", ErrStart, err)
		}
		be = sb
	} else {
		rb, err := newRemoteBackend(kind, cfg)
		if err != nil {
			return Result{}, fmt.Errorf("%w: %v", ErrStart, err)
		}
		be = rb
	}
	if cfg.JoinEnv != "" {
		env := bootstrap.Env{Join: true, Proc: bootstrap.JoinerID, Rendezvous: rendezvous, Token: token, JobID: jobID, StateDir: cfg.StateDir, TLS: scfg.TLS}
		if err := writeJoinEnv(cfg.JoinEnv, env); err != nil {
			return Result{}, err
		}
		defer os.Remove(cfg.JoinEnv)
	}
	j := &job{
		cfg:   cfg,
		be:    be,
		place: place,
		out:   out,
		srv:   srv,
		tr:    newTracker(cfg.Ranks, cfg.NumProcs(), cfg.Policy()),
		exits: make(chan exitEvent, cfg.NumProcs()),
		base: bootstrap.Env{
			NumProcs: cfg.NumProcs(), NumRanks: cfg.Ranks, Rendezvous: rendezvous, Token: token,
			JobID: jobID, StateDir: cfg.StateDir, Launcher: bootstrap.LauncherPGAS, TLS: scfg.TLS,
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
		if !cfg.Quiet {
			out.notice(fmt.Sprintf("%s launch, rendezvous %s; placement: %s", kind, rendezvous, place))
		}
		if u := place.Uncovered(); len(u) > 0 && cfg.Spares > 0 {
			out.notice(fmt.Sprintf("warning: the spares cannot cover the loss of %s; give hosts fewer slots or add spares so that no host holds more than %d processes",
				strings.Join(u, ", "), cfg.Spares))
		}
	}
	stopStatus := startStatus(out, cfg)
	start := time.Now()
	for p := 0; p < cfg.NumProcs(); p++ {
		if err := j.start(p); err != nil {
			j.signalAll(syscall.SIGKILL)
			for range j.procs {
				<-j.exits
			}
			j.closePumps()
			be.close()
			for _, w := range j.stdinCopies {
				w.Close()
			}
			return Result{}, fmt.Errorf("%w: %v", ErrStart, err)
		}
	}
	if len(j.stdinCopies) > 0 {
		go copyStdin(cfg.Stdin, j.stdinCopies) // ends with gaspirun's input, or with its processes
	}
	res := j.loop(ctx)
	stopStatus()
	j.closeRespawns()
	be.close()
	res.Wall = time.Since(start)
	// The verdict on a failure was printed when it was reached; the
	// summary only counts. A plain job that succeeded prints only its
	// programs' output, as under mpirun.
	res.Summary = fmt.Sprintf("%s; exit %d; wall time %v", j.tr.summary(), res.ExitCode, res.Wall.Round(time.Millisecond))
	if !cfg.Quiet && !(res.ExitCode == 0 && j.tr.plainJob()) {
		out.notice(res.Summary)
	}
	return res, nil
}

// job is the state of one Run. The loop goroutine owns tr; the pumps read
// labels through proc.label.
type job struct {
	cfg      Config
	be       backend
	place    *Placement // nil for a local job
	out      *output
	srv      *bootstrap.Server
	tr       *tracker
	base     bootstrap.Env
	hostname string
	procs    []*proc       // by process id; replacements follow the job's own
	byID     map[int]*proc // the same, by id

	stdinCopies []*os.File // --stdin all: the write ends of the ranks' pipes (copyStdin)
	outputErr   sync.Once  // --output-filename: a failure said once
	exits       chan exitEvent
	pumps       sync.WaitGroup
	refill      *respawner // nil without --respawn
	finished    bool       // the rendezvous was told the job's outcome is decided
}
