package bootstrap

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/gaspigo/gaspigo/internal/auth"
)

// Names of the variables of the environment contract. See the package
// documentation for their meaning.
const (
	VarProc            = "PGAS_PROC"
	VarNumProcs        = "PGAS_NPROCS"
	VarNumRanks        = "PGAS_NRANKS"
	VarSpares          = "PGAS_SPARES"
	VarRendezvous      = "PGAS_RENDEZVOUS"
	VarToken           = "PGAS_TOKEN"
	VarHost            = "PGAS_HOST"
	VarJobID           = "PGAS_JOB_ID"
	VarStateDir        = "PGAS_STATE_DIR"
	VarServeRendezvous = "PGAS_SERVE_RENDEZVOUS"
	// VarRendezvousTimeout bounds the registration (ClientConfig.Timeout).
	VarRendezvousTimeout = "PGAS_RENDEZVOUS_TIMEOUT"
	// VarCutOff is how long a process may be without contact with a
	// membership quorum before it gives up (spares.Config.CutOff).
	VarCutOff = "PGAS_CUTOFF"
	// VarRefillWait is how long a rank lost with no spare left waits for
	// a process that joins the job (ServerConfig.RefillWait); read by the
	// process that hosts the rendezvous, which puts it in the table.
	VarRefillWait = "PGAS_REFILL_WAIT"
	// VarOnDeath is "abort" when the launcher ends the job at the first
	// death of a process whatever the job could survive (gaspirun
	// --on-death abort); unset otherwise. A job that shrinks refuses to
	// start under it.
	VarOnDeath = "PGAS_ON_DEATH"
	// VarTLS turns on mutual TLS over every connection of the job
	// (internal/auth): 1 or 0. Every process of a job must agree.
	VarTLS = "PGAS_TLS"
	// VarJoin marks a process started after the job formed (a joiner):
	// 1 or 0. See JoinRunning.
	VarJoin = "PGAS_JOIN"
	// VarRacks names the racks (or switches) of the job's hosts, for the
	// collectives' rack level: RACK=HOST,HOST;RACK=HOST (ParseRacks).
	// Every process of a job must have the same.
	VarRacks = "PGAS_RACKS"
)

// minCutOff is the smallest PGAS_CUTOFF accepted: below it a Raft election
// on a busy host would already cut processes off.
const minCutOff = time.Second

// MaxProcs caps the number of processes of one job (ranks plus spares). It
// bounds the size of the member table every process receives.
const MaxProcs = 1 << 16

// maxHostLen bounds a host label (a DNS name is at most 253 bytes).
const maxHostLen = 255

// Launcher names what started the process, i.e. which variables FromEnv
// read the process id and count from.
type Launcher string

// Launchers that FromEnv recognises, in the order it looks for them.
const (
	LauncherPGAS       Launcher = "pgas"       // PGAS_PROC: gaspirun, or set by hand
	LauncherSlurm      Launcher = "slurm"      // SLURM_PROCID, SLURM_NTASKS (srun)
	LauncherOpenMPI    Launcher = "openmpi"    // OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE (mpirun)
	LauncherPMI        Launcher = "pmi"        // PMI_RANK, PMI_SIZE (MPICH hydra, Intel MPI)
	LauncherKubernetes Launcher = "kubernetes" // JOB_COMPLETION_INDEX (Indexed Job) plus PGAS_NPROCS
	LauncherNone       Launcher = "none"       // no launcher: a job of one process (Singleton)
)

