// Package launch is gaspirun's logic: it starts the processes of a job,
// hosts the rendezvous, prefixes their output, and decides from their
// exits and reports how the job ends.
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
// The rules (exit status, teardown, the death policy, output prefixes, the
// launchers) are documented in cmd/gaspirun. The decisions are made by a
// pure state machine (tracker) fed with exits, reports and interruptions;
// Run is the front end that owns the processes, the clock and the signals.
//
// Back ends: Run starts and signals processes only through the backend
// interface (backend.go): localBackend forks here; remoteBackend runs each
// process through the ssh client, and stepBackend (step.go) every process
// as a task of one srun step, each as "gaspirun --remote-exec"
// (remote.Exec, package cmd/gaspirun/internal/remote) on its host. The
// protocol between the two (package remote) carries the program and its
// environment over the connector's stdin, never its argv (one header for
// all the tasks of a step), control lines ("signal N", "signal N LIST" in
// a step, "ping") after it, and a final status line with the real exit
// code or signal at the end of the program's stdout; a remote process
// whose status never arrives counts as killed (exitInfo.Lost). The step backend owns srun, a waiter, two
// relays (srun's stdout and stderr, split by task label), a pinger and a
// signaller, all ended by srun's end or close. Hostfiles
// (ParseHostfile), Slurm allocations (SlurmHosts) and placement (Place)
// are pure functions.
//
// The loop (loop.go) goes through the job's life as a state machine,
// each state a function: forming (not every process has registered),
// running, recovering (a lost process not made up for yet: a rank
// without a holder, a replacement queued, exits held), ending (the
// outcome is decided). Its event handlers (events.go) feed the tracker
// and apply its actions.
//
// Before the job forms, the tracker tells a plain program (one that never
// registers with the rendezvous, such as hostname) from a gaspigo one
// (early.go); Run feeds it the registrations it sees: a process connected
// at its exit, any report, and, while a plain process has ended and others
// run, a poll of the rendezvous every registrationPoll.
//
// Replacements (Config.MaxRestarts, respawn.go): the tracker asks for
// one per process lost while the job runs (actRespawn) within the budget;
// Run queues them, spaces their starts with an exponential backoff
// (cenkalti/backoff, reset when a replacement registers), places each
// (pickHost: a pure function of the hosts' use), reserves its id at the
// rendezvous and starts it with PGAS_JOIN=1 through the job's back end,
// or under Slurm through a remoteBackend whose connector is a one-task
// srun step. The tracker's arrays grow with the processes added after the
// start (addProc), including joiners started by hand, which the
// rendezvous reports (KindJoined) and whose disconnection ends them. Once
// the job's outcome is decided the queue is dropped and the rendezvous is
// told (Server.Finish). The backoff's timer belongs to the loop goroutine,
// like the tracker.
//
// Ordering: a process's exit is held back for at most Config.ExitSettle
// until the rendezvous reports its control connection closed, so every
// report it sent before exiting (a promoted spare's "role") is applied
// before its exit is judged.
//
// Concurrency and ownership: Run owns every goroutine it starts (one
// waiter and two output pumps per process, the rendezvous server) and
// returns only after all of them have ended; pumps that a process's own
// children keep busy are cut off after Config.Grace. The remote back end
// owns a relay goroutine per process (ended by its connector's exit, or
// after Config.Grace) and its pinger, stopped by close. Output lines from all
// processes and the launcher go through one lock, one Write per line; with
// Config.Collapse, identical lines pass through a pure core (collapser, fed
// the time with every line) and one timer, owned by output, prints the
// groups that fall due; Run flushes them and stops the timer after the
// pumps have drained.
// Local processes run in their own process groups without a parent-death
// signal: a SIGKILLed launcher leaves them running. Remote ones end with
// their connection (remote.Exec).
package launch
