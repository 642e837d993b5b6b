package launch

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode"

	"github.com/gaspigo/gaspigo/cmd/gaspirun/internal/remote"
	"github.com/gaspigo/gaspigo/internal/bootstrap"
)

// Exit codes of the launcher besides a propagated process exit code.
const (
	ExitTimeout     = 124 // --timeout expired (as timeout(1))
	ExitInterrupted = 130 // Ctrl-C (128 + SIGINT)
	ExitLost        = 1   // a rank lost its process and nobody took it over
)

// MaxProcs caps ranks plus spares: gaspirun starts every process, or its
// ssh client, on this machine. The remote side's signal lines list up to
// as many.
const MaxProcs = remote.MaxProcs

// LauncherKind names a back end: what starts the processes.
type LauncherKind string

// Back ends.
const (
	// LauncherAuto is ssh with a hostfile, slurm inside a Slurm allocation
	// (SLURM_JOB_ID is set), local otherwise.
	LauncherAuto LauncherKind = ""
	// LauncherLocal forks the processes on this machine.
	LauncherLocal LauncherKind = "local"
	// LauncherSSH starts each process on its host from the hostfile
	// through the ssh client.
	LauncherSSH LauncherKind = "ssh"
	// LauncherSlurm starts every process as a task of one srun step,
	// each on the node of the allocation the placement gave it.
	LauncherSlurm LauncherKind = "slurm"
)

// DeathPolicy says what a process killed by a signal means for the job.
type DeathPolicy string

// Death policies.
const (
	// DeathAuto continues when the job has spares or replaces lost
	// processes (MaxRestarts), and aborts otherwise.
	DeathAuto DeathPolicy = ""
	// DeathContinue keeps the job going: the runtime detects the death and
	// promotes a spare (or exits with its own code when none is left).
	DeathContinue DeathPolicy = "continue"
	// DeathAbort tears the job down and exits 128 + the signal number.
	DeathAbort DeathPolicy = "abort"
)