// Env is what a process learns from its environment: who it is, how big the
// job is, and where and how to find the others.
type Env struct {
	// Proc is this process's fixed id, 0..NumProcs-1. Processes below
	// NumRanks start holding rank Proc; the others start as spares. A
	// joiner (Join) has an id from NumProcs up, or JoinerID until the
	// rendezvous assigns one.
	Proc uint32
	// NumProcs is the number of processes of the job, ranks plus spares.
	NumProcs int
	// NumRanks is the number of ranks, 1..NumProcs.
	NumRanks int
	// Rendezvous is the host:port of the rendezvous server.
	Rendezvous string
	// Token is the job's secret (auth.NewToken); every connection of the job
	// authenticates with it.
	Token []byte
	// Host is the label of the host this process runs on. Processes with the
	// same label are treated as sharing a machine (for mirror placement). It
	// need not be a real hostname: one machine can stand in for several.
	Host string
	// JobID names the job in logs and state files; may be empty.
	JobID string
	// StateDir is the job's state directory (Raft logs, disk checkpoints);
	// empty means state is kept in memory only. Processes use a subdirectory
	// per process id inside it.
	StateDir string
	// ServeRendezvous says this process hosts the rendezvous itself, by
	// listening on Rendezvous (see ServeInProcess and Join).
	ServeRendezvous bool
	// Launcher says which variables the process id came from.
	Launcher Launcher
	// RendezvousTimeout (PGAS_RENDEZVOUS_TIMEOUT) bounds the registration:
	// a process that has no member table after this long gives up. 0:
	// DefaultRendezvousTimeout.
	RendezvousTimeout time.Duration
	// CutOff (PGAS_CUTOFF) is how long a process may be without contact
	// with a membership quorum before it gives up as cut off. 0: the
	// membership's default (spares.DefaultConfig).
	CutOff time.Duration
	// RefillWait (PGAS_REFILL_WAIT), where this process hosts the
	// rendezvous: how long a rank lost while no spare is left waits for a
	// process that joins the job, a pod the Kubernetes Job controller
	// recreated (the table carries it to every process). 0: no wait, the
	// job fails (or shrinks) at once. gaspirun sets it with --respawn.
	RefillWait time.Duration
	// DeathAborts (PGAS_ON_DEATH=abort): the launcher ends the job at the
	// first death of a process.
	DeathAborts bool
	// TLS (PGAS_TLS) runs mutual TLS 1.3, keyed by the token, over every
	// connection of the job once its token handshake succeeds: data plane,
	// rendezvous, Raft and control RPC (see internal/auth).
	TLS bool
	// Join (PGAS_JOIN) says this process was started after the job formed,
	// to refill its spare pool: it registers with JoinRunning and gets a
	// new process id. Proc is then JoinerID until the rendezvous assigns
	// one, unless the launcher reserved one (PGAS_PROC); NumProcs and
	// NumRanks are 0 when the environment does not give them (the member
	// table does).
	Join bool
	// Racks (PGAS_RACKS) maps host labels to rack labels (ParseRacks); nil
	// when unset. A host it does not name is a rack of its own.
	Racks map[string]string
}

// NumSpares is the number of spare processes: NumProcs - NumRanks.
func (e Env) NumSpares() int { return e.NumProcs - e.NumRanks }

// InitialRank returns the rank this process holds at start, and false for
// a spare (a joiner is one).
func (e Env) InitialRank() (rank int, ok bool) {
	if !e.Join && int64(e.Proc) < int64(e.NumRanks) {
		return int(e.Proc), true
	}
	return -1, false
}

// LogValue keeps the token out of logs.
func (e Env) LogValue() slog.Value {
	return slog.GroupValue(
		slog.Any("proc", e.Proc),
		slog.Int("nprocs", e.NumProcs),
		slog.Int("nranks", e.NumRanks),
		slog.String("rendezvous", e.Rendezvous),
		slog.String("host", e.Host),
		slog.String("job", e.JobID),
		slog.String("launcher", string(e.Launcher)),
		slog.Bool("serve_rendezvous", e.ServeRendezvous),
		slog.Bool("tls", e.TLS),
		slog.Bool("join", e.Join),
	)
}

// String describes e without the token.
func (e Env) String() string {
	if e.Join {
		id := "id to be assigned"
		if e.Proc != JoinerID {
			id = fmt.Sprintf("reserved id %d", e.Proc)
		}
		return fmt.Sprintf("joiner (%s), host %q, rendezvous %s", id, e.Host, e.Rendezvous)
	}
	return fmt.Sprintf("proc %d of %d (%d ranks), host %q, rendezvous %s, launcher %s",
		e.Proc, e.NumProcs, e.NumRanks, e.Host, e.Rendezvous, e.Launcher)
}

// FromEnv reads the process's environment. See FromLookup.
func FromEnv() (Env, error) { return FromLookup(os.LookupEnv) }

// NotLaunched reports whether no launcher started this process: neither
// PGAS_PROC nor any launcher's variables that FromLookup reads are set (a
// program run from the shell alone, as an MPI program may run without
// mpirun).
func NotLaunched(lookup func(string) (string, bool)) bool {
	set := func(name string) bool { v, ok := lookup(name); return ok && strings.TrimSpace(v) != "" }
	if set(VarJoin) {
		return false
	}
	for _, src := range sources {
		if set(src.procVar) {
			return false
		}
	}
	return true
}

// singletonRendezvous is where a Singleton hosts its rendezvous: a free
// loopback port.
const singletonRendezvous = "127.0.0.1:0"

// Singleton is the environment of a job of one process and one rank that
// no launcher started: it hosts its own rendezvous on a free loopback
// port (Join learns which), with a fresh token.
func Singleton() Env {
	host, _ := os.Hostname()
	return Env{Proc: 0, NumProcs: 1, NumRanks: 1, Rendezvous: singletonRendezvous, Token: auth.NewToken(),
		Host: host, ServeRendezvous: true, Launcher: LauncherNone}
}

