package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/gaspigo/gaspigo/cmd/gaspirun/internal/launch"
	"github.com/gaspigo/gaspigo/cmd/gaspirun/internal/remote"
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
		return remote.Exec(os.Stdin, os.Stdout, os.Stderr)
	}
	cfg, what, err := parseFlags(args, stderr)
	if err != nil {
		return usageError(stderr, err)
	}
	switch what {
	case actHelp:
		writeHelp(stdout)
		return 0
	case actVersion:
		fmt.Fprintln(stdout, version())
		return 0
	case actNewToken:
		fmt.Fprintln(stdout, auth.FormatToken(auth.NewToken()))
		return 0
	}
	cfg.Stdout, cfg.Stderr = stdout, stderr
	cfg.Stdin = os.Stdin // --stdin: rank 0's by default, as under mpirun
	if err := cfg.Validate(); err != nil {
		return usageError(stderr, err)
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

// usageError prints a bad command line's error and where the flags are
// described, not the whole help, and returns gaspirun's exit code for it.
func usageError(stderr io.Writer, err error) int {
	fmt.Fprintf(stderr, "gaspirun: %v\n", err)
	fmt.Fprintln(stderr, "Run 'gaspirun --help' for the flags.")
	return 2
}