// Config is one gaspirun invocation.
type Config struct {
	// Metrics is the address of the job's metrics endpoint (--metrics):
	// /metrics there serves every process's metrics; "" for none.
	Metrics string
	// MetricsFile is the file the job's final metrics are written to at
	// the end (--metrics-file), in Prometheus's text format; "" for none.
	MetricsFile string
	// MetricsLinger keeps the metrics endpoint up this long after the job
	// ended (--metrics-linger), serving the final metrics.
	MetricsLinger time.Duration
	// Trace is the file the job's merged Chrome/Perfetto trace is written
	// to at the end (--trace); "" for none.
	Trace string
	// Ranks is the number of ranks, N (-n), at least 1.
	Ranks int
	// Spares is the number of spare processes, K (--spares), at least 0.
	// Processes N..N+K-1 start as spares.
	Spares int
	// Program is the program to run, a path or a name looked up on PATH;
	// Args are its arguments.
	Program string
	Args    []string
	// Timeout ends the whole job after this long (exit 124); 0: no limit.
	Timeout time.Duration
	// HostLabels are host labels given to the processes of a local job
	// (PGAS_HOST; --host-labels), filled host by host: process p gets
	// HostLabels[p / ProcsPerHost]. One machine can thus stand in for
	// several hosts, for host-aware placement. Empty: every process gets
	// this machine's hostname, unless ProcsPerHost is set.
	HostLabels []string
	// OutputDir (--output-filename) also writes each process's stdout
	// and stderr to files under it, as Open MPI does (job.outputFiles).
	OutputDir string

	// Stdin is gaspirun's standard input, forwarded to the processes that
	// StdinTo names; nil forwards none (every process reads /dev/null).
	Stdin *os.File
	// StdinTo is the rank whose first process reads Stdin (0 by default,
	// as Open MPI's --stdin), StdinAll (every rank's first process gets a
	// copy) or StdinNone. Processes on other hosts, spares and
	// replacements read none.
	StdinTo int

	// HostList are real hosts and their slots (--host a,b:2, as Open MPI's
	// --host), used as a hostfile's: the job runs through ssh.
	HostList []HostSlots
	// ProcsPerHost is how many processes share a host label
	// (--ranks-per-host; spares count too). With HostLabels empty the labels
	// are host0, host1, ...; with HostLabels set and this 0, the processes
	// are spread evenly over them.
	ProcsPerHost int
	// StateDir is the job's state directory (PGAS_STATE_DIR), created if
	// missing; empty: the processes keep state in memory.
	StateDir string
	// JoinEnv names a file that Run writes, owner-only, once the
	// rendezvous listens: the environment a process started by hand needs
	// to join the running job (PGAS_JOIN, PGAS_RENDEZVOUS, PGAS_TOKEN, ...),
	// one NAME=VALUE per line. Run removes it when the job has ended.
	// Empty: no file.
	JoinEnv string
	// Resume names a disk-level checkpoint directory (written by an earlier
	// run through its checkpoint disk level) that the program should resume
	// from: it reaches every process as PGAS_RESUME. Empty: start afresh.
	Resume string
	// OnDeath is the policy for a process killed by a signal.
	OnDeath DeathPolicy
	// Collapse is the window within which identical lines printed by
	// several processes (each within this long of the one before) are
	// printed once, prefixed with the processes' labels as ranges
	// ("[r0-255] text") (--collapse). A line is held at most 5 times this
	// long, and each process's lines keep their order. 0: every line is
	// printed at once with its own prefix.
	Collapse time.Duration
	// Quiet suppresses informational lines and the final summary; failures
	// are still printed.
	Quiet bool
	// JobID names the job (PGAS_JOB_ID); empty: a random one.
	JobID string
	// TLS (--tls) runs mutual TLS over every connection of the job: the
	// rendezvous and, through PGAS_TLS=1, the processes' data plane, Raft
	// and control RPC. PGAS_TLS=1 in gaspirun's environment turns it on
	// too.
	TLS bool
	// Racks (--racks) names the racks of the job's hosts,
	// RACK=HOST,HOST;RACK=HOST (bootstrap.ParseRacks), for the
	// collectives' rack level: every process gets it as PGAS_RACKS.
	// PGAS_RACKS in gaspirun's environment does the same.
	Racks string
	// Grace is how long processes get between SIGTERM and SIGKILL when the
	// job is torn down or idle spares are stopped.
	Grace time.Duration
	// MaxRestarts is the budget of replacement processes (--respawn,
	// --max-restarts): while the job runs, each process of it that dies
	// (killed, crashed, lost with its host, or ended with 74 or 77 after
	// its rank was taken over) is replaced by a new spare that joins the
	// running job (PGAS_JOIN=1 with a new process id), until this many
	// have been started. 0: no replacement, the job only spends the
	// spares it started with. The name and the default with --respawn
	// (DefaultMaxRestarts) follow torchrun.
	MaxRestarts int
	// RefillWait is how long the membership keeps a lost rank waiting for
	// a replacement when no spare is idle, before it shrinks the job or
	// fails it (--refill-wait; it reaches every process in the member
	// table). gaspirun sets DefaultRefillWait with --respawn. 0: no wait,
	// a rank lost with the pool empty is handled at once.
	RefillWait time.Duration
	// ExitSettle is how long a process's exit is held back waiting for its
	// control connection to close, so that reports it sent just before
	// exiting (a promoted spare's "role") are seen first.
	ExitSettle time.Duration
	// StallAfter is how long a job may show no progress (no line, no
	// registration, report or exit) before gaspirun says what it waits
	// for; StallEvery how often it says so again while nothing happens.
	// 0: DefaultStallAfter, DefaultStallEvery.
	StallAfter, StallEvery time.Duration
	// Env holds extra KEY=VALUE variables for every process. It may not set
	// the PGAS_ variables of the contract; gaspirun sets those.
	Env []string
	// Launcher selects the back end (--launcher); LauncherAuto decides from
	// Hostfile and the environment.
	Launcher LauncherKind
	// Hostfile is the file of hosts and slots for LauncherSSH
	// (--hostfile; see ParseHostfile).
	Hostfile string
	// SSH is the ssh command (--ssh), ending before the host: the back end
	// appends the host and the remote command. Empty: ssh. When its
	// program is named ssh, sshOptions are appended first.
	SSH []string
	// Srun is the srun command (--srun); the back end appends the step's
	// options (stepBackend.argv) and the remote command. Empty: srun.
	Srun []string
	// RemoteCommand runs "gaspirun --remote-exec" on a host
	// (--remote-gaspirun). Empty: this executable's path and
	// --remote-exec, i.e. gaspirun at the same path on every host.
	RemoteCommand []string
	// RendezvousAddr is where remote processes reach the rendezvous, HOST
	// or HOST:PORT (--rendezvous-addr). Empty: the local address that
	// routes to the first host of the job that is not this machine's
	// loopback, on an ephemeral port (127.0.0.1 when every host is).
	RendezvousAddr string
	// PingInterval is how often gaspirun tells each remote side it is
	// alive; PingTimeout is how long a remote side waits without a word
	// before it kills its process (the connection or gaspirun is gone).
	// PingTimeout 0: the remote side waits for its stdin to end.
	PingInterval, PingTimeout time.Duration
	// LookupEnv reads gaspirun's environment (SLURM_* for the Slurm back
	// end). Nil: os.LookupEnv.
	LookupEnv func(string) (string, bool)
	// Stdout and Stderr receive the processes' prefixed output and the
	// launcher's own lines (on Stderr). Nil: discarded.
	Stdout, Stderr io.Writer
	// Logger receives the rendezvous's diagnostics (refused connections).
	// Nil: warnings go to Stderr.
	Logger *slog.Logger
}

