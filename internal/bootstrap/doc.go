// Package bootstrap starts a job: it tells each process who it is (the
// environment contract) and lets the processes find each other (the
// rendezvous).
//
// A job has N ranks and K spares, N+K processes. Each has a fixed process
// id, Proc, 0..N+K-1. Processes 0..N-1 hold ranks 0..N-1 at start; the
// others are spares until the membership promotes them. Processes started
// after the job formed (joiners, PGAS_JOIN=1) refill the spare pool with
// new ids, N+K and up, never reused.
//
// # Environment contract
//
// gaspirun sets these variables for every process, all but PGAS_SPARES,
// PGAS_SERVE_RENDEZVOUS and PGAS_JOIN (bootstrap.Env.Environ makes them;
// bootstrap.FromEnv reads them):
//
//	PGAS_PROC              this process's id, 0..PGAS_NPROCS-1 (required but for a joiner)
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
//	PGAS_JOIN              1: this process was started after the job formed, to refill its
//	                       spare pool (a joiner; JoinRunning); 0 (default): it was not.
//	                       A joiner needs only PGAS_RENDEZVOUS and PGAS_TOKEN: PGAS_PROC is
//	                       an id the launcher reserved for it (unset: the rendezvous
//	                       assigns one); PGAS_NPROCS, PGAS_NRANKS and PGAS_SPARES, if set,
//	                       must be the job's as started (the member table has them);
//	                       PGAS_SERVE_RENDEZVOUS=1 is an error; the other launchers' ids
//	                       are ignored.
//
// These are optional and never set by gaspirun (set them in its
// environment and they pass through):
//
//	PGAS_RENDEZVOUS_TIMEOUT  give up (job.ErrRendezvousTimeout, exit 69) when no member
//	                         table came within this long: nobody served the rendezvous, or a
//	                         process never registered. A duration (90s, 5m) or seconds; at
//	                         least 1s; default 60s; 40ms more per process of the job (82s
//	                         more at 2,050). A warning says what is awaited after 5s.
//	PGAS_CUTOFF              give up (exit 74) after this long without contact with a
//	                         membership quorum (spares.Config.CutOff); at least 1s; default 10s
//	PGAS_REFILL_WAIT         read where the rendezvous is hosted (process 0 under srun,
//	                         mpirun, Kubernetes): a rank lost with no spare left waits this
//	                         long for a process that joins the job (ServerConfig.RefillWait);
//	                         default 0, no wait
//	PGAS_ADVERTISE_HOST      the host name or address the other hosts reach this process at
//	                         (package pgas); default: this host's address on its route to the
//	                         rendezvous, or, when that route is loopback (a rendezvous name that
//	                         /etc/hosts maps to 127.0.1.1 here), the address of an interface
//	                         that is up, the default route's first
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
// # Rendezvous protocol
//
// Each process binds its own data-plane listener first, then connects to
// the rendezvous over TCP and runs auth.Handshake with
// auth.PurposeRendezvous (the process presents its Proc, the server
// ServerID). Messages are msgpack (github.com/vmihailenco/msgpack/v5)
// envelopes behind a 4-byte big-endian length, capped at MaxClientMessage
// from a process and MaxServerMessage from the server. The process sends a
// hello (protocol version, its NumProcs, NumRanks and JobID, and its
// Member, and the address of its table relay); the server answers with an
// ack, or a reject with a reason (a duplicate id, an id out of range, a
// different job shape). Once all processes have registered, the table
// travels down a tree (relay.go): the server writes the complete Table to
// processes 0..63 and to every other process a notice naming up to three of
// its ancestors in a heap whose first 64 processes have 8 children each
// (process p's parent is (p-64)/8), with the table message's size and
// SHA-256. The process fetches the table
// from the first ancestor that gives it (job-token handshake with
// auth.PurposeTable; each try bounded by the handshake bound and 10 ms per
// process), accepts it only if the digest matches, and asks the server for
// it on its control connection (msgTableAsk) only when none did. Each
// process that has children in the tree serves the table it holds on a
// relay of its own, bound on its data-plane address's interface, from its
// registration until the registration's bound has passed or the session
// closes; a leaf (most processes) binds none, and a process that cannot
// bind one registers without and is written the whole table. A process
// that disconnects before completion is unregistered, and the same process
// (same Proc, Pid, Host and Addr) may register again, also after
// completion, and gets the whole table. After the table the connection
// stays open as a control channel: the process sends Reports; the server
// sends nothing more.
//
// A joiner (JoinRunning) sends a hello marked as a join, presenting in the
// handshake the id its launcher reserved with Server.Reserve, or JoinerID.
// The server gives it that reserved id (once; the same process may come
// again), or for JoinerID the next id, and answers with the id and the
// original table (ids 0..NumProcs-1) as soon as the table is complete (a
// joiner that comes earlier is acknowledged with its id and waits like
// any process). Ids run from NumProcs up to MaxProcs-1 and are never
// handed out twice, since the membership fences processes by id. Any
// other id, an id reserved and taken by another process, or a joiner
// started for another job shape is rejected; the job's processes do not
// notice. A joiner keeps its connection for reports like any process; the
// server itself reports KindJoined when one registers. After
// Server.Finish (the job has ended), a joiner is told so and JoinRunning
// returns ErrJobFinished. The member table carries RefillWait, the
// membership's wait for a replacement, so that every process, joiners
// included, uses the same.
//
// The server admits unauthenticated connections through the process's
// admission gate (internal/admit): a bounded number pending, the oldest
// shed when full, refusals logged within bounds and counted in
// ServerStats (Refused, TimedOut, Shed, Accepted). A rendezvous for more
// processes than the shared gate holds from one address gets a gate of
// its own with room for every process's handshake at once (NumProcs + 64),
// so that a large job registering at once never sheds and repeats its own
// handshakes.
//
// Cost as a function of N processes: each registration is O(1) work under
// the server's lock (a joiner's too; its table is encoded for it, O(N)),
// in the connection's own goroutine (handshakes run in parallel, each
// bounded by HandshakeTimeout); completing the table is O(N) once, and it
// is encoded once. The server writes the whole table (O(N) bytes) 64 times
// and a notice of about 200 bytes to every other process: O(N) bytes in
// all, 20.6 MB at 4,096 processes where every process used to get the
// table from it (1.26 GB; TestRendezvousScale measures it). Each relay
// writes it to at most 8 children, so the job moves N tables in all, but
// no process more than 9. Each level below the rendezvous costs a wake-up
// of the parent, most of a second on a host of hundreds of processes per
// core: up to 576 processes get the table at one relay, up to 4,672 at two. The writes run with up to 64 in flight, so a process that
// does not read holds up only its own write, for at most WriteTimeout; a
// relay closes a connection only after the asker has read the table and
// closed it (a socket closed with the table unsent is an orphan, which a
// kernel short of socket memory resets).
//
// The rendezvous is not needed once it has sent the notices: the relays
// serve the table without it, and losing it never fails a process. Session.Report drops reports when it is gone, and Session.Lost
// says so. SurviveLauncherExit keeps a process alive when the launcher
// that pipes its output dies.
//
// # Usage
//
//	env, err := bootstrap.FromEnv()
//	if err != nil {
//		log.Fatal(err) // names the variable and what to set
//	}
//	bootstrap.SurviveLauncherExit()
//	ln, _ := net.Listen("tcp", ":0") // the data plane, bound first
//	self := bootstrap.Member{Proc: env.Proc, Addr: advertised(ln), Extra: map[string]string{"raft": raftAddr}}
//	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
//	sess, table, err := bootstrap.Join(ctx, bootstrap.DefaultClientConfig(), env, self)
//	cancel()
//	if err != nil {
//		log.Fatal(err)
//	}
//	defer sess.Close()
//	// ... dial table.Members[p].Addr ...
//	sess.Report(bootstrap.Report{Kind: bootstrap.KindRole, Rank: 2, Epoch: 3}) // a spare was promoted
//
// # Concurrency and ownership
//
// A Server owns its listener and one goroutine per connection, and up to
// 64 for the table's writes while it is sent (or while Finish tells the
// waiting joiners); Serve runs it on an internal/listen listener, and
// Close (or the end of Serve's ctx) stops everything and waits. A table
// broadcast in progress is allowed to finish (bounded by WriteTimeout)
// before connections are closed. Reserve, Finish, Member and Connected
// may be called from any goroutine. Reports are delivered on a
// buffered channel without ever blocking: a full channel drops and counts.
// Lock order: Server.mu before a connection's write lock.
//
// A Session owns two goroutines (a report writer and a reader that notices
// the loss of the connection); Close flushes queued reports for at most
// FlushTimeout and waits for both. Report never blocks and may be called
// from any goroutine, also after Close. A Session made by Join also owns the
// in-process Server and closes it.
package bootstrap
