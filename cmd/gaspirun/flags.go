package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/gaspigo/gaspigo/cmd/gaspirun/internal/launch"
)

// action is what a command line asks for besides running a job.
type action int

const (
	actRun action = iota
	actHelp
	actVersion
	actNewToken
)

// flagVars are the flags that do not go straight into a launch.Config.
type flagVars struct {
	hostLabels, hostsOld, hostList  string
	onDeath, launcher               string
	sshCmd, srunCmd, remoteGaspirun string
	exports                         []string
	verbose, newToken, version      bool
	help                            bool
	respawn                         bool
	stdin                           string
	maxRestarts                     int
}

// aliases maps a flag that is another name for one shown in the help to
// that flag.
var aliases = map[string]string{"np": "n", "h": "help", "H": "host"}

// deprecated maps an old flag, left out of the help, to the warning it
// prints.
var deprecated = map[string]string{
	"hosts": "--hosts is deprecated: use --host-labels for labels of processes on this machine (--host names real hosts, as in Open MPI)",
}

// newFlagSet defines gaspirun's flags over cfg and v. Its usage strings
// are the help's (help.go); it prints nothing itself.
func newFlagSet(cfg *launch.Config, v *flagVars) *flag.FlagSet {
	fs := flag.NewFlagSet("gaspirun", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.IntVar(&cfg.Ranks, "n", 0, "number of ranks `N` (required, except inside a Slurm allocation)")
	fs.IntVar(&cfg.Ranks, "np", 0, "the same as -n")
	fs.IntVar(&cfg.Spares, "spares", 0, "number of spare processes `K` that take over a failed rank")
	fs.BoolVar(&v.respawn, "respawn", false, fmt.Sprintf("keep the spare pool full: for each process lost while the job runs (killed by a signal, lost with its host, cut off (74) or fenced (77), or ended in any way after its rank was taken over) start a replacement, which joins the running job as a spare with a new process id; at most --max-restarts (%d unless given). Another non-zero exit still fails the job", launch.DefaultMaxRestarts))
	fs.IntVar(&v.maxRestarts, "max-restarts", 0, fmt.Sprintf("the budget `N` of replacements --respawn starts (%d with --respawn); N > 0 alone turns --respawn on. The name follows torchrun's (which restarts the whole group); mpirun and ULFM have no launcher-side equivalent", launch.DefaultMaxRestarts))
	fs.DurationVar(&cfg.RefillWait, "refill-wait", 0, fmt.Sprintf("with --respawn: how long `D` a rank lost while no spare is idle waits for its replacement before the job shrinks or fails (%v with --respawn; 0: no wait)", launch.DefaultRefillWait))
	fs.DurationVar(&cfg.Timeout, "timeout", 0, "tear the job down after `D` (exit 124); 0: no limit")
	fs.StringVar(&v.hostList, "host", "", "run through ssh on these hosts, as Open MPI's --host: `HOST[:SLOTS],...` (one slot per host unless :SLOTS is given)")
	fs.StringVar(&v.hostList, "H", "", "the same as --host")
	fs.StringVar(&cfg.OutputDir, "output-filename", "", "also write each process's stdout and stderr to `DIR`/rank.N/stdout and stderr (a spare's or a replacement's to DIR/proc.P/), as Open MPI's --output-filename; the terminal gets them as before")
	fs.StringVar(&v.stdin, "stdin", "0", "which rank's process reads gaspirun's standard input, as Open MPI's --stdin: a `RANK`, all (each gets a copy) or none; processes on other hosts read none")
	fs.StringVar(&v.hostLabels, "host-labels", "", "local job: comma-separated host `labels` for the processes (PGAS_HOST), filled label by label, so that this one machine stands in for several hosts")
	fs.StringVar(&v.hostsOld, "hosts", "", "deprecated name of --host-labels")
	fs.IntVar(&cfg.ProcsPerHost, "ranks-per-host", 0, "local job: processes (spares included) per host label `M`; without --host-labels the labels are host0, host1, ...")
	fs.StringVar(&cfg.JoinEnv, "join-env", "", "write the environment a process started by hand needs to join the running job (PGAS_JOIN, PGAS_RENDEZVOUS, PGAS_TOKEN, ...) to `FILE`, owner-only, NAME=VALUE per line; removed when the job ends")
	fs.StringVar(&cfg.StateDir, "state-dir", "", "job state directory `DIR` (PGAS_STATE_DIR), created owner-only (0700) if missing; default: memory only")
	fs.StringVar(&cfg.Resume, "resume", "", "resume from the disk-level checkpoints in `DIR` (passed to every process as PGAS_RESUME)")
	fs.StringVar(&v.onDeath, "on-death", "", "`policy` for a process killed by a signal: continue (the runtime recovers) or abort; default: continue with spares or --respawn, abort without")
	fs.BoolVar(&cfg.TLS, "tls", false, "mutual TLS 1.3 on every connection of the job (rendezvous, data plane, Raft, control), keyed by the job token; sets PGAS_TLS=1 for every process (PGAS_TLS=1 in gaspirun's environment does the same)")
	fs.StringVar(&cfg.Racks, "racks", "", "the racks (or switches) of the job's hosts, `RACK=HOST,HOST;RACK=HOST`: collectives add a level so that one process per rack talks across racks; sets PGAS_RACKS for every process (PGAS_RACKS in gaspirun's environment does the same)")
	fs.DurationVar(&cfg.Collapse, "collapse", cfg.Collapse, "print identical lines that several processes print within `D` of each other once, as \"[r0-255] line\" (a line is held at most 5 D); 0: every line with its own prefix")
	fs.BoolVar(&cfg.Quiet, "quiet", false, "print only failures, no progress lines or final summary")
	fs.DurationVar(&cfg.Grace, "grace", cfg.Grace, "time `D` between SIGTERM and SIGKILL when stopping processes, and that idle spares get to end by themselves after the last rank")
	fs.StringVar(&cfg.JobID, "job-id", "", "job `name` (PGAS_JOB_ID); default: random")
	fs.StringVar(&v.launcher, "launcher", "", "what starts the processes: `local`, ssh (with --hostfile or --host) or slurm (one srun step); default: ssh with --hostfile or --host, slurm inside a Slurm allocation (SLURM_JOB_ID set), else local")
	fs.StringVar(&cfg.Hostfile, "hostfile", "", "run through ssh on the hosts of `FILE`: one host per line, optionally \"slots=N\" (default 1); # starts a comment")
	fs.StringVar(&v.sshCmd, "ssh", "", "the ssh `command` to use instead of ssh, e.g. \"ssh -p 2222 -i ~/.ssh/job_key\" or a wrapper script; it gets the host and the remote command")
	fs.StringVar(&v.srunCmd, "srun", "", "the srun `command` to use under Slurm instead of srun, e.g. \"srun --mem-per-cpu=2G\"")
	fs.StringVar(&cfg.RendezvousAddr, "rendezvous-addr", "", "`HOST[:PORT]` of this machine where the hosts reach the rendezvous; default: the address that routes to the first host")
	fs.StringVar(&v.remoteGaspirun, "remote-gaspirun", "", "`path` of gaspirun on the hosts (it runs there as gaspirun --remote-exec); default: the path of this gaspirun")
	fs.Func("x", "pass environment variable `NAME` (with its value here) or NAME=VALUE to every process; repeatable. Over ssh the processes get the remote login's environment plus these, PGAS_* and Go's runtime variables", func(s string) error {
		v.exports = append(v.exports, s)
		return nil
	})
	fs.StringVar(&cfg.Metrics, "metrics", "", "serve the metrics of every process of the job at http://`ADDR`/metrics (Prometheus format; each process serves its own on a free port, PGAS_METRICS=auto)")
	fs.StringVar(&cfg.MetricsFile, "metrics-file", "", "write the job's final metrics to `FILE` at the end, in Prometheus's text format (for node_exporter's textfile collector): each process's metrics when it ended, a killed process's as last scraped")
	fs.DurationVar(&cfg.MetricsLinger, "metrics-linger", 0, "keep the --metrics endpoint up for `D` after the job ends, serving its final metrics, so that a scrape every 15 s sees even a short job")
	fs.StringVar(&cfg.Trace, "trace", "", "write a Chrome/Perfetto JSON trace of the whole job to `FILE` at the end: one track per process (PGAS_TRACE)")
	fs.BoolVar(&v.verbose, "v", false, "verbose: the processes' runtime records at info level (views applied, failures detected, checkpoints restored) besides warnings and errors; sets PGAS_LOG=info unless PGAS_LOG is set")
	fs.BoolVar(&v.newToken, "new-token", false, "print a fresh job token (for PGAS_TOKEN under Slurm or Kubernetes) and exit")
	fs.BoolVar(&v.version, "version", false, "print gaspirun's version and exit")
	fs.BoolVar(&v.help, "help", false, "print this help and exit")
	fs.BoolVar(&v.help, "h", false, "the same as --help")
	return fs
}

// dash is how a flag is written: -n, --spares.
func dash(name string) string {
	if len(name) == 1 || name == "np" {
		return "-" + name
	}
	return "--" + name
}

var flagInMessage = regexp.MustCompile(`(flag |: )-([A-Za-z][A-Za-z0-9-]*)`)

// flagError rewrites an error of the flag package with flags written as
// gaspirun writes them ("--spares", not "-spares").
func flagError(err error) error {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		return fmt.Errorf("unknown flag %s", dash(name))
	}
	return errors.New(flagInMessage.ReplaceAllStringFunc(msg, func(m string) string {
		sub := flagInMessage.FindStringSubmatch(m)
		return sub[1] + dash(sub[2])
	}))
}

