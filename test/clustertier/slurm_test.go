package clustertier

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/internal/auth"
	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
)

// slurmCluster is a one-machine Slurm cluster started by
// deploy/slurm/local-cluster.sh for one test.
type slurmCluster struct {
	script string
	env    []string // the script's settings
	conf   string   // SLURM_CONF
	node   string   // the node's name, resolving to 127.0.1.1
	dir    string
}

// sbinLookPath finds a daemon on PATH or in /usr/sbin.
func sbinLookPath(name string) (string, bool) {
	if p, err := exec.LookPath(name); err == nil {
		return p, true
	}
	p := filepath.Join("/usr/sbin", name)
	_, err := os.Stat(p)
	return p, err == nil
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startSlurm brings a cluster up in a state directory of its own, on free
// ports, and takes it down when the test ends. It skips the test when
// Slurm is not installed or the test does not run as root.
func startSlurm(t *testing.T) *slurmCluster {
	t.Helper()
	var missing []string
	for _, b := range []string{"munged", "slurmctld", "slurmd", "srun", "salloc", "sinfo", "scontrol"} {
		if _, ok := sbinLookPath(b); !ok {
			missing = append(missing, b)
		}
	}
	if len(missing) > 0 {
		t.Skipf("Slurm is not installed (no %s): apt-get install -y slurmctld slurmd slurm-client munge, or deploy/slurm/local-cluster.sh install",
			strings.Join(missing, ", "))
	}
	if os.Geteuid() != 0 {
		t.Skip("a local Slurm cluster needs root (slurmd starts tasks as their user)")
	}
	root, err := proctest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "clustertier-slurm-")
	if err != nil {
		t.Fatal(err)
	}
	c := &slurmCluster{
		script: filepath.Join(root, "deploy", "slurm", "local-cluster.sh"),
		node:   "gaspigo-t" + strconv.Itoa(os.Getpid()),
		dir:    dir,
		conf:   filepath.Join(dir, "slurm.conf"),
	}
	c.env = append(os.Environ(), "GASPIGO_SLURM_DIR="+dir, "GASPIGO_SLURM_NODE="+c.node,
		"GASPIGO_SLURMCTLD_PORT="+strconv.Itoa(freePort(t)), "GASPIGO_SLURMD_PORT="+strconv.Itoa(freePort(t)))
	t.Cleanup(func() {
		if out, err := c.script1("down"); err != nil {
			t.Errorf("local-cluster.sh down: %v\n%s", err, out)
		}
		if !t.Failed() {
			os.RemoveAll(dir)
		} else {
			t.Logf("the cluster's logs are kept in %s/log", dir)
		}
	})
	begin := time.Now()
	if out, err := c.script1("up"); err != nil {
		t.Fatalf("local-cluster.sh up: %v\n%s\n%s", err, out, c.logs())
	}
	t.Logf("Slurm up in %v: node %s, SLURM_CONF=%s", time.Since(begin).Round(time.Millisecond), c.node, c.conf)
	return c
}

func (c *slurmCluster) script1(verb string) (string, error) {
	return runScript(c.script, c.env, 90*time.Second, verb)
}

// logs returns the tails of the daemons' logs, for failure messages.
func (c *slurmCluster) logs() string {
	return logTails(c.dir, "munged.log", "slurmctld.log", "slurmd.log")
}

// jobEnv is the environment of a command run against the cluster: the
// test's, without any Slurm or PGAS variables of its own (but PGAS_TLS, so
// that PGAS_TLS=1 runs the tier under TLS), plus extra.
func (c *slurmCluster) jobEnv(extra ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "SLURM") || (strings.HasPrefix(k, "PGAS_") && k != "PGAS_TLS") {
			continue
		}
		out = append(out, kv)
	}
	return append(append(out, "SLURM_CONF="+c.conf), extra...)
}

// slurmRun runs a Slurm client command (srun, salloc) to its end, watching
// /proc for the job's processes (by PGAS_JOB_ID), and checks that none is
// left afterwards.
func slurmRun(t *testing.T, c *slurmCluster, jobID string, env []string, name string, args ...string) (out string, code int, wall time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), jobDeadline)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = env
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	p := start(t, name, cmd)
	pids := proctest.NewProcs()
	stop := pids.Watch(jobID, cmd.Process.Pid, 20*time.Millisecond)
	p.wait(jobDeadline + time.Minute) // the context ends it first
	stop()
	pids.Scan(jobID, cmd.Process.Pid)
	for _, pid := range pids.Leftovers(15 * time.Second) {
		t.Errorf("process %d of job %s was still running 15s after %s ended; killed it", pid, jobID, name)
	}
	if len(pids.PIDs()) < ranks {
		t.Errorf("saw only %d processes of job %s: the leftover check cannot be trusted", len(pids.PIDs()), jobID)
	}
	if ctx.Err() != nil {
		t.Fatalf("%s did not end within %v\n%s\n%s", name, jobDeadline, noRaft(p.output()), c.logs())
	}
	return p.output(), p.exitCode(), p.wall()
}

