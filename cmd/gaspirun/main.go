package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/gaspigo/gaspigo/cmd/gaspirun/internal/launch"
	"github.com/gaspigo/gaspigo/internal/auth"
)

func main() {
	// A reader of gaspirun's output that goes away (gaspirun ... | head)
	// must not kill the launcher: writes fail with EPIPE instead and the
	// processes' output is still drained. Notify, unlike Ignore, is not
	// inherited by the processes gaspirun starts.
	pipe := make(chan os.Signal, 1)
	signal.Notify(pipe, syscall.SIGPIPE)
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is gaspirun without the process-wide setup: flags -> Config -> Run.
func run(args []string, stdout, stderr io.Writer) int {
	cfg, newToken, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "gaspirun: %v\n", err)
		return 2
	}
	if newToken {
		fmt.Fprintln(stdout, auth.FormatToken(auth.NewToken()))
		return 0
	}
	cfg.Stdout, cfg.Stderr = stdout, stderr
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "gaspirun: %v\n", err)
		return 2
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		select {
		case s := <-sigs:
			cancel(&launch.Interrupt{Signal: s})
		case <-ctx.Done():
		}
	}()
	res, err := launch.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "gaspirun: %v\n", err)
		if errors.Is(err, launch.ErrConfig) {
			return 2
		}
		return 1
	}
	return res.ExitCode
}

const usage = `usage: gaspirun -n N [flags] [--] PROGRAM [ARGS...]
       gaspirun --new-token

Runs PROGRAM as a job of N ranks plus --spares K spare processes on this
machine. Each output line is prefixed with its process's role: [r2] for
rank 2, [s5] for spare process 5. See 'go doc github.com/gaspigo/gaspigo/cmd/gaspirun'
for the environment the processes get and the exit codes.

flags:
`

func parseFlags(args []string, stderr io.Writer) (cfg launch.Config, newToken bool, err error) {
	cfg = launch.DefaultConfig()
	fs := flag.NewFlagSet("gaspirun", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	var hosts, onDeath string
	fs.IntVar(&cfg.Ranks, "n", 0, "number of ranks `N` (required, at least 1)")
	fs.IntVar(&cfg.Spares, "spares", 0, "number of spare processes `K` that take over a failed rank")
	fs.DurationVar(&cfg.Timeout, "timeout", 0, "tear the job down after `D` (exit 124); 0: no limit")
	fs.StringVar(&hosts, "hosts", "", "comma-separated host `labels` for the processes (PGAS_HOST), filled host by host, so one machine stands in for several")
	fs.IntVar(&cfg.ProcsPerHost, "ranks-per-host", 0, "processes (spares included) per host label `M`; without --hosts the labels are host0, host1, ...")
	fs.StringVar(&cfg.StateDir, "state-dir", "", "job state directory `DIR` (PGAS_STATE_DIR), created owner-only (0700) if missing; default: memory only")
	fs.StringVar(&cfg.Resume, "resume", "", "resume from the disk-level checkpoints in `DIR` (passed to every process as PGAS_RESUME)")
	fs.StringVar(&onDeath, "on-death", "", "`policy` for a process killed by a signal: continue (the runtime recovers) or abort; default: continue with spares, abort without")
	fs.BoolVar(&cfg.Quiet, "quiet", false, "print only failures, no progress lines or final summary")
	fs.DurationVar(&cfg.Grace, "grace", cfg.Grace, "time `D` between SIGTERM and SIGKILL when stopping processes")
	fs.StringVar(&cfg.JobID, "job-id", "", "job `name` (PGAS_JOB_ID); default: random")
	fs.BoolVar(&newToken, "new-token", false, "print a fresh job token (for PGAS_TOKEN under Slurm or Kubernetes) and exit")
	if err := fs.Parse(args); err != nil {
		return cfg, false, err
	}
	if newToken {
		return cfg, true, nil
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["n"] {
		return cfg, false, &launch.FlagError{Flag: "-n", Problem: "is required",
			Fix: "say how many ranks to run, e.g. gaspirun -n 4 ./prog (gaspirun's flags go before the program)"}
	}
	if hosts != "" {
		for _, h := range strings.Split(hosts, ",") {
			cfg.Hosts = append(cfg.Hosts, strings.TrimSpace(h))
		}
	}
	cfg.OnDeath = launch.DeathPolicy(onDeath)
	if rest := fs.Args(); len(rest) > 0 {
		cfg.Program, cfg.Args = rest[0], rest[1:]
	}
	return cfg, false, nil
}
