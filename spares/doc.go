// Package spares is the job's membership: a Raft-agreed view of which
// process holds which rank, the spare pool, the failed set and the job
// status, with one epoch number that goes up whenever the view changes.
// The last committed checkpoint is not part of it: package ckpt's own
// agreement among the ranks is the one record of it.
//
// # Model
//
// The state (type state) is plain replicated data and state.apply is a
// pure, deterministic function of (state, command), tested without Raft
// from the scripts in testdata/. The commands are declareFailed,
// addSpare, finish, setVoters and endWait. The design's Promote and
// ReplaceVoter are not separate entries: a declareFailed of a rank holder
// is the whole recovery step in one log entry (epoch+1, the failed
// process moves to state.Failed, the first spare on another host takes
// its rank), and the leader then repairs the Raft voter set and records
// it with setVoters. When the pool is empty the job fails with
// reasonSparesExhausted (ErrSparesExhausted, exit code 75,
// job.ExitSparesExhausted), or, with Config.Shrink, the rank becomes
// vacant: NumRanks never changes and state.Ranks[r] == noProc, so an app
// can hand the vacant rank's work to the others without renumbering.
// With Config.RefillWait the rank first awaits a process that joins the
// job (see "Joining a running job" below). Every command is idempotent,
// so proposals are retried freely.
//
// A Node runs hashicorp/raft for this process, or, with Config.VotersOnly,
// only if this process votes (see "Raft among the voters only" below).
// Up to Config.MaxVoters (5) processes vote, chosen round-robin over host
// labels so losing a host costs as few votes as possible; in the all-Raft
// mode the rest are non-voters that replicate the log. Every process
// bootstraps the same configuration from the same member table, so there
// is no join step at start (processes added later use Config.Join and
// Node.JoinSelf: see "Joining a running job").
// Raft runs on its own TCP listener with the job-token handshake (purpose
// "raft"), never on the data plane. Logs live in memory, or in raft-boltdb
// under Config.StateDir. Everything there is owner-only: the proc-<Proc>
// directories 0700, the Raft log 0600, the snapshots restricted once
// written. Config.Network replaces TCP (the test kit's memnet runs
// thousands of nodes in one test process, in a testing/synctest bubble).
//
// hashicorp/raft does not forward proposals, so each Node also serves a
// small control RPC (job-token handshake with auth.PurposeControl, one
// length-prefixed msgpack request per connection, except the tree's follow
// requests, which reuse theirs): a proposal (propose) from any process
// reaches the leader, and is retried with backoff across elections until
// its context ends.
//
// The leader keeps the Raft configuration in line with the state: after
// every change and after winning an election it removes failed processes,
// and, in the all-Raft mode, adds new ones as non-voters and promotes live
// non-voters (in the voters-only mode: live clients, see below),
// preferring hosts with the fewest voters, until there are
// Config.MaxVoters voters or no candidate is left.
//
// # Raft among the voters only
//
// With Config.VotersOnly only the voters run hashicorp/raft: the leader
// replicates to Config.MaxVoters-1 followers whatever the job's size. Every
// other process is a client that holds the state without Raft:
//
//   - News travels down a dissemination tree (spares/internal/tree, a
//     pure function of the state): the live voters are its roots, the
//     other live processes hang below them in a k-ary heap order
//     (Config.TreeFanout, default 8) by proc id, so a process's parent is
//     computed, never negotiated.
//   - A client keeps one control connection to its parent and asks on it,
//     over and over, for what is newer than its version
//     (spares/internal/follow, the tree's network side, which reaches the
//     node through tree.go's treeSide). The version is the Raft index of
//     the last change it applied; the parent answers at once with the changes since (the commands
//     themselves, applied with state.apply, which is deterministic) or its
//     whole state when it no longer keeps them (news.go), and otherwise after
//     Config.TreeHold with a keepalive. Every answer carries the leader
//     the parent knows and how long ago its own contact with the quorum
//     was, so a change reaches every process in depth = O(log_k N) hops,
//     and contact is as old as the freshest ancestor's.
//   - A parent that does not answer is skipped for 2 × TreeHold: the
//     client asks the parent's parent, then the voters. Any process
//     answers any asker, so views that differ for a moment only change
//     whom a client asks. Right after a failed attempt no skip runs out
//     (a dial to a silent host fails only at RPCTimeout, longer than the
//     skip), so the client always reaches the live processes after the
//     dead ones.
//   - A client's proposals (reportFailure, finish, ...) go through the
//     control RPC to the leader it heard of, or to a voter, which answers
//     with the leader.
//   - A process this one's own failure detector confirmed failed
//     (reportFailure) is asked for nothing until the state declares it
//     failed, at most CutOff (down.go): the client drops it as parent at
//     once and no proposal goes through it, instead of waiting on a
//     connection to a host that was cut off silently (issue 31).
//   - Voter replacement: when a voter fails, the leader picks a live
//     client (hosts with the fewest voters first), records the new voter
//     set with setVoters, then adds it with AddVoter. The client learns
//     from the tree that it votes, starts Raft with empty stores and
//     catches up through Raft's log or snapshot; log entries it already
//     holds from the tree are skipped by index. It follows the tree until
//     Raft has given it anything.
//
// # Joining a running job
//
// A process started after the job formed (a joiner, Config.Join) gets a
// new process id from the rendezvous (ids past the original table, never
// reused: fencing keys on them) and is given the job's original member
// table, so it starts from the same initial state as everyone. It runs
// no Raft: Node.JoinSelf proposes addSpare for itself through the control RPC
// and waits until its own state lists it. Its state is the job's first
// one, whose voters may all have been replaced since, so until it is
// listed it asks those voters first and then any other process of the
// table, for the proposal (any process answers with the leader it knows)
// and for the tree's news (any process answers any asker). Once listed
// it is a client like any other: it follows the tree, and the leader may
// make it a voter when one is lost (it registered RaftAddr and CtlAddr).
//
// addSpare puts the joiner in the pool without a new epoch (no rank
// changes holder, so nothing is fenced and the ranks need not recover),
// or, while ranks await a joiner, gives it the lowest such rank in the
// same entry, with a new epoch. A rank awaits when it
// is lost with an empty pool and Config.RefillWait is set (it is fixed in
// the initial state, state.RefillWait, so every process applies the log
// alike): the failed process keeps the rank, listed in state.Awaiting
// with the epoch the wait began, so the runtime sees a rank failed and
// not yet replaced and the survivors' recovery waits. The leader alone
// keeps time (refill.go, a pure clock driven by the leader loop): from
// when it first saw a wait, RefillWait later, it commits endWait{Rank,
// Since}, and the rank goes the way of a loss with an empty pool (vacant
// with Shrink, else the job fails with ErrSparesExhausted). A new leader
// times every wait afresh from its election: a leader change makes a wait
// longer, never shorter, and since endWait names the wait, a late one can
// neither end a later wait of the same rank nor take a rank a joiner
// holds. Membership's views list the joiners (pgas.View.Joined) with
// their data-plane addresses; a rank that awaits shows its failed holder.
// gaspigo_spares_joined_total counts the joins each process applied
// (every process counts them; the pool's size is
// gaspigo_spares_available, set by the runtime).
//
// Costs: a join is one control RPC to a voter (two when it does not lead;
// more only while the joiner's first voters are gone, one per process it
// tries) and one log entry that reaches every process like any change
// (⌈log_k(N/V)⌉ + 1 hops); the joiner's first news is the changes since
// the start or a whole state, O(N) bytes. Waiting costs the leader one
// timer and O(ranks awaiting) work per round; the state grows by one
// entry per awaiting rank and one procInfo per joiner, ever (ids are
// never reused, so state.Procs holds every joiner the job had).
//
// # Usage
//
// Package job starts a node for every process of a fault-tolerant job and
// hands it to the runtime, which reads views from it and reports failures
// to it (pgas.Membership):
//
//	cfg := spares.DefaultConfig()
//	cfg.Proc, cfg.Members, cfg.NumRanks, cfg.Token = me, table, n, token
//	node, err := spares.NewNode(cfg)
//	if err != nil { ... }
//	m := spares.NewMembership(node) // for pgas.Config.Membership
//
// A joiner (Config.Join) first adds itself with node.JoinSelf. The errors
// that end a process (ErrSparesExhausted, ErrJobFailed, ErrDeclaredFailed,
// ErrCutOff) reach the program through the runtime, and job.ExitCode maps
// each to its exit code.
//
// # Concurrency and ownership
//
// All Node methods are safe for concurrent use. Every blocking one takes
// a context and returns errTimeout (wrapping the context's error) when it
// ends, and errClosed after Shutdown; a timeout never means that a
// process died. States from view and watch are private copies. Watch
// channels hold only the latest state (a slow reader skips intermediate
// states and never blocks the node) and are closed by Shutdown.
//
// Goroutines: Raft's own, on a process that runs Raft (stopped by
// raft.Shutdown); per listener (internal/listen) one accept loop and one
// handshake goroutine per pending connection (bounded by the process's
// admission gate, internal/admit, which sheds the oldest pending connection
// when full; each under HandshakeTimeout); the control server, one
// goroutine per control connection (under RPCTimeout; a child's follow
// connection lives as long as the child asks, at least once per TreeHold +
// RPCTimeout), one waiter per local apply, the leader loop (with Raft; it
// also runs the clock of the waits for joiners, refill.go), the contact
// watcher and, on a client, the follow loop. All are owned by the Node and
// stopped by Shutdown, which closes the control listener (and with it the
// connections it accepted), shuts Raft down if it runs (closing its
// transport), cancels the node's context (ending its own follow
// connection), waits for the goroutines, then closes watch channels and
// stores. Shutdown is bounded (Config.ShutdownTimeout, shutdown.go): a Raft
// that does not stop in time has its transport closed under it, and is
// abandoned, stores and all, if even that does not stop it.
//
// Locks: Node.startMu (starting Raft on a promoted client) is taken
// before Node.mu and fsm.mu, never while holding them. fsm.mu (state,
// version, news, tree, change channel, watchers), Node.mu (closed flag,
// stores and goroutine registration) and authListener.mu (pending
// handshakes) are leaves: no lock is held while taking another or while
// blocking. The state has one writer at a time: Raft's FSM goroutine, or
// on a client the follow loop (which stops feeding the state once Raft has
// given it anything).
//
// # Costs and limits
//
// N processes, V ≤ Config.MaxVoters voters, fan-out k (TreeFanout), hold h
// (TreeHold).
//
//   - All-Raft mode: every process replicates the log, so the leader sends
//     heartbeats and commit notices to N - 1 followers (O(N) RPCs per
//     HeartbeatTimeout/10 and per commit), every process holds a Raft
//     connection to the leader and Shutdown stops N Raft nodes. Fine for
//     tens to a few hundred processes.
//   - Voters-only mode: the leader's Raft traffic is O(V) (measured over
//     memnet at N = 512: about 6.7k appends and heartbeats to its 4
//     followers per 10s, the same at any N). Every process serves at most
//     k children (a voter: k children and its Raft peers) and holds one
//     connection to its parent: 2 small messages per child per h when
//     nothing happens (80 control messages per 10s at the leader, N = 512,
//     k = 8, h = 1s), and per change one answer per child carrying the
//     command. A change reaches every process in ⌈log_k(N/V)⌉ + 1 hops, each
//     one message; a proposal from a client is one control RPC to a voter
//     (forwarded once if that voter does not lead). Per process: the
//     state (O(N)), the last 256 changes and one tree per view. The
//     state's process and rank tables, the tree and the start table are
//     immutable and shared by content between the nodes of one process
//     (docs/design.md §13), so a simulation of N nodes holds them once.
//   - Measured (a shared, busy 2-core machine). Simulated, voters-only,
//     memnet in fake time (TestSim*, -spares.simn=4096): a kill reaches
//     all 4095 survivors in 9ms of fake time, 38s of wall time for the
//     whole test, the leader's load as at 512. Real processes, one Node
//     each over loopback TCP (TestProcsKillRankHolder, -spares.procs=512):
//     at N = 512 a SIGKILLed rank holder is replaced on all 511 survivors
//     in 0.7s, every node shuts down in 1.2s, a client holds 5 sockets
//     (its 2 listeners, its parent, its children) and a voter 20-24. The
//     all-Raft mode at 512 processes took 52s to start, held 228 sockets
//     on the leader and cut processes off before the epoch committed.
//   - A child leaves a parent that does not answer, or whose own contact
//     is stale for two answers in a row, for 2h; in an outage of the
//     whole quorum the children therefore end up asking the voters.
//   - Both modes: a process out of contact asks V voters and 2 others for
//     its standing, once per StandingInterval; every process holds the
//     whole state, so a full-state answer (a new child far behind) is
//     O(N) bytes.
//
// # No process runs forever
//
// Every Node watches its own contact with the membership: a leader is in
// contact (Raft steps it down without a quorum), any other Raft node while
// its last message from a leader is at most HeartbeatTimeout old. A client
// of the voters-only mode, which runs no Raft, is in contact while the
// tree's news is fresh: its parent's last answer said that the parent (or
// its own ancestors, up to a voter) had contact at most 2 × TreeHold +
// HeartbeatTimeout ago; an answer from a voter counts the same way. The rule is
// a pure state machine (contact.go, tested with fake time) driven by one
// goroutine every 100ms; a tick adds at most 200ms, so only time the
// process could run counts: a process resumed after a long SIGSTOP asks
// before it gives up, and on a starved host the bound stretches.
//
//   - After 2 × (HeartbeatTimeout + ElectionTimeout) (at least 1s) without
//     contact the node asks, every StandingInterval, the voters it knows
//     and two other processes in turn for its standing (control RPC op
//     "standing", authenticated like every control connection). A process
//     declared failed has left the Raft configuration and gets no log
//     entries (a client has left the tree, though it may still hear the
//     news from a voter), so this is how it learns its fate once the
//     network heals: an answer that it was declared failed ends it fenced
//     (exit code 77, job.ExitDeclaredFailed); a failed job ends it with the
//     job's code; an idle spare of a job that finished exits 0. Answers are
//     committed facts, so a responder that is behind can only say too
//     little. Answers from a majority of the voters count as contact: on a
//     starved host Raft may go without a leader for seconds while every
//     process still reaches the others.
//   - After Config.CutOff (PGAS_CUTOFF, default 10s) without contact the
//     node gives up with a *cutOffError (ErrCutOff, exit code 74,
//     job.ExitCutOff) that
//     names the voters, the time and the last contact. An idle spare is no
//     exception: cut off, it cannot know whether the job still needs it.
//
// Node.lost and lostErr report the verdict; Membership passes it to the
// runtime (pgas.MembershipLoss), which stops every call with it. The
// default bound: a working membership is without a leader only during an
// election (HeartbeatTimeout plus a few ElectionTimeouts, about a second
// even on a starved host), and the majority's detector replaces a
// cut-off process within a few seconds, so a host cut off for 4s and
// healed never reaches 10s (its processes rejoin, or learn that they were
// replaced and exit 77), while a host cut off for good has ended its
// processes about 10s later.
package spares
