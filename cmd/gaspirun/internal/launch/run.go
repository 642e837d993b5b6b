package launch

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

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
	place, err := placement(cfg, kind)
	if err != nil {
		return Result{}, err
	}
	out := newOutput(cfg.Stdout, cfg.Stderr)
	logger := jobLogger(cfg, out)
	if cfg.StateDir != "" {
		if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
			return Result{}, fmt.Errorf("%w: --state-dir %s: %v; give a directory you can write", ErrStart, cfg.StateDir, err)
		}
	}
	id := jobID(cfg)
	rv, err := startRendezvous(ctx, cfg, kind, place, id, logger)
	if err != nil {
		return Result{}, err
	}
	defer rv.close()
	// Identical lines collapse once the job formed: a plain job's (one
	// that never registers) are printed each with its prefix, as mpirun
	// prints them.
	out.collapse(cfg.Collapse, cfg.NumProcs(), func() bool { return complete(rv.srv) })
	ob, obEnv, err := startObservability(cfg, rv.srv)
	if err != nil {
		return Result{}, err
	}
	defer ob.finish(out, cfg.Quiet)
	cfg.Env = append(cfg.Env, obEnv...)
	if a := ob.MetricsAddr(); a != "" && !cfg.Quiet {
		out.notice("metrics of the whole job at http://" + a + "/metrics")
	}
	be, err := newBackend(cfg, kind, out)
	if err != nil {
		return Result{}, err
	}
	if cfg.JoinEnv != "" {
		env := bootstrap.Env{Join: true, Proc: bootstrap.JoinerID, Rendezvous: rv.addr, Token: rv.token, JobID: id, StateDir: cfg.StateDir, TLS: cfg.TLSOn(), Racks: cfg.RacksOn()}
		if err := writeJoinEnv(cfg.JoinEnv, env); err != nil {
			return Result{}, err
		}
		defer os.Remove(cfg.JoinEnv)
	}
	j := newJob(cfg, be, place, out, rv, id)
	noticePlacement(out, cfg, kind, rv.addr, place)
	stopStatus := startStatus(out, cfg)
	start := time.Now()
	if err := j.startAll(); err != nil {
		return Result{}, fmt.Errorf("%w: %v", ErrStart, err)
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
