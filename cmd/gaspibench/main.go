package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"

	"github.com/gaspigo/gaspigo/cmd/gaspibench/internal/bench"
	"github.com/gaspigo/gaspigo/internal/buildinfo"
	"github.com/gaspigo/gaspigo/job"
	"github.com/gaspigo/gaspigo/pgas"
	"github.com/gaspigo/gaspigo/transport/tcp"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the program: flags -> Config -> runtime -> bench.Run -> Close.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 1 && (args[0] == "--version" || args[0] == "-version") {
		fmt.Fprintln(stdout, buildinfo.Version("gaspibench"))
		return 0
	}
	opts, err := bench.ParseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		// Every process says it before exiting: the launcher stops the
		// others as soon as the first one exits, so a message printed by
		// one chosen process only could be lost.
		fmt.Fprintf(stderr, "gaspibench: %v\n", err)
		return 2
	}
	if os.Getenv("PGAS_RENDEZVOUS") == "" {
		fmt.Fprintln(stderr, "gaspibench: no job to join (PGAS_RENDEZVOUS is unset); start it under the launcher, e.g.\n  gaspirun -n 2 -- gaspibench")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, opts.Config.Timeout)
	defer cancel()

	base := pgas.DefaultConfig()
	base.SpinWait = opts.Config.Spin
	jo := job.Options{Runtime: &base}
	if pollSpin := opts.Config.PollSpin; pollSpin != bench.AutoPollSpin {
		jo.TCP = func(c *tcp.Config) { c.PollSpin = pollSpin }
	}
	rt, err := job.Init(ctx, jo)
	if err != nil {
		fmt.Fprintf(stderr, "gaspibench: joining the job: %v\n", err)
		return 1
	}
	defer rt.Close()

	if opts.CPUProfile != "" {
		f, err := os.OpenFile(fmt.Sprintf("%s.r%d", opts.CPUProfile, rt.Rank()), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			fmt.Fprintf(stderr, "gaspibench: --cpuprofile: %v\n", err)
			return 2
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(stderr, "gaspibench: --cpuprofile: %v\n", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	out := stdout
	if opts.Out != "" && rt.Rank() == 0 {
		f, err := os.OpenFile(opts.Out, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			fmt.Fprintf(stderr, "gaspibench: --out: %v\n", err)
			return 2
		}
		defer f.Close()
		out = io.MultiWriter(stdout, f)
	}
	if _, err := bench.Run(ctx, rt, opts.Config, out); err != nil {
		fmt.Fprintf(stderr, "gaspibench: rank %d: %v\n", rt.Rank(), err)
		return 1
	}
	return 0
}
