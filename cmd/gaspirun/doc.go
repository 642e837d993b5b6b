// Command gaspirun launches a gaspigo job, or any program as mpirun would:
// on this machine, on the hosts of a hostfile through ssh, or on the nodes
// of a Slurm allocation through srun.
//
//	gaspirun -n N [--spares K] [--respawn [--max-restarts N] [--refill-wait D]] [--timeout D]
//	         [--host-labels h1,h2,... | --ranks-per-host M]
//	         [--state-dir DIR] [--on-death continue|abort] [--quiet] [--grace D]
//	         [--job-id NAME] [--tls] [-x NAME[=VALUE]]... [-v] [--metrics ADDR] [--collapse D]
//	         [--trace FILE] [--] PROGRAM [ARGS...]
//	gaspirun -n N [--spares K] --hostfile FILE | --host HOST[:SLOTS],... [--ssh CMD]
//	         [--rendezvous-addr HOST[:PORT]] [--remote-gaspirun PATH] [flags] [--] PROGRAM [ARGS...]
//	gaspirun [-n N] --spares K [--srun CMD] [flags] [--] PROGRAM [ARGS...]   (inside sbatch or salloc)
//	gaspirun --new-token | --version | --help
//
// -np is another name of -n. gaspirun --help lists every flag; a bad flag
// exits 2 with its error and a line pointing to --help.
//
// It starts N+K processes of PROGRAM: processes 0..N-1 hold ranks 0..N-1,
// processes N..N+K-1 are spares. gaspirun hosts the rendezvous with a fresh
// random job token and passes both to the processes in their environment
// (below). Whatever starts the processes, gaspirun prefixes their output,
// judges their exits and tears the job down the same way, so a job whose
// lost rank a spare took over exits 0 under every launcher.
//
// --tls runs mutual TLS 1.3 over every connection of the job, the
// rendezvous included, under every launcher: gaspirun's rendezvous speaks
// it and every process gets PGAS_TLS=1 (over ssh and srun in the
// environment sent on stdin, like the token). The keys are derived from
// the job token (internal/auth), so there is nothing else to distribute.
//
// # Launchers
//
// --launcher picks what starts the processes; by default ssh when
// --hostfile or --host is given, slurm inside a Slurm allocation
// (SLURM_JOB_ID is set), local otherwise.
//
// local: gaspirun forks the processes on this machine, each in its own
// process group, and the rendezvous listens on 127.0.0.1. --host-labels
// and --ranks-per-host only label processes (PGAS_HOST), so one machine
// can stand in for several hosts. (--hosts, their old name, still works
// with a warning.)
//
// ssh (--hostfile FILE): one host per line, as in Open MPI's hostfiles:
//
//	# name [slots=N] [max_slots=M]     "#" starts a comment; blank lines are skipped
//	node1 slots=4
//	node2 slots=4
//	10.0.0.7 slots=2
//
// slots defaults to 1 (Open MPI 4 counts the host's cores instead; write
// slots= to be sure); a host listed twice gets the sum; max_slots is
// checked and otherwise ignored, since gaspirun never places more than
// slots processes on a host. A bad line is an error naming its number.
// Placement: ranks fill the hosts in order, slot by slot (rank 0 on the
// first slot of the first host), as mpirun does. Then each spare goes to
// the host that holds the fewest processes so far (among equals, the host
// with fewer ranks, then the later one). The reason: any spare can take
// any rank, so the loss of a host is covered when the spares on the other
// hosts are at least its ranks, i.e. when no host holds more than K
// processes in all; this rule covers the loss of every host whenever some
// placement of the spares (with the ranks filled as above) does. gaspirun
// prints the placement, and a warning naming the hosts
// whose loss the spares cannot cover (give hosts fewer slots to spread
// the ranks). Too few slots for N+K processes is an error naming the
// numbers. PGAS_HOST is the host's name from the hostfile.
//
// --host HOST[:SLOTS],... names the hosts on the command line instead, as
// Open MPI's --host does: each host gets one slot, or SLOTS (--host
// node1:4,node2:4 is the hostfile above without its last line); a host
// named twice gets the sum; an IPv6 address takes slots in brackets
// ([fe80::1]:2). It and --hostfile exclude each other. As under mpirun,
// -H is the same flag, -n may be left out (the slots, less --spares, are
// the ranks), and hosts that are all this machine (localhost, a loopback
// address, its host name) run locally, without ssh.
//
// Habits of mpirun and torchrun: the first process of rank 0 reads
// gaspirun's standard input (--stdin RANK, all for a copy to every rank,
// none; a process on another host, a spare or a replacement reads none),
// and every rank's first process gets RANK, WORLD_SIZE, LOCAL_RANK and
// LOCAL_WORLD_SIZE, and OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK and
// _LOCAL_SIZE: echo hi | gaspirun -n 2 -- cat prints hi once.
// --output-filename DIR also writes each process's stdout and stderr to
// DIR/rank.N/ (a spare's or a replacement's to DIR/proc.P/).
//
// Each process is started with the system's ssh client, so ~/.ssh/config,
// agents, ProxyJump and ControlMaster all apply:
//
//	ssh -T -o BatchMode=yes -o ServerAliveInterval=5 -o ServerAliveCountMax=3 \
//	    -o ConnectTimeout=30 -o LogLevel=ERROR HOST exec /path/to/gaspirun --remote-exec
//
// --ssh CMD replaces "ssh" (e.g. --ssh "ssh -p 2222 -i ~/.ssh/job_key" or
// --ssh "ssh -F ./cluster_config"); when CMD's program is not named ssh
// (a wrapper script), it gets only HOST and the remote command, and should
// pass equivalent options itself. The options bound a dead connection:
// the client gives up after 15 s without an answer. A host name that does
// not resolve here is looked up with "ssh -G" (an alias in the ssh
// configuration).
//
// On the host, "gaspirun --remote-exec" (gaspirun at the same path as
// here, e.g. on a shared file system, or --remote-gaspirun PATH) reads the
// program, its arguments and its environment from ssh's stdin, so the job
// token is never in any argv (ps) or file on any host, then starts the
// program in its own process group in the same working directory if it
// exists there (else the login's home). The environment is the remote
// login's, plus the contract, the PGAS_* and Go runtime (GOMAXPROCS,
// GOGC, GOMEMLIMIT, GODEBUG, GORACE, GOTRACEBACK) variables set here, and
// those given with -x. The remote side reports the program's real exit
// code or signal on a status line that gaspirun takes out of the output,
// so a SIGKILLed rank is judged exactly as in local mode; an ssh session
// that ends without a status (the host crashed, the connection dropped,
// ssh's exit 255) counts as the process killed ("was lost"). Nothing
// outlives its connection: the remote side kills the program's process
// group when ssh's stdin ends (the session or gaspirun is gone) or when
// gaspirun's once-a-second ping has been missing for 20 s (a host cut off
// from the network). When the program exits, what is left of its process
// group is killed too.
//
// slurm: inside an allocation, every process runs as a task of one srun
// step, through the same remote side (one request to slurmctld for the
// whole job, however many processes):
//
//	SLURM_HOSTFILE=/tmp/gaspirun-hosts-XXX srun --ntasks=N+K --distribution=arbitrary \
//	    --kill-on-bad-exit=0 --no-kill --input=all --label /path/to/gaspirun --remote-exec
//
// (--srun CMD replaces "srun", e.g. --srun "srun --mem-per-cpu=2G"). The
// hosts and slots come from SLURM_JOB_NODELIST and SLURM_TASKS_PER_NODE and
// are placed as above; -n defaults to the allocation's tasks
// (SLURM_NTASKS) minus --spares. Task T is process T: the ranks are tasks
// 0..N-1 and the spares tasks N..N+K-1, and gaspirun writes the placement's
// node of each task, in order, to the file SLURM_HOSTFILE names, so that
// srun starts every task where the placement put its process. srun sends
// its stdin to every task: one header for all (each task takes its
// process id from SLURM_PROCID), pings, and signals naming the processes
// they are for. It labels each line of output with its task, so gaspirun
// prefixes it with the process's role as in the other modes. A killed
// task does not end the step (--kill-on-bad-exit=0, --no-kill: not even a
// lost node), and gaspirun, not srun, decides how the job ends: a job
// recovered by a spare exits 0, and the batch job is COMPLETED. A task
// that srun reports ended ("task 3: Killed") without the status line of
// its remote side counts as lost after --grace. Only the whole step can be
// killed at once: gaspirun does that when a teardown's SIGKILL has not
// ended a process after --grace. For example:
//
//	#!/bin/sh
//	#SBATCH --ntasks=6 --time=00:10:00
//	gaspirun --spares 2 --timeout 5m -- ./kmeans --generate 1000000 --dim 10 --k 100 --max-iter 30 --ckpt-every 5
//
// or interactively: salloc -n 6 gaspirun --spares 2 -- ./kmeans ...
//
// In the ssh and slurm modes the rendezvous listens on the address of this
// machine that routes to the first host that is not its own loopback (a
// node name that does not resolve is looked up with scontrol), or on
// 127.0.0.1 when every host is this machine; --rendezvous-addr HOST[:PORT]
// chooses it (for hosts behind a jump host, or a firewall that allows one
// port). Unlike local mode, the processes do not outlive gaspirun there:
// their connections are their lifelines.
//
// # Output
//
// Every line a process writes to stdout or stderr is printed whole, prefixed
// with the process's role: "[r2] " for rank 2, "[s5] " for spare process 5
// (it becomes "[rR] " when a "role" report says the spare now holds rank
// R), "[p1] " for a process that lost its rank to another. gaspirun's own
// lines start with "gaspirun: " and go to stderr; the last one is a summary
// (processes, how they ended, with --respawn the replacements started and
// the budget, exit status, wall time) unless --quiet. A
// failure's verdict is said once, when it is reached ("gaspirun: job failed:
// rank 1 (process 1) exited with code 3; stopping the other 2 processes"),
// even with --quiet; the summary only counts.
//
// Identical lines that several processes print on the same stream within
// --collapse (200ms) of each other are printed once, naming them all as
// ranges: "[r0-255] loaded", "[r0-3,7,9-12,s14] waiting". So a job of
// hundreds of ranks prints each common line once. A line is printed
// --collapse after the last process joined it (at once when every process
// has), and held back at most 5 x --collapse; each process's lines keep
// their order, the lines held are bounded (4 MiB;
// beyond, the oldest are printed early), and gaspirun prints them all
// before its own verdict on a failure and before its summary. The
// processes' event reports that gaspirun prints ("gaspirun: [r0-255]
// restored checkpoint 14") collapse the same way. --collapse 0 prints
// every line with its own prefix. Lines on stdout collapse only once the
// job has formed (every process registered with the rendezvous): before,
// and in a plain job (below), each is printed with its own prefix, as
// mpirun prints it. Lines on stderr collapse from the start, plain jobs
// included: the same refusal from every rank (a bad flag, a missing input
// file) is said once ("[r0-7] kmeans: open missing.csv: ...").
//
// # Failures and exit status
//
//   - A process that exits with a non-zero code fails the job: gaspirun
//     names the rank and the code, sends SIGTERM to every process group,
//     SIGKILL after --grace, and exits with that code (so a program's own
//     code, e.g. for "no spare left", reaches the caller).
//   - A process killed by a signal: with spares or --respawn (or
//     --on-death continue) gaspirun says which rank died and that the job
//     continues, and the runtime recovers; with --spares 0 and no --respawn
//     (or --on-death abort) the job is torn down and gaspirun exits 128 +
//     the signal number, unless its processes said at start that the job
//     shrinks (K-means --shrink: it goes on with fewer ranks). Such a job
//     refuses to start under an explicit --on-death abort (exit 2), which
//     would end it at the first death (PGAS_ON_DEATH=abort).
//   - When every rank's process has exited 0, the remaining (idle spare)
//     processes get SIGTERM and gaspirun exits 0.
//   - --timeout: exit 124. Ctrl-C or SIGTERM to gaspirun: exit 130 (143 for
//     SIGTERM). Both kill the processes' groups on every host, so nothing
//     is left behind.
//   - A process that fails before every process has registered with the
//     rendezvous fails the job whatever the spares (the others would wait
//     for it for ever): its exit code, 128 + the signal, or ssh's 255 for a
//     host it could not reach. One that exits 0 before then is judged by the
//     rule for programs that never join (below): exit 1 when it or another
//     process registered.
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
// The processes' own exit codes (job.ExitCode), which gaspirun passes
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
// In local mode gaspirun is not a single point of failure: the processes
// need it only to find each other. If gaspirun itself is killed (SIGKILL),
// the processes are not signalled and carry on; they end when the job is
// done. (Under ssh and Slurm they end with their connections.)
//
// # Keeping the spare pool full: --respawn
//
// Spares alone are spent: once K processes have been lost, the next loss
// shrinks or fails the job. With --respawn gaspirun starts a replacement
// for each process of the job lost while it runs, so the pool refills:
//
//	gaspirun -n 4 --spares 1 --respawn -- ./kmeans ...
//
// A process is lost when it is killed by a signal (a crash such as
// SIGSEGV, the OOM killer, kill -9), its host or connection dies (ssh or
// srun ends without its exit status), it exits 74 (cut off) or 77 (fenced),
// or it ends in any way after its rank was taken over; a spare lost idle
// counts too. Any other non-zero exit still fails the job as above. The
// replacement is the same program with the job's environment plus
// PGAS_JOIN=1 and a process id gaspirun reserved at the rendezvous: the
// first processes have ids 0..N+K-1, replacements N+K, N+K+1, ..., and no
// id is ever used twice (the membership fences processes by id). It
// registers, proposes itself to the membership as a spare, and waits like
// the spares started with the job: "[s6] " until a "role" report gives it
// a rank. The other processes reach it over TCP, from its address in the
// membership view. gaspirun says "respawned s6 on host node2 for lost r2
// (1 of 16)" and "s6 joined the job as a spare (pid P on node2)".
//
// Where: a local job starts it on this machine, with the PGAS_HOST of the
// process it replaces. Over ssh it goes to a host with a free slot (any
// host if none has one), one where no process of the job died first, then
// the one with the fewest of the job's live processes, leaving out hosts
// taken for lost: where a start failed, or
// where every process gaspirun placed has died; their processes are
// replaced on the other hosts. Under Slurm it runs as a step of one task,
// "srun --ntasks=1 --nodes=1 --nodelist=NODE --overlap ...", on a node of
// the allocation with a free slot (--overlap lets it use the CPUs the
// job's step still holds for its dead tasks; Slurm 20.11 or later); when
// no node has room, gaspirun says so and starts none (ask the allocation
// for more tasks than -n + --spares to leave room).
//
// When: replacements are spaced by an exponential backoff, from 100ms up
// to 5s between starts, reset once a replacement registers, so a program
// that crashes at once does not spin. --max-restarts N bounds how many are
// started in all (16 by default with --respawn; --max-restarts N alone
// turns --respawn on); when it is used up gaspirun says so once and the
// job goes on with the spares it has. The name follows torchrun's
// --max-restarts, which restarts the whole worker group; mpirun and ULFM
// have no launcher-side equivalent (ULFM leaves respawning to the
// program, MPI_Comm_spawn). Nothing is started once the job's outcome is
// decided (every rank finished, or a teardown), and the rendezvous then
// tells joiners that come late that the job is over (they exit 0).
// Replacements are waited for, judged and torn down like every other
// process.
//
// A rank lost while no spare is idle would make the membership shrink or
// fail the job at once; with --respawn it waits --refill-wait (30s,
// launch.DefaultRefillWait: time to start, register and join through ssh
// or srun on a busy host) for the replacement instead. The wait reaches
// every process in the member table. Without --respawn there is no wait
// and no replacement: everything behaves as without this section.
//
// A process can also be added by hand, from any machine that reaches the
// rendezvous: start the program with PGAS_JOIN=1, PGAS_RENDEZVOUS and
// PGAS_TOKEN as the job's processes have them (and PGAS_TLS=1 if the job
// runs TLS); the rendezvous gives it a new id. --join-env FILE writes
// exactly those variables, owner-only, NAME=VALUE per line, once the
// rendezvous listens, and removes the file when the job ends:
//
//	gaspirun -n 16 --spares 1 --join-env /tmp/job.env -- kmeans ... &
//	env $(cat /tmp/job.env) kmeans ...   # the same program and flags
//
// A process with a wrong token is refused by the rendezvous (it says so
// and exits 1) and the job does not notice. gaspirun then labels its
// reports ("process 9 joined the running job by hand"), but has no exit
// status for it: its disconnection from the rendezvous ends it, and
// counts as the end of its work unless another process takes its rank
// over. gaspirun neither signals it nor replaces it then unless its rank
// was taken over.
//
// # Programs that never join
//
// Any program runs under gaspirun, as under mpirun: gaspirun -n 2 -- hostname
// prints two prefixed lines and exits 0. gaspirun tells such a plain program
// from a gaspigo one by the rendezvous, with this rule:
//
//   - A process that exits 0 without having registered with the rendezvous
//     is a plain program. Its exit is held, not judged, while no process has
//     registered.
//   - When every process has ended so, the job was a plain job: exit 0,
//     with nothing printed by gaspirun itself (no summary), as mpirun. A
//     plain job whose process fails (non-zero, a signal) fails like any job
//     before it formed: gaspirun stops the others and exits with that
//     process's code, as mpirun does with the first one that fails.
//   - Once any process has registered (gaspirun watches the rendezvous for
//     that while a plain process has ended), the job is a gaspigo job, which
//     cannot form without the process that never registered: it fails at
//     once with exit 1, naming both, whichever ended or registered first.
//     So a gaspigo job keeps its guarantees: a process that fails, or exits
//     0, before the job formed still fails it.
//
// # Environment contract
//
// gaspirun sets these variables for every process, all but PGAS_SPARES and
// PGAS_SERVE_RENDEZVOUS (bootstrap.Env.Environ makes them; bootstrap.FromEnv
// reads them):
//
//	PGAS_PROC              this process's id, 0..PGAS_NPROCS-1 (required); for a joiner, the
//	                       id gaspirun reserved for it (optional: the rendezvous assigns one)
//	PGAS_JOIN              1: the process was started after the job formed (a replacement,
//	                       --respawn, or one started by hand) and joins it as a spare; 0 or
//	                       unset: one of the job's first processes
//	PGAS_NPROCS            number of processes, ranks plus spares, 1..65536 (required)
//	PGAS_NRANKS            number of ranks, 1..PGAS_NPROCS; default PGAS_NPROCS - PGAS_SPARES
//	PGAS_SPARES            number of spares (default 0); if PGAS_NRANKS is set too, they must agree
//	PGAS_RENDEZVOUS        host:port of the rendezvous server (required)
//	PGAS_TOKEN             the job token in hex, auth.FormatToken, at least 32 digits and random (required)
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
//	PGAS_LOG               runtime log level: debug, info (gaspirun -v), warn (default), error
//	PGAS_TLS               1: mutual TLS 1.3 over every connection of the job (data plane,
//	                       rendezvous, Raft, control), keyed by PGAS_TOKEN; 0 or unset:
//	                       none. Set by gaspirun --tls, or passed on from gaspirun's own
//	                       environment (PGAS_TLS=1 gaspirun ... does the same as --tls).
//	                       Every process of a job must agree; one that does not is refused
//	                       during the handshake with an error naming PGAS_TLS. Under
//	                       srun, mpirun or Kubernetes, set it in every process yourself.
//	PGAS_RACKS             the racks (or switches) of the job's hosts, RACK=HOST,HOST;RACK=HOST
//	                       with the labels of PGAS_HOST: collectives whose hosts share racks
//	                       add a level, so that one process per rack talks across racks; a
//	                       host it does not name is a rack of its own. Set by gaspirun
//	                       --racks, or passed on from gaspirun's own environment; the same
//	                       in every process (under srun, mpirun or Kubernetes, set it yourself).
//	PGAS_METRICS           set to auto by gaspirun --metrics: the process serves its
//	                       Prometheus metrics on a free port of the job's interface and
//	                       publishes the address in the member table; HOST:PORT or :0
//	                       (any free port) by hand (see internal/metrics)
//	PGAS_METRICS_FINAL     set by gaspirun --metrics-file (local launcher) to a temporary
//	                       directory: the process writes its final metrics there when its
//	                       runtime closes, and gaspirun joins them into the file
//	PGAS_TRACE             set by gaspirun --trace to a temporary directory: the process
//	                       records trace spans and writes DIR/trace-proc-N.json when its
//	                       runtime closes; PGAS_TRACE_EVENTS bounds its buffer (65536)
//
// # Watching a job
//
// Runtime records default to warnings and errors; -v passes PGAS_LOG=info
// to every process for the routine ones (views applied, failures
// detected, restores). gaspirun reports a lost process and the spare that
// takes its rank once each. On a terminal (stderr), gaspirun keeps a status
// line at the bottom, erased and redrawn around every line; it counts the
// processes by state, so it reads the same at 4 or 4,000 processes:
//
//	[512 ranks: 509 running, 1 done, 2 lost; 2 spares idle; 3 other processes ended; epoch 2; 41.3s] r0: iter 40
//
// (ranks running, finished and lost, idle spares, processes that ended
// otherwise, the epoch, the elapsed time, the lowest rank's last line).
// With stderr redirected there is none.
//
// A job that shows no progress is not silent, with or without a terminal:
// within 30 s of the last line, registration, report or exit, gaspirun
// says on stderr what it waits for, and again at least once a minute
// while nothing happens. Before every process has registered it names the ones the job
// waits for:
//
//	gaspirun: 1,024 of 1,026 processes registered with the rendezvous; waiting 25s for process 17 on a, process 700 on a
//
// after, it counts the processes by state and quotes the last line:
//
//	gaspirun: no progress seen for 1m30s (no line, report or exit): 4 ranks: 4 running; 1 spare idle; the last line, 1m30s ago: [r0] iter 12 ...
//
// --metrics ADDR serves every process's metrics
// at http://ADDR/metrics with a proc label (a process that ended keeps its
// last scrape, gaspigo_job_process_up 0); --trace FILE merges the
// processes' traces into one Chrome/Perfetto JSON file at the end (local
// launcher: under ssh or srun the files stay on the hosts). The README
// lists the metrics.
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
//	PGAS_REFILL_WAIT         where the process hosting the rendezvous is started by another
//	                         launcher (srun, mpirun, a Kubernetes Job, which recreates lost
//	                         pods): a rank lost with no spare left waits this long for a
//	                         process that joins the job (PGAS_JOIN=1) before the job fails
//	                         (exit 75) or shrinks. Default 0; gaspirun --respawn sets its own.
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
//	Slurm (srun)             SLURM_PROCID, SLURM_STEP_NUM_TASKS (or SLURM_NTASKS, SLURM_NPROCS); also SLURM_JOB_ID, SLURMD_NODENAME
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
// For example, under Slurm without gaspirun (the answer is the same, but
// srun reports a killed task, so a recovered job exits 137 there; gaspirun
// inside the allocation exits 0):
//
//	export PGAS_TOKEN=$(gaspirun --new-token)
//	export PGAS_RENDEZVOUS=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1):29400
//	export PGAS_SPARES=2
//	srun -n 10 ./myprog
//
// The logic lives in cmd/gaspirun/internal/launch; this package only turns
// flags into a launch.Config (and runs remote.Exec, from
// cmd/gaspirun/internal/remote, for --remote-exec).
package main