// FromLookup builds an Env from the variables lookup returns (os.LookupEnv
// in FromEnv): the process's identity from the first of sources whose
// variables are set (PGAS_PROC takes precedence; then the Slurm, Open MPI,
// PMI and Kubernetes variables, in that order), or a joiner's; then each
// of settings. Empty values count as unset. The result is validated;
// errors are *EnvError values naming the variable, its value and what to
// do.
func FromLookup(lookup func(string) (string, bool)) (Env, error) {
	get := func(name string) (string, bool) {
		v, ok := lookup(name)
		v = strings.TrimSpace(v)
		return v, ok && v != ""
	}
	e, src, err := whoAmI(get)
	if err != nil {
		return Env{}, err
	}
	for _, s := range settings {
		if err := s.apply(&e, get, src); err != nil {
			return Env{}, err
		}
	}
	if err := e.Validate(); err != nil {
		return Env{}, err
	}
	return e, nil
}

// getter looks up a variable; empty values count as unset.
type getter func(name string) (string, bool)

// whoAmI reads the process's identity: a joiner's (PGAS_JOIN=1), or that
// of the first source whose variables are set.
func whoAmI(get getter) (Env, *source, error) {
	join, err := parseJoin(get)
	if err != nil {
		return Env{}, nil, err
	}
	if join {
		e, err := joinerIdentity(get)
		return e, joinerSource, err
	}
	return identity(get)
}

// Validate checks e without changing it. Errors are *EnvError values that
// name the PGAS variable the field corresponds to.
func (e Env) Validate() error {
	if e.Join {
		if err := e.validateJoiner(); err != nil {
			return err
		}
		return e.validateRest()
	}
	if e.NumProcs < 1 || e.NumProcs > MaxProcs {
		return &EnvError{Var: VarNumProcs, Value: strconv.Itoa(e.NumProcs),
			Problem: fmt.Sprintf("must be 1..%d", MaxProcs), Fix: "set it to the number of processes of the job (ranks plus spares)"}
	}
	if e.NumRanks < 1 || e.NumRanks > e.NumProcs {
		return &EnvError{Var: VarNumRanks, Value: strconv.Itoa(e.NumRanks),
			Problem: fmt.Sprintf("must be 1..%d (PGAS_NPROCS=%d)", e.NumProcs, e.NumProcs), Fix: "ranks plus spares must equal PGAS_NPROCS"}
	}
	if int64(e.Proc) >= int64(e.NumProcs) {
		return &EnvError{Var: VarProc, Value: strconv.FormatUint(uint64(e.Proc), 10),
			Problem: fmt.Sprintf("must be 0..%d (PGAS_NPROCS=%d)", e.NumProcs-1, e.NumProcs), Fix: "give each process a distinct id below PGAS_NPROCS"}
	}
	return e.validateRest()
}

// validateJoiner checks a joiner's id and counts, which it may not know
// yet (JoinerID, 0), and that it does not host the rendezvous: the job it
// joins has one already.
func (e Env) validateJoiner() error {
	if e.NumProcs < 0 || e.NumProcs > MaxProcs {
		return &EnvError{Var: VarNumProcs, Value: strconv.Itoa(e.NumProcs),
			Problem: fmt.Sprintf("must be 1..%d, or unset for a joiner", MaxProcs), Fix: "unset it, or set it to the job's number of processes as started"}
	}
	hi := MaxProcs
	if e.NumProcs > 0 {
		hi = e.NumProcs
	}
	if e.NumRanks < 0 || e.NumRanks > hi {
		return &EnvError{Var: VarNumRanks, Value: strconv.Itoa(e.NumRanks),
			Problem: fmt.Sprintf("must be 1..%d, or unset for a joiner", hi), Fix: "unset it, or set it to the job's number of ranks"}
	}
	if e.Proc != JoinerID {
		low := max(e.NumProcs, e.NumRanks) // ids below belong to the job's first processes
		if int64(e.Proc) < int64(low) || e.Proc >= MaxProcs {
			return &EnvError{Var: VarProc, Value: strconv.FormatUint(uint64(e.Proc), 10),
				Problem: fmt.Sprintf("a joiner's id must be %d..%d: the lower ids belong to the processes the job was started with", low, MaxProcs-1),
				Fix:     "unset it (the rendezvous assigns a new id), or set it to the id the launcher reserved for this joiner"}
		}
	}
	if e.ServeRendezvous {
		return errJoinerServes
	}
	return nil
}