// parseFlags turns a command line into a launch.Config, or says which
// other action it asks for. Warnings (deprecated flags) go to stderr.
func parseFlags(args []string, stderr io.Writer) (cfg launch.Config, what action, err error) {
	cfg = launch.DefaultConfig()
	var v flagVars
	fs := newFlagSet(&cfg, &v)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return cfg, actHelp, nil
		}
		return cfg, actRun, flagError(err)
	}
	switch {
	case v.help:
		return cfg, actHelp, nil
	case v.version:
		return cfg, actVersion, nil
	case v.newToken:
		return cfg, actNewToken, nil
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for name, warning := range deprecated {
		if set[name] {
			fmt.Fprintf(stderr, "gaspirun: warning: %s\n", warning)
		}
	}
	if set["hosts"] {
		if set["host-labels"] {
			return cfg, actRun, &launch.FlagError{Flag: "--hosts", Value: v.hostsOld, Problem: "is the old name of --host-labels, also given", Fix: "drop --hosts"}
		}
		v.hostLabels = v.hostsOld
	}
	cfg.Launcher = launch.LauncherKind(v.launcher)
	for _, c := range []struct {
		flag, value string
		dst         *[]string
	}{{"--ssh", v.sshCmd, &cfg.SSH}, {"--srun", v.srunCmd, &cfg.Srun}} {
		if c.value == "" {
			continue
		}
		words, err := launch.SplitCommand(c.value)
		if err != nil || len(words) == 0 {
			return cfg, actRun, &launch.FlagError{Flag: c.flag, Value: c.value, Problem: "is not a command", Fix: "quote it as one argument, e.g. " + c.flag + " \"ssh -p 2222\""}
		}
		*c.dst = words
	}
	if v.remoteGaspirun != "" {
		cfg.RemoteCommand = []string{v.remoteGaspirun, "--remote-exec"}
	}
	if set["host"] || set["H"] {
		if cfg.HostList, err = launch.ParseHostList(v.hostList); err != nil {
			return cfg, actRun, err
		}
	}
	if cfg.StdinTo, err = stdinTarget(v.stdin); err != nil {
		return cfg, actRun, err
	}
	if cfg.Env, err = exportFlags(cfg.Env, v.exports); err != nil {
		return cfg, actRun, err
	}
	if _, ok := os.LookupEnv("PGAS_LOG"); v.verbose && !ok {
		cfg.Env = append(cfg.Env, "PGAS_LOG=info")
	}
	localHosts := len(cfg.HostList) > 0 && launch.AllLocal(cfg.HostList)
	if !set["n"] && !set["np"] {
		if cfg.Ranks, err = defaultRanks(cfg); err != nil {
			return cfg, actRun, err
		}
	}
	if v.hostLabels != "" {
		for _, h := range strings.Split(v.hostLabels, ",") {
			cfg.HostLabels = append(cfg.HostLabels, strings.TrimSpace(h))
		}
	}
	if localHosts {
		// As Open MPI: this machine alone is run without ssh.
		cfg.HostList = nil
	}
	cfg.OnDeath = launch.DeathPolicy(v.onDeath)
	if err := respawnFlags(&cfg, v, set); err != nil {
		return cfg, actRun, err
	}

	if rest := fs.Args(); len(rest) > 0 {
		cfg.Program, cfg.Args = rest[0], rest[1:]
	}
	return cfg, actRun, nil
}

