package launch

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
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

// registrationPoll is how often Run looks for a registration with the
// rendezvous while a plain process has ended and others run.
const registrationPoll = 100 * time.Millisecond

type exitEvent struct {
	proc int
	info exitInfo
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

// over says whether the loop is done: every process gaspirun started has
// ended and been judged, and, while the job runs, no replacement is on
// its way and no joiner by hand runs.
func (j *job) over(handled int) bool {
	if handled < len(j.procs) {
		return false
	}
	return j.tr.phase != running || (j.tr.live() == 0 && j.tr.queued == 0)
}

// finish tells the rendezvous, once, that the job's outcome is decided:
// joiners that come later exit 0 instead of joining.
func (j *job) finish() {
	if !j.finished {
		j.finished = true
		j.srv.Finish()
	}
}

// loop runs until every process has exited and its exit was decided on.
func (j *job) loop(ctx context.Context) Result {
	var (
		res        Result
		pending    = map[int]exitEvent{}
		settleC    = make(chan int, len(j.procs))
		settled    = make(chan struct{}) // closed when the loop ends: no settle timer blocks on settleC then
		timers     []*time.Timer
		handled    = 0
		timeoutC   <-chan time.Time
		killC      <-chan time.Time
		ctxDone    = ctx.Done()
		reports    = j.srv.Reports()
		tornDown   = false
		killTimer  *time.Timer
		lingerC    <-chan time.Time      // the idle spares' grace to end by themselves
		watchC     <-chan time.Time      // looking for a registration (awaitingRegistration)
		replacedAt = map[int]time.Time{} // when a role report made a live holder a replaced process
		stall      = newStallWatch(cmp.Or(j.cfg.StallAfter, DefaultStallAfter), cmp.Or(j.cfg.StallEvery, DefaultStallEvery), time.Now())
		stallT     = time.NewTicker(stallTick(stall.after))
	)
	defer stallT.Stop()
	if j.cfg.Timeout > 0 {
		t := time.NewTimer(j.cfg.Timeout)
		defer t.Stop()
		timeoutC = t.C
	}
	var lingerTimer *time.Timer
	var watch *time.Ticker
	defer close(settled)
	defer func() {
		for _, t := range timers {
			t.Stop()
		}
		if killTimer != nil {
			killTimer.Stop()
		}
		if lingerTimer != nil {
			lingerTimer.Stop()
		}
		if watch != nil {
			watch.Stop()
		}
	}()
	armKill := func() {
		if killTimer == nil {
			killTimer = time.NewTimer(j.cfg.Grace)
			killC = killTimer.C
		}
	}
	var apply func(acts []action)
	apply = func(acts []action) {
		for _, a := range acts {
			switch a.kind {
			case actNotice:
				switch {
				case a.important:
					j.out.alert(a.text)
				case !j.cfg.Quiet:
					j.out.notice(a.text)
				}
			case actEvent:
				if !j.cfg.Quiet {
					j.out.event(a.proc, a.label, a.text)
				}
			case actRelabel:
				if pr := j.byID[a.proc]; pr != nil {
					l := a.label
					pr.label.Store(&l)
				}
			case actRespawn:
				j.refill.add(a)
			case actHostFailed:
				j.refill.failed[a.label] = true
			case actTeardown:
				tornDown = true
				j.signalAll(syscall.SIGTERM)
				armKill()
			case actStop:
				if lingerTimer == nil {
					lingerTimer = time.NewTimer(j.cfg.Grace)
					lingerC = lingerTimer.C
				}
			case actKill:
				j.signalAll(syscall.SIGKILL)
			}
		}
		if j.tr.phase != running {
			// The outcome is decided: start nothing more, and let late
			// joiners know.
			j.dropRespawns(apply)
			j.finish()
		}
		if j.out.status != nil {
			j.out.status.setState(j.tr.statusState())
		}
	}
	decide := func(ev exitEvent) {
		delete(pending, ev.proc)
		handled++
		if !j.tr.formed {
			select {
			case <-j.srv.Complete():
				j.tr.onFormed()
			default:
			}
		}
		apply(j.tr.onExit(ev.proc, ev.info))
	}
	onReport := func(r bootstrap.Report) {
		if r.Kind == bootstrap.KindJoined {
			host := ""
			if m, ok := j.srv.Member(r.Proc); ok {
				host = m.Host
			}
			apply(j.tr.onJoined(int(r.Proc), host, r.Text))
			if j.refill != nil {
				j.refill.registered(int(r.Proc))
			}
			return
		}
		// Only a registered process sends reports (and has its
		// disconnection reported).
		apply(j.tr.onRegistered(int(r.Proc)))
		if r.Kind == bootstrap.KindRole {
			// The exit of the rank's current holder, if already seen, came
			// first: judge it as the death of the rank, not of a replaced
			// process.
			if old := j.tr.holderOf(r.Rank); old >= 0 && old != int(r.Proc) {
				if ev, ok := pending[old]; ok {
					decide(ev)
				}
			}
		}
		if r.Kind != bootstrap.KindDisconnected {
			old := -1
			if r.Kind == bootstrap.KindRole {
				old = j.tr.holderOf(r.Rank)
			}
			apply(j.tr.onReport(r))
			if old >= 0 && old != int(r.Proc) && j.tr.replaced[old] && !j.tr.exited[old] {
				replacedAt[old] = time.Now()
			}
			return
		}
		if ev, ok := pending[int(r.Proc)]; ok {
			decide(ev)
		} else if j.tr.isByHand(int(r.Proc)) {
			apply(j.tr.onGone(int(r.Proc)))
		}
	}
	// drain applies the reports already delivered, without waiting.
	drain := func() {
		for reports != nil {
			select {
			case r, ok := <-reports:
				if !ok {
					reports = nil
					return
				}
				onReport(r)
			default:
				return
			}
		}
	}
	for !j.over(handled) {
		// A plain process ended while others run: poll the rendezvous for
		// a registration (it sends no event for one), which would make
		// this a gaspigo job that cannot form.
		if j.tr.awaitingRegistration() && watch == nil {
			watch = time.NewTicker(registrationPoll)
			watchC = watch.C
		} else if !j.tr.awaitingRegistration() && watch != nil {
			watch.Stop()
			watch, watchC = nil, nil
		}
		var respawnC <-chan time.Time
		if j.refill != nil {
			respawnC = j.refill.due
		}
		select {
		case now := <-stallT.C:
			j.stallCheck(stall, now)
			continue
		case ev := <-j.exits:
			stall.progress(time.Now())
			if at, ok := replacedAt[ev.proc]; ok && time.Since(at) < j.cfg.ExitSettle {
				j.tr.recent[ev.proc] = true
			}
			j.byID[ev.proc].waited = true
			j.tr.exitSeen(ev.proc, ev.info)
			if j.srv.Connected(uint32(ev.proc)) {
				apply(j.tr.onRegistered(ev.proc))
			}
			if j.tr.phase != running || j.cfg.ExitSettle == 0 {
				decide(ev)
				continue
			}
			// Reports the process sent before exiting must be applied
			// before its exit is judged. Once its connection is known to be
			// closed, they are all in the channel; until then, hold the exit
			// (for at most ExitSettle).
			if !j.srv.Connected(uint32(ev.proc)) {
				drain()
				decide(ev)
				continue
			}
			pending[ev.proc] = ev
			p := ev.proc
			timers = append(timers, time.AfterFunc(j.cfg.ExitSettle, func() {
				select {
				case settleC <- p:
				case <-settled:
				}
			}))
		case p := <-settleC:
			if ev, ok := pending[p]; ok {
				decide(ev)
			}
		case <-respawnC:
			j.respawnDue(apply)
		case r, ok := <-reports:
			if !ok {
				reports = nil
				continue
			}
			stall.progress(time.Now())
			onReport(r)
		case <-timeoutC:
			timeoutC = nil
			if j.tr.phase == running {
				res.TimedOut = true
			}
			apply(j.tr.onAbort(ExitTimeout, fmt.Sprintf("timeout: the job ran longer than --timeout %v", j.cfg.Timeout)))
		case <-ctxDone:
			ctxDone = nil
			code, why := ExitInterrupted, "interrupted"
			var in *Interrupt
			if errors.As(context.Cause(ctx), &in) {
				code, why = in.ExitCode(), "interrupted by "+in.Signal.String()
				if sig, ok := in.Signal.(syscall.Signal); ok {
					why = "interrupted by " + signalName(sig)
				}
			}
			if j.tr.phase == running {
				res.Interrupted = true
			}
			apply(j.tr.onAbort(code, why))
		case <-lingerC:
			// Every rank finished a grace ago: stop what still runs.
			lingerC = nil
			if j.tr.phase != finishing {
				continue // torn down meanwhile
			}
			if text := j.tr.stopRemaining(); text != "" {
				if !j.cfg.Quiet {
					j.out.notice(text)
				}
				j.signalLive(syscall.SIGTERM)
				armKill()
			}
		case <-killC:
			killC = nil
			j.signalAll(syscall.SIGKILL)
		case <-watchC:
			for _, pr := range j.procs {
				if !pr.waited && j.srv.Connected(uint32(pr.id)) {
					apply(j.tr.onRegistered(pr.id))
				}
			}
		}

		// Pending exits are decided at once after a teardown: order no
		// longer matters.
		if j.tr.phase == aborting {
			for _, ev := range pending {
				decide(ev)
			}
		}
	}
	j.finish()
	if tornDown || j.tr.phase == aborting {
		// Whatever the processes started must not outlive the job.
		j.signalAll(syscall.SIGKILL)
	} else {
		j.signalAll(syscall.SIGTERM)
	}
	j.closePumps()

	res.ExitCode = j.tr.code
	res.Reason = j.tr.reason
	for _, pr := range j.procs {
		ex := j.tr.exit[pr.id]
		res.Procs = append(res.Procs, ProcResult{
			Proc: pr.id, Pid: pr.pid, Host: pr.host, Label: *pr.label.Load(),
			Code: ex.Code, Signal: ex.Signal, Stopped: j.tr.stopped[pr.id],
		})
	}
	return res
}
