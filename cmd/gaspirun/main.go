package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
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
	if len(args) > 0 && args[0] == "--remote-exec" {
		// The remote side of a process started through ssh or srun.
		return launch.RemoteExec(os.Stdin, os.Stdout, os.Stderr)
	}
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
       gaspirun -n N --hostfile FILE [--ssh CMD] [flags] [--] PROGRAM [ARGS...]
       gaspirun [-n N] --spares K [flags] [--] PROGRAM [ARGS...]   (inside sbatch or salloc)
       gaspirun --new-token

Runs PROGRAM as a job of N ranks plus --spares K spare processes: on this
machine, on the hosts of a hostfile through ssh, or on the nodes of a
Slurm allocation through srun. Each output line is prefixed with its
process's role: [r2] for rank 2, [s5] for spare process 5. See
'go doc github.com/gaspigo/gaspigo/cmd/gaspirun' for the launchers, the
environment the processes get and the exit codes.

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
	var hosts, onDeath, launcher, sshCmd, srunCmd, remoteGaspirun string
	var exports []string
	var verbose bool
	fs.IntVar(&cfg.Ranks, "n", 0, "number of ranks `N` (required, at least 1)")
	fs.IntVar(&cfg.Spares, "spares", 0, "number of spare processes `K` that take over a failed rank")
	fs.DurationVar(&cfg.Timeout, "timeout", 0, "tear the job down after `D` (exit 124); 0: no limit")
	fs.StringVar(&hosts, "hosts", "", "comma-separated host `labels` for the processes (PGAS_HOST), filled host by host, so one machine stands in for several")
	fs.IntVar(&cfg.ProcsPerHost, "ranks-per-host", 0, "processes (spares included) per host label `M`; without --hosts the labels are host0, host1, ...")
	fs.StringVar(&cfg.StateDir, "state-dir", "", "job state directory `DIR` (PGAS_STATE_DIR), created owner-only (0700) if missing; default: memory only")
	fs.StringVar(&cfg.Resume, "resume", "", "resume from the disk-level checkpoints in `DIR` (passed to every process as PGAS_RESUME)")
	fs.StringVar(&onDeath, "on-death", "", "`policy` for a process killed by a signal: continue (the runtime recovers) or abort; default: continue with spares, abort without")
	fs.BoolVar(&cfg.TLS, "tls", false, "mutual TLS 1.3 on every connection of the job (rendezvous, data plane, Raft, control), keyed by the job token; sets PGAS_TLS=1 for every process (PGAS_TLS=1 in gaspirun's environment does the same)")
	fs.DurationVar(&cfg.Collapse, "collapse", cfg.Collapse, "print identical lines that several processes print within `D` of each other once, as \"[r0-255] line\" (a line is held at most 5 D); 0: every line with its own prefix")
	fs.BoolVar(&cfg.Quiet, "quiet", false, "print only failures, no progress lines or final summary")
	fs.DurationVar(&cfg.Grace, "grace", cfg.Grace, "time `D` between SIGTERM and SIGKILL when stopping processes, and that idle spares get to end by themselves after the last rank")
	fs.StringVar(&cfg.JobID, "job-id", "", "job `name` (PGAS_JOB_ID); default: random")
	fs.StringVar(&launcher, "launcher", "", "what starts the processes: `local`, ssh (with --hostfile) or slurm (one srun step); default: ssh with --hostfile, slurm inside a Slurm allocation (SLURM_JOB_ID set), else local")
	fs.StringVar(&cfg.Hostfile, "hostfile", "", "start the processes through ssh on the hosts of `FILE`: one host per line, optionally \"slots=N\" (default 1); # starts a comment")
	fs.StringVar(&sshCmd, "ssh", "", "the ssh `command` to use instead of ssh, e.g. \"ssh -p 2222 -i ~/.ssh/job_key\" or a wrapper script; it gets the host and the remote command")
	fs.StringVar(&srunCmd, "srun", "", "the srun `command` to use under Slurm instead of srun, e.g. \"srun --mem-per-cpu=2G\"")
	fs.StringVar(&cfg.RendezvousAddr, "rendezvous-addr", "", "`HOST[:PORT]` of this machine where the hosts reach the rendezvous; default: the address that routes to the first host")
	fs.StringVar(&remoteGaspirun, "remote-gaspirun", "", "`path` of gaspirun on the hosts (it runs there as gaspirun --remote-exec); default: the path of this gaspirun")
	fs.Func("x", "pass environment variable `NAME` (with its value here) or NAME=VALUE to every process; repeatable. Over ssh the processes get the remote login's environment plus these, PGAS_* and Go's runtime variables", func(s string) error {
		exports = append(exports, s)
		return nil
	})
	fs.StringVar(&cfg.Metrics, "metrics", "", "serve the metrics of every process of the job at http://`ADDR`/metrics (Prometheus format; each process serves its own on a free port, PGAS_METRICS=auto)")
	fs.StringVar(&cfg.Trace, "trace", "", "write a Chrome/Perfetto JSON trace of the whole job to `FILE` at the end: one track per process (PGAS_TRACE)")
	fs.BoolVar(&verbose, "v", false, "verbose: the processes' runtime records at info level (views applied, failures detected, checkpoints restored) besides warnings and errors; sets PGAS_LOG=info unless PGAS_LOG is set")
	fs.BoolVar(&newToken, "new-token", false, "print a fresh job token (for PGAS_TOKEN under Slurm or Kubernetes) and exit")
	if err := fs.Parse(args); err != nil {
		return cfg, false, err
	}
	if newToken {
		return cfg, true, nil
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	cfg.Launcher = launch.LauncherKind(launcher)
	for _, c := range []struct {
		flag, value string
		dst         *[]string
	}{{"--ssh", sshCmd, &cfg.SSH}, {"--srun", srunCmd, &cfg.Srun}} {
		if c.value == "" {
			continue
		}
		words, err := launch.SplitCommand(c.value)
		if err != nil || len(words) == 0 {
			return cfg, false, &launch.FlagError{Flag: c.flag, Value: c.value, Problem: "is not a command", Fix: "quote it as one argument, e.g. " + c.flag + " \"ssh -p 2222\""}
		}
		*c.dst = words
	}
	if remoteGaspirun != "" {
		cfg.RemoteCommand = []string{remoteGaspirun, "--remote-exec"}
	}
	for _, x := range exports {
		if k, _, ok := strings.Cut(x, "="); ok {
			if k == "" {
				return cfg, false, &launch.FlagError{Flag: "-x", Value: x, Problem: "has no name", Fix: "write -x NAME or -x NAME=VALUE"}
			}
			cfg.Env = append(cfg.Env, x)
			continue
		}
		v, ok := os.LookupEnv(x)
		if !ok {
			return cfg, false, &launch.FlagError{Flag: "-x", Value: x, Problem: "is not set here", Fix: "set it, or write -x " + x + "=VALUE"}
		}
		cfg.Env = append(cfg.Env, x+"="+v)
	}
	if _, ok := os.LookupEnv("PGAS_LOG"); verbose && !ok {
		cfg.Env = append(cfg.Env, "PGAS_LOG=info")
	}
	if !set["n"] {
		ranks, err := slurmRanks(cfg)
		if err != nil {
			return cfg, false, err
		}
		cfg.Ranks = ranks
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

// slurmRanks is the default -n inside a Slurm allocation: its tasks minus
// the spares.
func slurmRanks(cfg launch.Config) (int, error) {
	missing := &launch.FlagError{Flag: "-n", Problem: "is required",
		Fix: "say how many ranks to run, e.g. gaspirun -n 4 ./prog (gaspirun's flags go before the program)"}
	if cfg.Backend() != launch.LauncherSlurm {
		return 0, missing
	}
	v := os.Getenv("SLURM_NTASKS")
	if v == "" {
		v = os.Getenv("SLURM_NPROCS")
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		missing.Fix = "the allocation does not say its tasks (SLURM_NTASKS); give -n, or ask sbatch/salloc for -n TASKS"
		return 0, missing
	}
	if n-cfg.Spares < 1 {
		return 0, &launch.FlagError{Flag: "--spares", Value: strconv.Itoa(cfg.Spares),
			Problem: fmt.Sprintf("leaves no rank of the allocation's %d tasks (SLURM_NTASKS)", n),
			Fix:     "ask sbatch/salloc for more tasks, or give fewer spares"}
	}
	return n - cfg.Spares, nil
}