// DefaultMaxRestarts is the replacement budget --respawn gives when
// --max-restarts is not given. (torchrun's flag of the same name counts
// restarts of the whole worker group; here one lost process costs one
// replacement, and the others run on, so the budget is larger.)
const DefaultMaxRestarts = 16

// DefaultRefillWait is how long, with --respawn, the membership keeps a
// rank lost while no spare is idle waiting for the replacement gaspirun
// starts, before it shrinks or fails the job: time for a replacement to
// be started (after its backoff), to register and to join, on a busy
// host or through ssh or srun.
const DefaultRefillWait = 30 * time.Second

// DefaultStallAfter and DefaultStallEvery are Config.StallAfter and
// Config.StallEvery when zero. With the loop's check every 5 s
// (stallTick), the first note comes within 30 s of the stall's start and
// the next ones within a minute of each other.
const (
	DefaultStallAfter = 25 * time.Second
	DefaultStallEvery = 55 * time.Second
)

// DefaultConfig returns the settings gaspirun uses; the caller sets Ranks,
// Program and the rest from flags.
func DefaultConfig() Config {
	return Config{Grace: 3 * time.Second, ExitSettle: 500 * time.Millisecond,
		PingInterval: time.Second, PingTimeout: 20 * time.Second, Collapse: 200 * time.Millisecond}
}

// LocalConfig is DefaultConfig with short waits, for tests, and without
// collapsing output (a test reads each process's lines).
func LocalConfig() Config {
	return Config{Grace: 500 * time.Millisecond, ExitSettle: 300 * time.Millisecond,
		PingInterval: 200 * time.Millisecond, PingTimeout: 5 * time.Second}
}

// TLSOn says whether the job runs under TLS: Config.TLS, or PGAS_TLS=1 in
// gaspirun's environment.
func (c Config) TLSOn() bool {
	v, _ := c.lookupEnv("PGAS_TLS")
	return c.TLS || v == "1"
}

// RacksOn returns the job's racks by host label (Config.Racks, else
// PGAS_RACKS in gaspirun's environment), nil for none. Validate has
// checked them.
func (c Config) RacksOn() map[string]string {
	m, _, _, _ := c.racks()
	return m
}