// exportFlags appends the variables of -x (NAME, with its value here, or
// NAME=VALUE) to env.
func exportFlags(env, exports []string) ([]string, error) {
	for _, x := range exports {
		if k, _, ok := strings.Cut(x, "="); ok {
			if k == "" {
				return env, &launch.FlagError{Flag: "-x", Value: x, Problem: "has no name", Fix: "write -x NAME or -x NAME=VALUE"}
			}
			env = append(env, x)
			continue
		}
		val, ok := os.LookupEnv(x)
		if !ok {
			return env, &launch.FlagError{Flag: "-x", Value: x, Problem: "is not set here", Fix: "set it, or write -x " + x + "=VALUE"}
		}
		env = append(env, x+"="+val)
	}
	return env, nil
}

// defaultRanks is the number of ranks when -n is not given: as Open
// MPI, the slots of --host less the spares; inside a Slurm allocation,
// its tasks less the spares.
func defaultRanks(cfg launch.Config) (int, error) {
	if len(cfg.HostList) == 0 {
		return slurmRanks(cfg)
	}
	slots := 0
	for _, h := range cfg.HostList {
		slots += h.Slots
	}
	if slots-cfg.Spares < 1 {
		return 0, &launch.FlagError{Flag: "--spares", Value: strconv.Itoa(cfg.Spares),
			Problem: fmt.Sprintf("leaves no rank of --host's %d slots", slots), Fix: "give the hosts more slots (HOST:N), or -n"}
	}
	return slots - cfg.Spares, nil
}