// errJoinerServes: a joiner joins a job whose rendezvous is served already.
var errJoinerServes = &EnvError{Var: VarServeRendezvous, Value: "1",
	Problem: "set for a joiner (PGAS_JOIN=1), which joins a running job whose rendezvous is served already",
	Fix:     "unset PGAS_SERVE_RENDEZVOUS for a joiner, and set PGAS_RENDEZVOUS to the running job's rendezvous"}

// validateRest checks what every process needs in the same form.
func (e Env) validateRest() error {
	if err := checkAddr(e.Rendezvous); err != nil {
		return &EnvError{Var: VarRendezvous, Value: e.Rendezvous, Unset: e.Rendezvous == "", Problem: err.Error(), Fix: "use host:port, e.g. node1:29400"}
	}
	if why := auth.TokenWeakness(e.Token); why != "" {
		return &EnvError{Var: VarToken, Value: redact(auth.FormatToken(e.Token)), Unset: len(e.Token) == 0,
			Problem: "a weak job token: " + why, Fix: auth.TokenAdvice}
	}
	if err := checkHost(e.Host); err != nil {
		return &EnvError{Var: VarHost, Value: e.Host, Unset: e.Host == "", Problem: err.Error(), Fix: "use a short label without spaces, e.g. node1"}
	}
	return nil
}

// Environ returns the PGAS variables that describe e, in KEY=VALUE form for
// exec.Cmd.Env. FromLookup over them gives e back (with Launcher "pgas").
func (e Env) Environ() []string {
	var out []string
	if e.Join {
		// A joiner's id and counts may not be known yet; what is not,
		// stays unset.
		out = append(out, VarJoin+"=1")
		if e.Proc != JoinerID {
			out = append(out, VarProc+"="+strconv.FormatUint(uint64(e.Proc), 10))
		}
		if e.NumProcs > 0 {
			out = append(out, VarNumProcs+"="+strconv.Itoa(e.NumProcs))
		}
		if e.NumRanks > 0 {
			out = append(out, VarNumRanks+"="+strconv.Itoa(e.NumRanks))
		}
	} else {
		out = append(out,
			VarProc+"="+strconv.FormatUint(uint64(e.Proc), 10),
			VarNumProcs+"="+strconv.Itoa(e.NumProcs),
			VarNumRanks+"="+strconv.Itoa(e.NumRanks))
	}
	out = append(out,
		VarRendezvous+"="+e.Rendezvous,
		VarToken+"="+auth.FormatToken(e.Token),
		VarHost+"="+e.Host)
	if e.JobID != "" {
		out = append(out, VarJobID+"="+e.JobID)
	}
	if e.StateDir != "" {
		out = append(out, VarStateDir+"="+e.StateDir)
	}
	if e.ServeRendezvous {
		out = append(out, VarServeRendezvous+"=1")
	}
	if e.RendezvousTimeout > 0 {
		out = append(out, VarRendezvousTimeout+"="+e.RendezvousTimeout.String())
	}
	if e.CutOff > 0 {
		out = append(out, VarCutOff+"="+e.CutOff.String())
	}
	if e.RefillWait > 0 {
		out = append(out, VarRefillWait+"="+e.RefillWait.String())
	}
	if e.DeathAborts {
		out = append(out, VarOnDeath+"=abort")
	}
	if e.TLS {
		out = append(out, VarTLS+"=1")
	}
	if e.Racks != nil {
		out = append(out, VarRacks+"="+FormatRacks(e.Racks))
	}
	return out
}

func parseCount(name, v string, lo, hi int, fix string) (int, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, &EnvError{Var: name, Value: v, Problem: "not a whole number", Fix: fix}
	}
	if n < int64(lo) || n > int64(hi) {
		return 0, &EnvError{Var: name, Value: v, Problem: fmt.Sprintf("out of range %d..%d", lo, hi), Fix: fix}
	}
	return int(n), nil
}

func checkAddr(a string) error {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		return fmt.Errorf("not host:port (%v)", err)
	}
	if host == "" {
		return fmt.Errorf("no host in %q", a)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 {
		return fmt.Errorf("port %q is not 1..65535", port)
	}
	return nil
}

func checkHost(h string) error {
	if h == "" {
		return fmt.Errorf("empty host label")
	}
	if len(h) > maxHostLen {
		return fmt.Errorf("host label is %d bytes, at most %d", len(h), maxHostLen)
	}
	for _, r := range h {
		if unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return fmt.Errorf("host label contains a space or control character")
		}
	}
	return nil
}

// redact shows only the start of a secret.
func redact(s string) string {
	if len(s) <= 4 {
		return "****"
	}
	return s[:4] + "…(redacted)"
}