// racks parses the job's racks and says where they came from (from) and
// what was written there (v).
func (c Config) racks() (m map[string]string, from, v string, err error) {
	v, from = c.Racks, "--racks"
	if v == "" {
		v, _ = c.lookupEnv(bootstrap.VarRacks)
		from = bootstrap.VarRacks
	}
	if strings.TrimSpace(v) == "" {
		return nil, from, v, nil
	}
	m, err = bootstrap.ParseRacks(v)
	return m, from, v, err
}

// validateRacks checks the job's racks (--racks, else PGAS_RACKS in
// gaspirun's environment) as every process will read them.
func (c Config) validateRacks() error {
	_, from, v, err := c.racks()
	if err == nil {
		return nil
	}
	return &FlagError{Flag: from, Value: v, Problem: err.Error(),
		Fix: "write RACK=HOST,HOST;RACK=HOST with the job's host names, e.g. --racks 'rack1=node1,node2;rack2=node3,node4'"}
}

func (c Config) lookupEnv(k string) (string, bool) {
	if c.LookupEnv != nil {
		return c.LookupEnv(k)
	}
	return os.LookupEnv(k)
}

// Backend resolves LauncherAuto: ssh with a hostfile or a host list,
// slurm when SLURM_JOB_ID is set, local otherwise.
func (c Config) Backend() LauncherKind {
	if c.Launcher != LauncherAuto {
		return c.Launcher
	}
	if c.Hostfile != "" || len(c.HostList) > 0 {
		return LauncherSSH
	}
	if v, _ := c.lookupEnv("SLURM_JOB_ID"); strings.TrimSpace(v) != "" {
		return LauncherSlurm
	}
	return LauncherLocal
}

// StdinTo's values besides a rank.
const (
	StdinAll  = -1
	StdinNone = -2
)

// NumProcs is ranks plus spares.
func (c Config) NumProcs() int { return c.Ranks + c.Spares }

// Respawn says whether lost processes are replaced (MaxRestarts > 0).
func (c Config) Respawn() bool { return c.MaxRestarts > 0 }

// Policy resolves DeathAuto: continue when the job has spares or
// replaces lost processes, abort otherwise.
func (c Config) Policy() DeathPolicy {
	if c.OnDeath == DeathAuto {
		if c.Spares > 0 || c.Respawn() {
			return DeathContinue
		}
		return DeathAbort
	}
	return c.OnDeath
}

// HostLabel is the PGAS_HOST of process p, or "" for this machine's
// hostname.
func (c Config) HostLabel(p int) string {
	per := c.ProcsPerHost
	if len(c.HostLabels) > 0 {
		if per == 0 {
			per = (c.NumProcs() + len(c.HostLabels) - 1) / len(c.HostLabels)
		}
		return c.HostLabels[min(p/per, len(c.HostLabels)-1)]
	}
	if per > 0 {
		return "host" + strconv.Itoa(p/per)
	}
	return ""
}

