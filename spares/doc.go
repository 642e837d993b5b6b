// Package spares is the job's membership: a Raft-agreed view of which
// process holds which rank, the spare pool, the failed set and the job
// status, with one epoch number that goes up whenever the view changes.
// The last committed checkpoint is not part of it: package ckpt's own
// agreement among the ranks is the one record of it.
//
// # Model
//
// State is plain replicated data and State.Apply is a pure, deterministic
// function of (state, command), tested without Raft from the scripts in
// testdata/. The commands are DeclareFailed, AddSpare, Finish
// and SetVoters. The design's Promote and ReplaceVoter are not
// separate entries: a DeclareFailed of a rank holder is the whole recovery
// step in one log entry (epoch+1, the failed process moves to Failed, the
// first spare takes its rank), and the leader then repairs the Raft voter
// set and records it with SetVoters. When the pool is empty the job fails
// with ReasonSparesExhausted (ErrSparesExhausted, exit code
// ExitSparesExhausted = 75), or, with Config.Shrink, the rank becomes
// vacant: NumRanks never changes and State.Ranks[r] == NoProc, so an app
// can hand the vacant rank's work to the others without renumbering.
// Every command is idempotent, so proposals are retried freely.
//
// A Node runs hashicorp/raft for this process. Every process runs one and
// holds the state locally; up to Config.MaxVoters (5) of them vote, chosen
// round-robin over host labels so losing a host costs as few votes as
// possible, the rest are non-voters. Every process bootstraps the same
// configuration from the same member table, so there is no join step
// (processes added later use Config.Join and JoinSelf). Raft runs on its
// own TCP listener with the job-token handshake (purpose "raft"), never on
// the data plane. Logs live in memory, or in raft-boltdb under
// Config.StateDir. Everything there is owner-only: the proc-<Proc>
// directories 0700, the Raft log 0600, the snapshots restricted once
// written.
//
// hashicorp/raft does not forward proposals, so each Node also serves a
// small control RPC (job-token handshake with auth.PurposeControl, one
// length-prefixed msgpack request per connection): Propose from any
// process reaches the leader, and is retried with backoff across elections
// until its context ends.
//
// The leader keeps the Raft configuration in line with the state: after
// every change and after winning an election it removes failed processes,
// adds new ones as non-voters and promotes live non-voters (preferring
// hosts with the fewest voters) until there are MaxVoters voters or no
// candidate is left.
//
// # Usage
//
//	cfg := spares.DefaultConfig()
//	cfg.Proc, cfg.Members, cfg.NumRanks, cfg.Token = me, table, n, token
//	node, err := spares.NewNode(cfg)
//	if err != nil { ... }
//	defer node.Shutdown()
//
//	// a spare waits for a rank
//	rank, view, err := node.WaitPromotion(ctx)
//	if err != nil { os.Exit(spares.ExitCode(err)) }
//
//	// a survivor whose detector confirmed a failure
//	res, err := node.ReportFailure(ctx, deadProc, me, view.Epoch)
//	view, err = node.WaitEpoch(ctx, res.Epoch) // then restore from checkpoint
//
// # Concurrency and ownership
//
// All Node methods are safe for concurrent use. Every blocking method
// takes a context and returns ErrTimeout (wrapping the context's error)
// when it ends, and ErrClosed after Shutdown; a timeout never means that a
// process died. View and Watch values are private copies. Watch channels
// hold only the latest state (a slow reader skips intermediate states and
// never blocks the node) and are closed by Shutdown.
//
// Goroutines: Raft's own (stopped by raft.Shutdown); per listener one
// accept loop and one handshake goroutine per pending connection (bounded
// by the process's admission gate, internal/admit, which sheds the oldest
// pending connection when full; each under HandshakeTimeout); the control server, one goroutine per
// control connection (under RPCTimeout), one waiter per local apply, and
// the leader loop. All are owned by the Node and stopped by Shutdown,
// which closes the control listener, shuts Raft down (closing its
// transport), waits for the goroutines, then closes Watch channels and
// stores. Shutdown is bounded (Config.ShutdownTimeout, shutdown.go): a
// Raft that does not stop in time has its transport closed under it, and
// is abandoned, stores and all, if even that does not stop it.
//
// Locks: fsm.mu (state, change channel, watchers), Node.mu (closed flag
// and goroutine registration) and authListener.mu (pending handshakes) are
// leaves: no lock is held while taking another or while blocking. Raft's
// FSM goroutine is the only writer of the state.
//
// # Costs and limits
//
// Every process replicates the log, so the leader sends heartbeats and
// commit notices to every process: O(processes) small RPCs per
// CommitTimeout and HeartbeatTimeout/10. That is cheap for tens to a few
// hundred processes; much larger jobs would want non-voters to read from
// the voters instead.
//
// # No process runs forever
//
// Every Node watches its own contact with the membership: a leader is in
// contact (Raft steps it down without a quorum), any other node while its
// last message from a leader is at most HeartbeatTimeout old. The rule is
// a pure state machine (contact.go, tested with fake time) driven by one
// goroutine every 100ms; a tick adds at most 200ms, so only time the
// process could run counts: a process resumed after a long SIGSTOP asks
// before it gives up, and on a starved host the bound stretches.
//
//   - After 2 × (HeartbeatTimeout + ElectionTimeout) (at least 1s) without
//     contact the node asks, every StandingInterval, the voters it knows
//     and two other processes in turn for its standing (control RPC op "standing",
//     authenticated like every control connection). A process declared
//     failed has left the Raft configuration and gets no log entries, so
//     this is how it learns its fate once the network heals: an answer
//     that it was declared failed ends it fenced (ExitDeclaredFailed, 77);
//     a failed job ends it with the job's code; an idle spare of a job
//     that finished exits 0. Answers are committed facts, so a responder
//     that is behind can only say too little. Answers from a majority of
//     the voters count as contact: on a starved host Raft may go without
//     a leader for seconds while every process still reaches the others.
//   - After Config.CutOff (PGAS_CUTOFF, default 10s) without contact the
//     node gives up with a *CutOffError (ErrCutOff, ExitCutOff = 74) that
//     names the voters, the time and the last contact. An idle spare is no
//     exception: cut off, it cannot know whether the job still needs it.
//
// Node.Lost and LostErr report the verdict; Membership passes it to the
// runtime (pgas.MembershipLoss), which stops every call with it. The
// default bound: a working membership is without a leader only during an
// election (HeartbeatTimeout plus a few ElectionTimeouts, about a second
// even on a starved host), and the majority's detector replaces a
// cut-off process within a few seconds, so a host cut off for 4s and
// healed never reaches 10s (its processes rejoin, or learn that they were
// replaced and exit 77), while a host cut off for good has ended its
// processes about 10s later.
package spares