// stdinTarget parses --stdin: a rank, all (launch.StdinAll) or none
// (launch.StdinNone).
func stdinTarget(v string) (int, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "all":
		return launch.StdinAll, nil
	case "none":
		return launch.StdinNone, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 {
		return 0, &launch.FlagError{Flag: "--stdin", Value: v, Problem: "is not a rank, all or none", Fix: "give e.g. --stdin 0 (the default), --stdin all or --stdin none"}
	}
	return n, nil
}

// respawnFlags sets the replacement budget and the refill wait from
// --respawn, --max-restarts and --refill-wait: --respawn alone gives
// DefaultMaxRestarts, --max-restarts N > 0 alone turns replacements on,
// and with them the membership waits DefaultRefillWait for a replacement
// unless --refill-wait says otherwise. Other bad values are Validate's.
func respawnFlags(cfg *launch.Config, v flagVars, set map[string]bool) error {
	switch {
	case v.respawn && set["max-restarts"] && v.maxRestarts == 0:
		return &launch.FlagError{Flag: "--max-restarts", Value: "0", Problem: "allows no replacement, but --respawn asks for them",
			Fix: fmt.Sprintf("give a budget of at least 1 (e.g. --max-restarts %d), or drop --respawn", launch.DefaultMaxRestarts)}
	case v.respawn && !set["max-restarts"]:
		cfg.MaxRestarts = launch.DefaultMaxRestarts
	default:
		cfg.MaxRestarts = v.maxRestarts
	}
	if cfg.MaxRestarts > 0 && !set["refill-wait"] {
		cfg.RefillWait = launch.DefaultRefillWait
	}
	return nil
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