// Validate checks c without changing it. Errors are *FlagError values that
// name the flag and say what to change.
func (c Config) Validate() error {
	if c.Ranks < 1 {
		return &FlagError{Flag: "-n", Value: strconv.Itoa(c.Ranks), Problem: "the job needs at least 1 rank",
			Fix: "say how many ranks to run, e.g. gaspirun -n 4 ./prog (gaspirun's flags go before the program)"}
	}
	if c.MetricsLinger < 0 {
		return &FlagError{Flag: "--metrics-linger", Value: c.MetricsLinger.String(), Problem: "is negative",
			Fix: "give how long to keep the endpoint up after the job, e.g. --metrics-linger 30s"}
	}
	if c.MetricsLinger > 0 && c.Metrics == "" {
		return &FlagError{Flag: "--metrics-linger", Value: c.MetricsLinger.String(), Problem: "keeps up an endpoint that --metrics did not ask for",
			Fix: "give --metrics ADDR too, or drop --metrics-linger"}
	}
	if c.Spares < 0 {
		return &FlagError{Flag: "--spares", Value: strconv.Itoa(c.Spares), Problem: "cannot be negative", Fix: "use 0 for no spares"}
	}
	if c.NumProcs() > MaxProcs {
		return &FlagError{Flag: "-n", Value: strconv.Itoa(c.Ranks),
			Problem: fmt.Sprintf("with --spares %d that is %d processes, and gaspirun starts at most %d (or as many ssh clients, or srun tasks)", c.Spares, c.NumProcs(), MaxProcs),
			Fix:     "use fewer ranks, or start the job under Slurm or Kubernetes"}
	}
	if err := c.validateBackend(); err != nil {
		return err
	}
	if v, _ := c.lookupEnv("PGAS_TLS"); v != "" && v != "0" && v != "1" {
		return &FlagError{Flag: "PGAS_TLS", Value: v, Problem: "in gaspirun's environment is not 1 or 0",
			Fix: "use --tls (or PGAS_TLS=1) for mutual TLS on every connection of the job, or unset PGAS_TLS"}
	}
	if err := c.validateRacks(); err != nil {
		return err
	}
	if c.Backend() == LauncherLocal {
		if err := checkProgram(c.Program); err != nil {
			return err
		}
	} else if c.Program == "" {
		return checkProgram(c.Program)
	}
	if c.Timeout < 0 {
		return &FlagError{Flag: "--timeout", Value: c.Timeout.String(), Problem: "cannot be negative", Fix: "use e.g. --timeout 10m, or 0 for no limit"}
	}
	if c.Grace <= 0 {
		return &FlagError{Flag: "--grace", Value: c.Grace.String(), Problem: "must be positive", Fix: "use e.g. --grace 3s"}
	}
	if c.Collapse < 0 || c.Collapse > 10*time.Second {
		return &FlagError{Flag: "--collapse", Value: c.Collapse.String(), Problem: "must be between 0 and 10s (a line is held back that long)",
			Fix: "use e.g. --collapse 200ms, or 0 to print every line with its own prefix"}
	}
	if c.StallAfter < 0 || c.StallEvery < 0 {
		return &FlagError{Flag: "StallAfter", Value: c.StallAfter.String() + "," + c.StallEvery.String(), Problem: "cannot be negative"}
	}
	if c.ExitSettle < 0 {
		return &FlagError{Flag: "ExitSettle", Value: c.ExitSettle.String(), Problem: "cannot be negative"}
	}
	if c.ProcsPerHost < 0 {
		return &FlagError{Flag: "--ranks-per-host", Value: strconv.Itoa(c.ProcsPerHost), Problem: "cannot be negative", Fix: "use e.g. --ranks-per-host 2"}
	}
	seen := map[string]bool{}
	for _, h := range c.HostLabels {
		if h == "" {
			return &FlagError{Flag: "--host-labels", Value: strings.Join(c.HostLabels, ","), Problem: "has an empty host label", Fix: "list labels separated by commas, e.g. --host-labels a,b,c"}
		}
		if strings.IndexFunc(h, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }) >= 0 {
			return &FlagError{Flag: "--host-labels", Value: strings.Join(c.HostLabels, ","), Problem: fmt.Sprintf("label %q has a space or control character", h), Fix: "use short labels such as node1"}
		}
		if seen[h] {
			return &FlagError{Flag: "--host-labels", Value: strings.Join(c.HostLabels, ","), Problem: fmt.Sprintf("label %q appears twice", h), Fix: "list each host once; --ranks-per-host says how many processes share one"}
		}
		seen[h] = true
	}
	if len(c.HostLabels) > 0 && c.ProcsPerHost > 0 && len(c.HostLabels)*c.ProcsPerHost < c.NumProcs() {
		return &FlagError{Flag: "--ranks-per-host", Value: strconv.Itoa(c.ProcsPerHost),
			Problem: fmt.Sprintf("%d hosts x %d processes leave no host for %d of the %d processes (ranks plus spares)",
				len(c.HostLabels), c.ProcsPerHost, c.NumProcs()-len(c.HostLabels)*c.ProcsPerHost, c.NumProcs()),
			Fix: fmt.Sprintf("use --ranks-per-host %d or list more --host-labels", (c.NumProcs()+len(c.HostLabels)-1)/len(c.HostLabels))}
	}
	switch c.OnDeath {
	case DeathAuto, DeathContinue, DeathAbort:
	default:
		return &FlagError{Flag: "--on-death", Value: string(c.OnDeath), Problem: "unknown policy", Fix: "use continue or abort"}
	}
	if err := c.validateRespawn(); err != nil {
		return err
	}
	if c.Resume != "" {
		if fi, err := os.Stat(c.Resume); err != nil || !fi.IsDir() {
			return &FlagError{Flag: "--resume", Value: c.Resume, Problem: "not a directory", Fix: "give the checkpoint directory an earlier run wrote (its --ckpt-dir)"}
		}
	}
	for _, kv := range c.Env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return &FlagError{Flag: "Env", Value: kv, Problem: "not KEY=VALUE"}
		}
		if remote.IsContractVar(k) {
			return &FlagError{Flag: "Env", Value: kv, Problem: k + " is set by gaspirun for each process", Fix: "use the matching flag instead"}
		}
	}
	return nil
}

