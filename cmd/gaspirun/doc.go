// Command gaspirun launches a gaspigo job on this machine.
//
//	gaspirun -n N [--spares K] [--timeout D] [--hosts h1,h2,... | --ranks-per-host M]
//	         [--state-dir DIR] [--on-death continue|abort] [--quiet] [--grace D]
//	         [--job-id NAME] [--] PROGRAM [ARGS...]
//	gaspirun --new-token
//
// It starts N+K processes of PROGRAM: processes 0..N-1 hold ranks 0..N-1,
// processes N..N+K-1 are spares. Each process runs in its own process group.
// gaspirun hosts the rendezvous on an ephemeral 127.0.0.1 port with a fresh
// random job token and passes both in the environment (below).
//
// # Output
//
// Every line a process writes to stdout or stderr is printed whole, prefixed
// with the process's role: "[r2] " for rank 2, "[s5] " for spare process 5
// (it becomes "[rR] " when a "role" report says the spare now holds rank
// R), "[p1] " for a process that lost its rank to another. gaspirun's own
// lines start with "gaspirun: " and go to stderr; the last one is a summary
// (processes, how they ended, exit status, wall time) unless --quiet.
//
// # Failures and exit status
//
//   - A process that exits with a non-zero code fails the job: gaspirun
//     names the rank and the code, sends SIGTERM to every process group,
//     SIGKILL after --grace, and exits with that code (so a program's own
//     code, e.g. for "no spare left", reaches the caller).
//   - A process killed by a signal: with spares (or --on-death continue)
//     gaspirun says which rank died and that the job continues, and the
//     runtime recovers; with --spares 0 (or --on-death abort) the job is torn
//     down and gaspirun exits 128 + the signal number.
//   - When every rank's process has exited 0, the remaining (idle spare)
//     processes get SIGTERM and gaspirun exits 0.
//   - --timeout: exit 124. Ctrl-C or SIGTERM to gaspirun: exit 130 (143 for
//     SIGTERM). Both kill the processes' groups, so nothing is left behind.
//   - A rank whose process died and that no process took over, once every
//     process has ended: exit 1.
//   - A process that exits 77 (it learnt it was replaced: fenced) or 74 (it
//     gave up, cut off from the membership's quorum for PGAS_CUTOFF) is a
//     lost process like a killed one: with spares the job goes on, and a
//     recovered job exits 0; after its rank was taken over its exit is
//     ignored. A rank whose only holder exited 74 with nobody to take over
//     fails the job with 74 once every process has ended; without spares,
//     74 or 77 tears the job down at once with that code.
//   - Bad flags: exit 2, with a message saying what to change.
//
// The processes' own exit codes (spares.ExitCodeOf), which gaspirun passes
// on when they fail the job:
//
//	0    success, also a spare the job never needed
//	69   no member table within PGAS_RENDEZVOUS_TIMEOUT: nobody served the
//	     rendezvous, or some process never registered
//	74   cut off: no contact with a membership quorum for PGAS_CUTOFF
//	75   a rank was lost and no spare was left
//	76   the job failed for another membership reason (all ranks lost while shrinking)
//	77   fenced: this process was replaced in a newer epoch
//
// gaspirun is not a single point of failure: the processes need it only to
// find each other. If gaspirun itself is killed (SIGKILL), the processes
// are not signalled and carry on; they end when the job is done.
//
// # Environment contract
//
// gaspirun sets these variables for every process, all but PGAS_SPARES and
// PGAS_SERVE_RENDEZVOUS (bootstrap.Env.Environ makes them; bootstrap.FromEnv
// reads them):
//
//	PGAS_PROC              this process's id, 0..PGAS_NPROCS-1 (required)
//	PGAS_NPROCS            number of processes, ranks plus spares, 1..65536 (required)
//	PGAS_NRANKS            number of ranks, 1..PGAS_NPROCS; default PGAS_NPROCS - PGAS_SPARES
//	PGAS_SPARES            number of spares (default 0); if PGAS_NRANKS is set too, they must agree
//	PGAS_RENDEZVOUS        host:port of the rendezvous server (required)
//	PGAS_TOKEN             the job token in hex, auth.FormatToken, at least 32 digits (required)
//	PGAS_HOST              host label; default SLURMD_NODENAME under Slurm, else the hostname.
//	                       Processes with equal labels count as one machine, so one machine
//	                       can stand in for several hosts.
//	PGAS_JOB_ID            job name for logs and state files; default SLURM_JOB_ID under Slurm, else empty
//	PGAS_STATE_DIR         the job's state directory (Raft logs, disk checkpoints; one
//	                       subdirectory per process id); empty: memory only
//	PGAS_SERVE_RENDEZVOUS  1: this process hosts the rendezvous itself, listening on
//	                       PGAS_RENDEZVOUS; 0: it does not. Default 0 when PGAS_PROC is
//	                       set (gaspirun); under the launchers below, 1 for process 0 only.
//	PGAS_RESUME            set by gaspirun --resume DIR: the program resumes from the
//	                       disk-level checkpoints in DIR instead of starting afresh
//	PGAS_LOG               runtime log level: debug, info (default), warn, error
//
// These are optional and never set by gaspirun; set in its environment,
// they reach every process:
//
//	PGAS_RENDEZVOUS_TIMEOUT  a process without the member table after this long gives
//	                         up with exit 69, saying whether the rendezvous was not
//	                         reached or some process never registered; it warns after 5s.
//	                         A duration (90s, 5m) or seconds; at least 1s; default 60s.
//	PGAS_CUTOFF              a process without contact with a membership quorum for this
//	                         long gives up with exit 74 (default 10s, at least 1s). Until
//	                         then it asks the voters whether it was replaced, and exits 77
//	                         as soon as one it reaches says so.
//	PGAS_ADVERTISE_HOST      the name or address other hosts reach this process at.
//	                         Default: the address of this host's route to the rendezvous;
//	                         when that is loopback (a rendezvous name that /etc/hosts maps
//	                         to 127.0.1.1 on its own host, as Debian does), the address of
//	                         an interface that is up, the default route's first; with
//	                         none, the process fails asking for this variable.
//
// gaspirun also sets GOMAXPROCS for every process to its rank's share of
// the cores (cores / ranks, at least 1), unless GOMAXPROCS is set already:
// ranks that each run as many threads as there are cores oversubscribe the
// host, and small messages then pay for wake-ups across threads.
//
// Empty values count as unset. When PGAS_PROC is unset, the process id and
// count come from the first of these that is present:
//
//	Slurm (srun)             SLURM_PROCID, SLURM_NTASKS (or SLURM_NPROCS); also SLURM_JOB_ID, SLURMD_NODENAME
//	Open MPI (mpirun)        OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE
//	PMI (MPICH, Intel MPI)   PMI_RANK, PMI_SIZE
//	Kubernetes Indexed Job   JOB_COMPLETION_INDEX, and PGAS_NPROCS (required: the Job's completions)
//
// Under those launchers the user must still set PGAS_RENDEZVOUS (an address
// process 0 can listen on and everyone can reach) and PGAS_TOKEN (the same
// secret everywhere, e.g. from `gaspirun --new-token`); PGAS_NRANKS
// defaults to the process count, or PGAS_SPARES=K leaves K spares; and
// process 0 hosts the rendezvous. A PGAS_NPROCS that disagrees with the
// launcher's count is an error. FromEnv reports a bad or missing variable
// as a *bootstrap.EnvError that names it, its value and what to do.
//
// For example, under Slurm:
//
//	export PGAS_TOKEN=$(gaspirun --new-token)
//	export PGAS_RENDEZVOUS=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1):29400
//	export PGAS_SPARES=2
//	srun -n 10 ./myprog
//
// The logic lives in cmd/gaspirun/internal/launch; this package only turns
// flags into a launch.Config.
package main
