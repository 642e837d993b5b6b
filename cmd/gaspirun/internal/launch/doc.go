// Package launch is gaspirun's logic: it starts the processes of a job on
// this machine, hosts the rendezvous, prefixes their output, and decides
// from their exits and reports how the job ends.
//
// Usage:
//
//	cfg := launch.DefaultConfig()
//	cfg.Ranks, cfg.Spares = 4, 1
//	cfg.Program, cfg.Args = "./myprog", []string{"--iters", "100"}
//	cfg.Stdout, cfg.Stderr = os.Stdout, os.Stderr
//	res, err := launch.Run(ctx, cfg) // ctx cancelled with &launch.Interrupt{sig} on Ctrl-C
//	if err != nil {
//		// could not start: bad config (ErrConfig) or ErrStart
//	}
//	os.Exit(res.ExitCode)
//
// The rules (exit status, teardown, the death policy, output prefixes) are
// documented in cmd/gaspirun. The decisions are made by a pure state
// machine (tracker) fed with exits, reports and interruptions; Run is the
// driver that owns the processes, the clock and the signals.
//
// Ordering: a process's exit is held back for at most Config.ExitSettle
// until the rendezvous reports its control connection closed, so every
// report it sent before exiting (a promoted spare's "role") is applied
// before its exit is judged.
//
// Concurrency and ownership: Run owns every goroutine it starts (one
// waiter and two output pumps per process, the rendezvous server) and
// returns only after all of them have ended; pumps that a process's own
// children keep busy are cut off after Config.Grace. Output lines from all
// processes and the launcher go through one lock, one Write per line.
// Processes run in their own process groups without a parent-death
// signal: a SIGKILLed launcher leaves them running.
package launch