// validateRespawn checks the replacement budget and the refill wait.
func (c Config) validateRespawn() error {
	if c.MaxRestarts < 0 {
		return &FlagError{Flag: "--max-restarts", Value: strconv.Itoa(c.MaxRestarts), Problem: "cannot be negative",
			Fix: fmt.Sprintf("give how many replacements gaspirun may start, e.g. --max-restarts %d, or drop it for none", DefaultMaxRestarts)}
	}
	// Every replacement takes a new process id, never reused; the member
	// table holds at most bootstrap.MaxProcs.
	if n := c.NumProcs() + c.MaxRestarts; n > bootstrap.MaxProcs {
		return &FlagError{Flag: "--max-restarts", Value: strconv.Itoa(c.MaxRestarts),
			Problem: fmt.Sprintf("with %d processes at the start, the replacements would take process ids up to %d, beyond the %d a job may have", c.NumProcs(), n-1, bootstrap.MaxProcs),
			Fix:     fmt.Sprintf("give at most --max-restarts %d", bootstrap.MaxProcs-c.NumProcs())}
	}
	if c.StdinTo >= c.Ranks && c.Ranks > 0 {
		return &FlagError{Flag: "--stdin", Value: strconv.Itoa(c.StdinTo), Problem: fmt.Sprintf("names no rank of the job's %d", c.Ranks),
			Fix: fmt.Sprintf("give a rank from 0 to %d, all or none", c.Ranks-1)}
	}
	if c.Respawn() && c.OnDeath == DeathAbort {
		return &FlagError{Flag: "--respawn", Problem: "replaces processes the job survives, but --on-death abort tears the job down at the first death",
			Fix: "drop --on-death abort (with --respawn a death is survived), or drop --respawn"}
	}
	if c.RefillWait < 0 {
		return &FlagError{Flag: "--refill-wait", Value: c.RefillWait.String(), Problem: "cannot be negative",
			Fix: fmt.Sprintf("give how long a lost rank may wait for its replacement, e.g. --refill-wait %v, or 0 for no wait", DefaultRefillWait)}
	}
	if c.RefillWait > 0 && !c.Respawn() {
		return &FlagError{Flag: "--refill-wait", Value: c.RefillWait.String(), Problem: "makes lost ranks wait for replacements, which only --respawn starts",
			Fix: "give --respawn too, or drop --refill-wait"}
	}
	return nil
}

