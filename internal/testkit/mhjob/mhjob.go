package mhjob

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"

	"github.com/gaspigo/gaspigo/internal/auth"
	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
	"github.com/gaspigo/gaspigo/internal/testkit/simhost"
)

// RendezvousPort is the port process 0 serves the rendezvous on when
// Config.Rendezvous is empty. Every cluster has its own namespaces, so a
// fixed port never collides.
const RendezvousPort = 29400

// Config describes one job.
type Config struct {
	// Cluster holds the hosts; required.
	Cluster *simhost.Cluster
	// Program is the path of the program every process runs, with Args.
	Program string
	Args    []string
	// Hosts[p] is the index of the host that runs process p; its length
	// is the number of processes (PGAS_NPROCS). Process 0 serves the
	// rendezvous.
	Hosts []int
	// Spares is PGAS_SPARES: the last Spares processes start as spares.
	Spares int
	// Rendezvous is PGAS_RENDEZVOUS. Empty: the address of process 0's
	// host and RendezvousPort. A host name (e.g. "node1:29400") is
	// resolved by each process through its own host's /etc/hosts.
	Rendezvous string
	// JobID is PGAS_JOB_ID; empty: a fresh one.
	JobID string
	// Env is added to every process's environment (PGAS_LOG=info, ...),
	// after the machine's own minus any PGAS_* variable but PGAS_TLS. EnvOf, if set,
	// adds per-process variables after that.
	Env   []string
	EnvOf func(proc int) []string
	// OnLine, if set, is called with every line as it arrives (see
	// proctest.JobConfig.OnLine: with the job's lock held).
	OnLine func(proctest.Line)
}

// Job is a started job: proctest's runner over its processes (a line's
// Proc is the process id), with the host of each.
type Job struct {
	*proctest.Job
	cfg   Config
	hosts []*simhost.Host // by process id
}

// Start starts every process of the job. On error the processes already
// started are killed.
func Start(ctx context.Context, cfg Config) (*Job, error) {
	if cfg.Cluster == nil || cfg.Program == "" || len(cfg.Hosts) == 0 {
		return nil, errors.New("mhjob: Config needs a Cluster, a Program and at least one entry in Hosts")
	}
	if cfg.Spares < 0 || cfg.Spares >= len(cfg.Hosts) {
		return nil, fmt.Errorf("mhjob: Spares = %d with %d processes: want 0..%d", cfg.Spares, len(cfg.Hosts), len(cfg.Hosts)-1)
	}
	hosts := cfg.Cluster.Hosts()
	for p, h := range cfg.Hosts {
		if h < 0 || h >= len(hosts) {
			return nil, fmt.Errorf("mhjob: Hosts[%d] = %d: the cluster has hosts 0..%d", p, h, len(hosts)-1)
		}
	}
	if cfg.Rendezvous == "" {
		cfg.Rendezvous = net.JoinHostPort(hosts[cfg.Hosts[0]].Addr().String(), strconv.Itoa(RendezvousPort))
	}
	if cfg.JobID == "" {
		cfg.JobID = fmt.Sprintf("mh-%d-%s", os.Getpid(), auth.FormatToken(auth.NewToken())[:8])
	}
	token := auth.FormatToken(auth.NewToken())
	var base []string
	for _, kv := range os.Environ() {
		// PGAS_TLS passes, so that PGAS_TLS=1 go test runs the tiers under TLS.
		if !strings.HasPrefix(kv, "PGAS_") || strings.HasPrefix(kv, "PGAS_TLS=") {
			base = append(base, kv)
		}
	}
	j := &Job{cfg: cfg}
	cmds := make([]*exec.Cmd, len(cfg.Hosts))
	for p, hi := range cfg.Hosts {
		h := hosts[hi]
		cmd := h.Command(context.WithoutCancel(ctx), cfg.Program, cfg.Args...)
		cmd.Env = append(append([]string(nil), base...),
			"PGAS_PROC="+strconv.Itoa(p),
			"PGAS_NPROCS="+strconv.Itoa(len(cfg.Hosts)),
			"PGAS_SPARES="+strconv.Itoa(cfg.Spares),
			"PGAS_RENDEZVOUS="+cfg.Rendezvous,
			"PGAS_TOKEN="+token,
			"PGAS_HOST="+h.Name(),
			"PGAS_JOB_ID="+cfg.JobID,
		)
		if p == 0 {
			cmd.Env = append(cmd.Env, "PGAS_SERVE_RENDEZVOUS=1")
		}
		cmd.Env = append(cmd.Env, cfg.Env...)
		if cfg.EnvOf != nil {
			cmd.Env = append(cmd.Env, cfg.EnvOf(p)...)
		}
		// Its own process group: a signal meant for the test (Ctrl-C)
		// does not reach the job, which the test ends itself.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmds[p] = cmd
		j.hosts = append(j.hosts, h)
	}
	run, err := proctest.Start(proctest.JobConfig{OnLine: cfg.OnLine}, cmds...)
	if err != nil {
		return nil, fmt.Errorf("mhjob: %w", err)
	}
	j.Job = run
	return j, nil
}

// Host is the host that runs process proc.
func (j *Job) Host(proc int) *simhost.Host { return j.hosts[proc] }

// JobID is the job's PGAS_JOB_ID.
func (j *Job) JobID() string { return j.cfg.JobID }

// Text returns every line so far as gaspirun would print them, "[pN] text".
func (j *Job) Text() []string {
	ls := j.Lines()
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = l.String()
	}
	return out
}
