package launch

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/cmd/gaspirun/internal/remote"
	"github.com/gaspigo/gaspigo/internal/bootstrap"
)

// The test binary doubles as the job's program and as a launcher, selected
// by these variables (see TestMain).
const (
	roleVar = "GASPIRUN_TEST_ROLE" // "child", "plain", "usage", "sleeper", "launcher", "fakessh" or "fakesrun"
	modeVar = "GASPIRUN_TEST_MODE" // what a child does
	dirVar  = "GASPIRUN_TEST_DIR"  // where "survive" children leave marks

	// noRaceExitDelay keeps children built with -race from sleeping a
	// second at exit.
	noRaceExitDelay = "GORACE=atexit_sleep_ms=0"
)

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "--remote-exec" {
		signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE) // as gaspirun's main
		os.Exit(remote.Exec(os.Stdin, os.Stdout, os.Stderr))
	}
	switch os.Getenv(roleVar) {
	case "fakessh", "fakesrun":
		os.Exit(fakeConnectorMain(os.Getenv(roleVar), os.Args[1:]))
	case "child":
		os.Exit(childMain(os.Getenv(modeVar)))
	case "plain":
		// A program that never joins the runtime, as hostname: it prints
		// one line and exits with the code in GASPIRUN_TEST_CODE_<proc>.
		p := os.Getenv("PGAS_PROC")
		fmt.Printf("plain %s\n", p)
		code, _ := strconv.Atoi(os.Getenv("GASPIRUN_TEST_CODE_" + p))
		os.Exit(code)
	case "usage":
		// A program given a bad flag: every process says the same on
		// stderr and exits 2.
		fmt.Fprintln(os.Stderr, "prog: --bogus: no such flag (prog --help lists them)")
		os.Exit(2)
	case "sleeper":
		time.Sleep(time.Hour)
		os.Exit(0)
	case "launcher":
		os.Exit(launcherMain())
	}
	os.Exit(m.Run())
}

func sleepForever() { time.Sleep(time.Hour) }

// childMain is the job's program. Modes:
//
//	same     print "the same line", then "proc N", and exit 0
//	env      print the environment contract and the table, one line to stdout and one to stderr
//	exit3    rank 1 exits 3; the others wait to be stopped
//	plain0   process 0 exits 0 without registering; the others register and wait
//	late1    process 1 never registers and waits for SIGTERM; the others register and wait
//	hang     start a grandchild in the same process group, ignore SIGTERM, hang
//	promote  rank 1 kills itself; the spare waits until rank 1's listener is gone,
//	         reports that it holds rank 1, and exits 0
//	drop     as promote, but rank 1 leaves a pid file, prints "ready" and waits
//	         to be killed from outside
//	hold     leave a pid file, print "ready", wait for a stop file (ranks) or
//	         SIGTERM (spares), exit 0
//	survive  leave a pid file, print until the launcher is gone, mark that, wait for a stop file
//	refill   rank 1 kills itself; rank 0 waits for a "took" file and exits 0; a
//	         joiner (PGAS_JOIN=1: a replacement) takes rank 1 (joinerMain)
func childMain(mode string) int {
	if mode == "hang" {
		// The grandchild first, so the test sees it even on a slow machine.
		gc := exec.Command(os.Args[0])
		gc.Env = append(os.Environ(), roleVar+"=sleeper")
		if err := gc.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 90
		}
		signal.Ignore(syscall.SIGTERM)
		fmt.Printf("grandchild %d\n", gc.Process.Pid)
		fmt.Printf("self %d\n", os.Getpid())
	}
	if mode == "plain0" && os.Getenv("PGAS_PROC") == "0" {
		return 0
	}
	if mode == "late1" && os.Getenv("PGAS_PROC") == "1" {
		// A process that never gets to register (stopped, starved):
		// until the launcher stops it.
		waitTerm()
		return 0
	}
	env, err := bootstrap.FromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 91
	}
	bootstrap.SurviveLauncherExit()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 92
	}
	if env.Join {
		return joinerMain(env, ln)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sess, table, err := bootstrap.RegisterWith(ctx, bootstrap.LocalClientConfig(), env, bootstrap.Member{Proc: env.Proc, Addr: ln.Addr().String()})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 93
	}
	rank, isRank := env.InitialRank()
	switch mode {
	case "env":
		fmt.Printf("proc=%d nprocs=%d nranks=%d host=%s job=%s state=%s launcher=%s token=%d serve=%v table=%d\n",
			env.Proc, env.NumProcs, env.NumRanks, env.Host, env.JobID, env.StateDir, env.Launcher, len(env.Token), env.ServeRendezvous, table.NumProcs())
		fmt.Printf("tls=%v\n", env.TLS)
		fmt.Fprintf(os.Stderr, "stderr line from %d\n", env.Proc)
		// Ranks leave only once every process has printed: gaspirun stops
		// idle spares as soon as the ranks are done.
		if env.StateDir != "" {
			os.WriteFile(filepath.Join(env.StateDir, fmt.Sprintf("printed.%d", env.Proc)), nil, 0o644)
			if isRank {
				for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
					n, _ := filepath.Glob(filepath.Join(env.StateDir, "printed.*"))
					if len(n) >= env.NumProcs {
						break
					}
				}
			}
		}
		if !isRank {
			waitTerm()
		}
	case "same":
		fmt.Println("the same line")
		fmt.Printf("proc %d\n", env.Proc)
	case "exit3":
		if rank == 1 {
			fmt.Println("rank 1 failing")
			return 3
		}
		fmt.Println("waiting")
		sleepForever()
	case "hang":
		fmt.Println("ready")
		sleepForever()
	case "hold":
		dir := os.Getenv(dirVar)
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("pid.%d", env.Proc)), []byte(fmt.Sprint(os.Getpid())), 0o644)
		fmt.Println("ready")
		if !isRank {
			waitTerm()
			break
		}
		for {
			if _, err := os.Stat(filepath.Join(dir, "stop")); err == nil {
				break
			}
			select {
			case <-time.After(10 * time.Millisecond):
			case <-ctx.Done():
				return 97
			}
		}
	case "refill":
		switch rank {
		case 1:
			fmt.Println("dying")
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			sleepForever()
		case 0:
			took := filepath.Join(os.Getenv(dirVar), "took")
			for {
				if _, err := os.Stat(took); err == nil {
					break
				}
				select {
				case <-time.After(10 * time.Millisecond):
				case <-ctx.Done():
					return 97
				}
			}
			fmt.Println("rank 1 is back")
		}
	case "promote", "drop":
		switch {
		case rank == 1 && mode == "drop":
			os.WriteFile(filepath.Join(os.Getenv(dirVar), fmt.Sprintf("pid.%d", env.Proc)), []byte(fmt.Sprint(os.Getpid())), 0o644)
			fmt.Println("ready")
			sleepForever()
		case rank == 1:
			fmt.Println("dying")
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			sleepForever()
		case !isRank:
			// A refused dial is how a peer learns of a death.
			if !awaitRefused(ctx, table.Members[1].Addr) {
				return 94
			}
			sess.Report(bootstrap.Report{Kind: bootstrap.KindRole, Rank: 1, Epoch: 1})
			fmt.Println("promoted")
		}
	case "survive":
		dir := os.Getenv(dirVar)
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("pid.%d", env.Proc)), []byte(fmt.Sprint(os.Getpid())), 0o644)
		tick := time.NewTicker(10 * time.Millisecond)
		for lost := false; !lost; {
			select {
			case <-tick.C:
				fmt.Println("tick")
			case <-sess.Lost():
				lost = true
			case <-ctx.Done():
				return 95
			}
		}
		// The launcher is gone and so is the reader of our stdout: this
		// write fails with EPIPE instead of killing us.
		fmt.Println("still here")
		fmt.Fprintln(os.Stderr, "still here")
		os.WriteFile(filepath.Join(dir, fmt.Sprintf("lost.%d", env.Proc)), nil, 0o644)
		for {
			if _, err := os.Stat(filepath.Join(dir, "stop")); err == nil {
				return 0
			}
			select {
			case <-tick.C:
			case <-ctx.Done():
				return 96
			}
		}
	}
	sess.Close()
	return 0
}

