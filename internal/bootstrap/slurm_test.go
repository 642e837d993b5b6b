package bootstrap

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/internal/auth"
)

// childSwitch makes the test binary act as a job process (see TestMain).
const childSwitch = "BOOTSTRAP_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childSwitch) == "1" {
		os.Exit(childMain())
	}
	os.Exit(m.Run())
}

type childOut struct {
	Proc     uint32
	Launcher Launcher
	Serve    bool
	NumProcs int
	NumRanks int
	JobID    string
	Host     string
	Table    Table
}

// childMain is a job process started without gaspirun: it reads its
// identity from the launcher's variables, hosts the rendezvous if it is
// process 0, registers, prints what it learnt as JSON, and reports
// "finished". Process 0 keeps the rendezvous up until everyone has.
func childMain() int {
	env, err := FromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	SurviveLauncherExit()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	sess, table, err := Join(ctx, LocalClientConfig(), env, Member{Proc: env.Proc, Addr: ln.Addr().String()})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	defer sess.Close()
	json.NewEncoder(os.Stdout).Encode(childOut{env.Proc, env.Launcher, env.ServeRendezvous, env.NumProcs, env.NumRanks, env.JobID, env.Host, table})
	if sess.Server() == nil {
		sess.Report(Report{Kind: KindFinished})
		return 0
	}
	for need := env.NumProcs - 1; need > 0; {
		select {
		case r := <-sess.Server().Reports():
			if r.Kind == KindFinished {
				need--
			}
		case <-ctx.Done():
			fmt.Fprintln(os.Stderr, "process 0: not every process reported finished")
			return 4
		}
	}
	return 0
}

// childEnviron is the test's environment without job variables, so the
// children see only what the test sets (PGAS_TLS passes: PGAS_TLS=1 runs
// the tests under TLS).
func childEnviron() []string {
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if (strings.HasPrefix(k, "PGAS_") && k != "PGAS_TLS") || strings.HasPrefix(k, "SLURM") || strings.HasPrefix(k, "OMPI_") ||
			strings.HasPrefix(k, "PMI_") || k == "JOB_COMPLETION_INDEX" {
			continue
		}
		out = append(out, kv)
	}
	// GORACE: children built with -race must not sleep a second at exit.
	return append(out, childSwitch+"=1", "GORACE=atexit_sleep_ms=0")
}

// TestSlurmModeProcessZeroHostsRendezvous starts the processes the way srun
// would (no gaspirun): SLURM_PROCID/SLURM_NTASKS plus the user's
// PGAS_RENDEZVOUS and PGAS_TOKEN. Process 0 starts last, so the others must
// retry until it hosts the rendezvous.
func TestSlurmModeProcessZeroHostsRendezvous(t *testing.T) {
	const nprocs = 3
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rdv := l.Addr().String()
	l.Close()
	tok := auth.FormatToken(auth.NewToken())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	type proc struct {
		cmd            *exec.Cmd
		stdout, stderr bytes.Buffer
	}
	procs := make([]*proc, nprocs)
	for p := nprocs - 1; p >= 0; p-- {
		pr := &proc{cmd: exec.CommandContext(ctx, os.Args[0], "-test.run=^$")}
		pr.cmd.Env = append(childEnviron(),
			fmt.Sprintf("SLURM_PROCID=%d", p), fmt.Sprintf("SLURM_NTASKS=%d", nprocs),
			"SLURM_JOB_ID=4242", fmt.Sprintf("SLURMD_NODENAME=node%d", p%2),
			"PGAS_SPARES=1", "PGAS_RENDEZVOUS="+rdv, "PGAS_TOKEN="+tok)
		pr.cmd.Stdout, pr.cmd.Stderr = &pr.stdout, &pr.stderr
		if err := pr.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs[p] = pr
	}
	var outs []childOut
	for p, pr := range procs {
		if err := pr.cmd.Wait(); err != nil {
			t.Fatalf("process %d: %v\nstderr: %s", p, err, pr.stderr.String())
		}
		var o childOut
		if err := json.Unmarshal(pr.stdout.Bytes(), &o); err != nil {
			t.Fatalf("process %d output %q: %v", p, pr.stdout.String(), err)
		}
		outs = append(outs, o)
	}
	for p, o := range outs {
		if o.Proc != uint32(p) || o.Launcher != LauncherSlurm || o.Serve != (p == 0) || o.NumProcs != nprocs ||
			o.NumRanks != nprocs-1 || o.JobID != "4242" || o.Host != fmt.Sprintf("node%d", p%2) {
			t.Errorf("process %d saw %+v", p, o)
		}
		if o.Table.NumProcs() != nprocs || o.Table.NumRanks != nprocs-1 || o.Table.JobID != "4242" {
			t.Errorf("process %d table %+v", p, o.Table)
		}
		if !reflect.DeepEqual(o.Table, outs[0].Table) {
			t.Errorf("process %d table differs from process 0's", p)
		}
		if m := o.Table.Members[p]; m.Pid != procs[p].cmd.Process.Pid || m.Host != o.Host {
			t.Errorf("process %d member %+v, pid %d", p, m, procs[p].cmd.Process.Pid)
		}
	}
}
