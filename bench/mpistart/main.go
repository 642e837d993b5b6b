// Command mpistart times Open MPI's start-up for the shape of job that
// bench/procscale runs under gaspirun: N processes on this machine, each
// MPI_Init and 20 allreduces of one double (c/startup.c). For each N it
// prints the time from mpirun's start to rank 0's first allreduce (the
// start-up, as procscale's "start" is gaspirun's start to rank 0's first
// iteration) and to mpirun's end, with the load average before the run.
//
//	apt-get install -y openmpi-bin libopenmpi-dev   # Debian's Open MPI: mpicc, mpirun
//	go run ./bench/mpistart -n 64,256,512
//
// It waits for the 1-minute load average to fall below 1.5 before each
// run (a figure taken above it is not a figure); -timeout bounds one run,
// which then counts as not started. Under root it passes
// --allow-run-as-root; --oversubscribe lets N processes share the cores.
// It is not part of CI.
package main

import (
	"bufio"
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/gaspigo/gaspigo/bench/internal/benchutil"
	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
)

//go:embed c/startup.c
var startupC []byte

func main() {
	ns := flag.String("n", "64,256,512", "comma-separated process counts")
	timeout := flag.Duration("timeout", 15*time.Minute, "bound on one run")
	settle := flag.Duration("settle", 5*time.Minute, "before each run, wait up to this long for the 1-minute load average to fall below 1.5")
	flag.Parse()
	counts, err := benchutil.Counts(*ns, 1)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mpistart:", err)
		os.Exit(2)
	}
	for _, tool := range []string{"mpicc", "mpirun"} {
		if _, err := exec.LookPath(tool); err != nil {
			fmt.Fprintf(os.Stderr, "mpistart: %s not found: apt-get install -y openmpi-bin libopenmpi-dev\n", tool)
			os.Exit(1)
		}
	}
	dir, err := os.MkdirTemp("", "mpistart-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "mpistart:", err)
		os.Exit(1)
	}
	defer os.RemoveAll(dir)
	exe, err := build(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mpistart:", err)
		os.Exit(1)
	}
	fmt.Printf("%6s | %10s %10s | %s\n", "N", "start", "wall", "load before")
	for _, n := range counts {
		proctest.SettleLoad(*settle)
		load := proctest.LoadAvg()
		start, wall, err := run(exe, n, *timeout)
		line := fmt.Sprintf("%6d | %10s %10s | %s", n, show(start), show(wall), load)
		if err != nil {
			line += "  (" + err.Error() + ")"
		}
		fmt.Println(line)
	}
}

func build(dir string) (string, error) {
	src := filepath.Join(dir, "startup.c")
	if err := os.WriteFile(src, startupC, 0o644); err != nil {
		return "", err
	}
	exe := filepath.Join(dir, "startup")
	if out, err := exec.Command("mpicc", "-O2", "-o", exe, src).CombinedOutput(); err != nil {
		return "", fmt.Errorf("mpicc startup.c: %v\n%s", err, out)
	}
	return exe, nil
}

// run starts mpirun with n processes and returns the time to rank 0's
// first allreduce and to mpirun's end.
func run(exe string, n int, timeout time.Duration) (start, wall time.Duration, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	args := []string{"--oversubscribe", "-np", strconv.Itoa(n), exe}
	if os.Geteuid() == 0 {
		args = append([]string{"--allow-run-as-root"}, args...)
	}
	cmd := exec.CommandContext(ctx, "mpirun", args...)
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, 0, err
	}
	cmd.Stderr = os.Stderr
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if sc.Text() == "first" && start == 0 {
			start = time.Since(t0)
		}
	}
	err = cmd.Wait()
	wall = time.Since(t0)
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("stopped after %v", timeout)
	}
	return start, wall, err
}

func show(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return d.Round(10 * time.Millisecond).String()
}