// TestSlurm runs K-means under a real slurmctld and slurmd: 6 tasks, 2 of
// them spares, rank 2 SIGKILLed after iteration 12. PGAS_RENDEZVOUS is the
// node's name, which resolves to 127.0.1.1 (as a Debian host's own name
// does), with the port of the test's choosing.
func TestSlurm(t *testing.T) {
	needBins(t)
	c := startSlurm(t)
	ref := referenceSum(t)
	if addrs, err := net.LookupHost(c.node); err != nil || len(addrs) == 0 || addrs[0] != "127.0.1.1" {
		t.Fatalf("node name %s resolves to %v (%v), want 127.0.1.1", c.node, addrs, err)
	}
	inject := []string{"--inject", "kill:rank=2,iter=12"}
	n := strconv.Itoa(ranks + spares)

	// The bare contract: srun starts the processes, process 0 hosts the
	// rendezvous. The answer is right, but srun reports the killed task.
	t.Run("srun", func(t *testing.T) {
		token := auth.FormatToken(auth.NewToken())
		jobID := fmt.Sprintf("clustertier-srun-%d-%x", os.Getpid(), rand.Uint32())
		env := c.jobEnv("PGAS_TOKEN="+token, "PGAS_SPARES="+strconv.Itoa(spares),
			fmt.Sprintf("PGAS_RENDEZVOUS=%s:%d", c.node, freePort(t)), "PGAS_JOB_ID="+jobID, "PGAS_LOG=info")
		args := append(append([]string{"-n", n, "-J", jobID, bins.kmeans}, workload...), inject...)
		out, code, wall := slurmRun(t, c, jobID, env, "srun", args...)
		if sums := finals(out); len(sums) != 1 || sums[0] != ref {
			t.Fatalf("srun exit %d, final checksums %v, want exactly the failure-free %s\n%s", code, sums, ref, noRaft(out))
		}
		if !strings.Contains(out, "inject: SIGKILL rank 2") || !strings.Contains(out, "msg=recovered") {
			t.Fatalf("no kill or no recovery\n%s", noRaft(out))
		}
		// srun's own verdict: the highest task exit, here 128+SIGKILL.
		if code != 137 {
			t.Errorf("srun exit %d, want 137 (srun reports the SIGKILLed task)", code)
		}
		t.Logf("srun -n %s, rank 2 killed and replaced: exit %d, failure-free checksum, wall %v", n, code, wall.Round(time.Millisecond))
	})

	// The documented command: gaspirun inside an allocation starts the
	// processes with srun and judges the job as in local mode.
	t.Run("gaspirun", func(t *testing.T) {
		jobID := fmt.Sprintf("clustertier-salloc-%d-%x", os.Getpid(), rand.Uint32())
		env := c.jobEnv("PGAS_LOG=info")
		args := append(append([]string{"-n", n, "-J", jobID, bins.gaspirun, "--launcher", "slurm", "-n", strconv.Itoa(ranks),
			"--spares", strconv.Itoa(spares), "--timeout", "60s", "--job-id", jobID, "--", bins.kmeans}, workload...), inject...)
		out, code, wall := slurmRun(t, c, jobID, env, "salloc", args...)
		var sums []string
		for _, l := range strings.Split(out, "\n") {
			if _, rest, ok := strings.Cut(l, "] "); ok {
				sums = append(sums, finals(rest)...)
			}
		}
		if code != 0 || len(sums) != 1 || sums[0] != ref {
			t.Fatalf("salloc ... gaspirun --launcher slurm: exit %d, final checksums %v, want exit 0 and exactly the failure-free %s\n%s\n%s",
				code, sums, ref, noRaft(out), c.logs())
		}
		t.Logf("salloc -n %s gaspirun --launcher slurm, rank 2 killed and replaced: exit 0, failure-free checksum, wall %v", n, wall.Round(time.Millisecond))
	})
}