// validateBackend checks the settings of the back ends.
func (c Config) validateBackend() error {
	kind := c.Backend()
	switch kind {
	case LauncherLocal, LauncherSSH, LauncherSlurm:
	default:
		return &FlagError{Flag: "--launcher", Value: string(c.Launcher), Problem: "unknown launcher", Fix: "use local, ssh or slurm"}
	}
	if c.Hostfile != "" && len(c.HostList) > 0 {
		return &FlagError{Flag: "--host", Value: FormatHostList(c.HostList), Problem: "and --hostfile both name the hosts",
			Fix: "give one of them"}
	}
	if kind == LauncherSSH && c.Hostfile == "" && len(c.HostList) == 0 {
		return &FlagError{Flag: "--launcher", Value: "ssh", Problem: "needs the hosts", Fix: "give --hostfile FILE or --host a,b"}
	}
	if kind != LauncherSSH && c.Hostfile != "" {
		return &FlagError{Flag: "--hostfile", Value: c.Hostfile, Problem: "is for --launcher ssh, not " + string(kind),
			Fix: "drop --launcher, or drop --hostfile"}
	}
	if kind != LauncherSSH && len(c.HostList) > 0 {
		return &FlagError{Flag: "--host", Value: FormatHostList(c.HostList), Problem: "is for --launcher ssh, not " + string(kind),
			Fix: "drop --launcher, or drop --host (--host-labels only labels processes on this machine)"}
	}
	if kind != LauncherLocal && (len(c.HostLabels) > 0 || c.ProcsPerHost > 0) {
		why := "--hostfile or --host names the hosts"
		if kind == LauncherSlurm {
			why = "the Slurm allocation names the hosts (SLURM_JOB_ID is set)"
		}
		return &FlagError{Flag: "--host-labels/--ranks-per-host", Problem: "only label processes of a local job; " + why,
			Fix: "drop them, or give --launcher local to run every process on this machine"}
	}
	if kind == LauncherLocal && (c.RendezvousAddr != "" || len(c.SSH) > 0 || len(c.Srun) > 0 || len(c.RemoteCommand) > 0) {
		return &FlagError{Flag: "--rendezvous-addr/--ssh/--srun/--remote-gaspirun", Problem: "apply to --hostfile and Slurm jobs, not to a local one",
			Fix: "give --hostfile FILE, or drop them"}
	}
	if c.RendezvousAddr != "" {
		host, port := c.RendezvousAddr, "0"
		if h, p, err := net.SplitHostPort(c.RendezvousAddr); err == nil {
			host, port = h, p
		}
		if n, err := strconv.Atoi(port); host == "" || err != nil || n < 0 || n > 65535 || strings.ContainsAny(host, " /") {
			return &FlagError{Flag: "--rendezvous-addr", Value: c.RendezvousAddr, Problem: "is not HOST or HOST:PORT",
				Fix: "give an address of this machine that every host can reach, e.g. 10.0.0.1 or 10.0.0.1:29400"}
		}
	}
	if c.PingTimeout < 0 || c.PingInterval < 0 || (c.PingTimeout > 0 && (c.PingInterval == 0 || c.PingInterval >= c.PingTimeout)) {
		return &FlagError{Flag: "PingInterval/PingTimeout", Value: fmt.Sprintf("%v/%v", c.PingInterval, c.PingTimeout),
			Problem: "the interval must be positive and shorter than the timeout"}
	}
	return nil
}

func checkProgram(p string) error {
	if p == "" {
		return &FlagError{Flag: "PROGRAM", Problem: "no program given", Fix: "usage: gaspirun -n N [flags] [--] PROGRAM [ARGS...]"}
	}
	if _, err := exec.LookPath(p); err != nil {
		fe := &FlagError{Flag: "PROGRAM", Value: p}
		switch {
		case errors.Is(err, exec.ErrNotFound):
			fe.Problem = "not found on PATH"
			fe.Fix = "give its path (e.g. ./" + p + ") or install it"
		case errors.Is(err, exec.ErrDot):
			fe.Problem = "found only in the current directory through PATH"
			fe.Fix = "write ./" + p
		case errors.Is(err, syscall.EISDIR):
			fe.Problem = "is a directory, not an executable file"
			fe.Fix = "give the program inside it"
		case errors.Is(err, fs.ErrNotExist):
			fe.Problem = "no such file"
			fe.Fix = "check the path (build the program first?)"
		case errors.Is(err, fs.ErrPermission):
			fe.Problem = "is not an executable file"
			fe.Fix = "make it executable (chmod +x) or give the program that runs it (e.g. python3 " + p + ")"
		default:
			fe.Problem = err.Error()
		}
		return fe
	}
	return nil
}