// joinerMain is a replacement's part: it joins the running job, takes
// rank 1 once rank 1's listener is gone (as a promoted spare, it reports
// its role), tells rank 0 with a "took" file, and exits 0.
func joinerMain(env bootstrap.Env, ln net.Listener) int {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sess, table, id, err := bootstrap.JoinRunning(ctx, bootstrap.LocalClientConfig(), env, bootstrap.Member{Addr: ln.Addr().String()})
	if errors.Is(err, bootstrap.ErrJobFinished) {
		fmt.Println("the job finished before I joined")
		return 0
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 98
	}
	if id != env.Proc {
		fmt.Fprintf(os.Stderr, "joined as process %d, but gaspirun reserved %d\n", id, env.Proc)
		return 99
	}
	if !awaitRefused(ctx, table.Members[1].Addr) {
		return 94
	}
	sess.Report(bootstrap.Report{Kind: bootstrap.KindRole, Rank: 1, Epoch: 2})
	fmt.Printf("joined as %d on %s, holding rank 1\n", id, env.Host)
	os.WriteFile(filepath.Join(os.Getenv(dirVar), "took"), nil, 0o644)
	sess.Close()
	return 0
}

func waitTerm() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM)
	<-c
}

// launcherMain runs a job of "survive" children, for the test that kills
// the launcher.
func launcherMain() int {
	cfg := LocalConfig()
	cfg.Launcher = LauncherLocal
	cfg.Ranks = 2
	cfg.Program = os.Args[0]
	cfg.Env = []string{roleVar + "=child", modeVar + "=survive", dirVar + "=" + os.Getenv(dirVar), noRaceExitDelay}
	cfg.Stdout, cfg.Stderr = os.Stdout, os.Stderr
	res, err := Run(context.Background(), cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	return res.ExitCode
}

// alive reports whether pid is a running (not zombie) process.
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// State is the field after the parenthesised command name.
	for i := len(b) - 1; i > 0; i-- {
		if b[i] == ')' && i+2 < len(b) {
			return b[i+2] != 'Z'
		}
	}
	return true
}

// waitGone fails the test unless every pid is gone within the deadline.
func waitGone(t *testing.T, pids []int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for alive(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("process %d is still running", pid)
			}
			time.Sleep(10 * time.Millisecond) // real processes: poll with a deadline
		}
	}
}

// awaitRefused dials addr until a dial fails (nothing listens there any
// more: the process died), or ctx ends (false).
func awaitRefused(ctx context.Context, addr string) bool {
	for {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return true
		}
		c.Close()
		select {
		case <-ctx.Done():
			return false
		case <-time.After(10 * time.Millisecond):
		}
	}
}
