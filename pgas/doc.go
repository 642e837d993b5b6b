// Package pgas is the one-sided runtime: ranks, segments, queues,
// notifications, collectives and atomics, after the GASPI model.
//
// A job is a set of processes; N of them hold ranks 0..N-1, the rest are
// spares. Each rank creates segments collectively and then reads and writes
// the segments of other ranks directly, addressing them as (rank, segment,
// offset). Writes are posted to a queue and complete asynchronously;
// notifications tell the target that data is in place.
//
//	rt, err := job.Init(ctx, job.Options{}) // under gaspirun (package job)
//	defer rt.Close()
//	seg, err := rt.SegmentCreate(ctx, 1, 1<<20, nil) // collective
//	right := (rt.Rank() + 1) % rt.Size()
//	err = rt.WriteNotify(ctx, 0, right, pgas.Loc{Seg: 1, Off: 0}, pgas.Loc{Seg: 1, Off: 4096}, 4096, 7, 1)
//	err = rt.Wait(ctx, 0)                       // the data is at the target
//	id, err := rt.NotifyWaitSome(ctx, 1, 7, 1)  // a left neighbour's data is here
//	_, err = rt.NotifyReset(1, id)
//	err = pgas.Allreduce(ctx, rt, nil, sums, pgas.OpSum) // nil group: all ranks
//
// # Semantics
//
//   - Write, WriteNotify, Notify and Read post an operation on a queue and
//     return once the local buffer may be reused. Wait(ctx, q) returns once
//     every operation posted on q since the previous Wait is complete at its
//     target: writes and notifications applied there, reads landed here.
//     This is remote completion, stronger than GASPI's local completion.
//   - A notification is set at the target only after every write that the
//     same process posted to that target before it (frames from one process
//     to another are applied in order).
//   - A queue holds at most Config.QueueDepth operations between Waits;
//     one more is ErrQueueFull at once, never a silent stall.
//   - Ranges are bounds-checked against the local segment, against the
//     remote segment's size learnt at collective creation, and again at the
//     target. An out-of-range access is an error; nothing is written.
//   - Collectives (Barrier, Allreduce, Bcast, Allgather) run on Groups. The
//     reduction order of Allreduce depends only on the group size, so the
//     result is bit-identical on every member, across runs, and whatever
//     the placement of ranks on hosts or the transport.
//   - Collectives are host-aware (Config.Hosts): when the members of a
//     collective share hosts, Barrier, small Allreduce and Allgather, and
//     Bcast run in two levels (the members of a host meet at its lowest
//     member, the leaders run the collective among themselves, and hand
//     the result back), and a large Bcast (256 KiB and up, over three
//     members or more) is pipelined in chunks along a chain ordered by
//     host. The placement is read from the view each collective runs in,
//     so a spare promoted on another host changes it after Recover. With
//     rack labels (Config.Racks) a rack level comes on top: the host
//     leaders of a rack meet at its leader, and only rack leaders talk
//     across racks.
//   - Small frames (writes, notifications, acknowledgements) are batched
//     by a transport that can (transport/tcp): a Wait's request for
//     acknowledgement is answered from the target's reader (Queuer).
//   - Every blocking call takes a context. A context that ends gives an
//     error wrapping ErrTimeout (retryable, says nothing about peers). A
//     peer whose connection is lost gives a *RankError wrapping
//     ErrRankFailed, promptly, for every operation waiting on it: no call
//     blocks forever after a peer dies.
//   - Every frame carries the sender's epoch. Frames from an older epoch or
//     from a process declared failed are rejected and counted.
//   - A process that learns it was replaced (ErrFenced), or that its
//     membership gave up on it (MembershipLoss: package spares does when
//     the process was cut off from the membership's quorum for longer than
//     PGAS_CUTOFF), stops for good: its connections are cut, and every
//     call, Recover and a spare's wait for promotion return that error.
//     The program exits (job.ExitCode gives the code).
//
// # Shrinking
//
// A job whose membership shrinks (spares.Config.Shrink) goes on without a
// rank it lost when no spare was left: the view marks the rank vacant.
// Size never changes and ranks are never renumbered; Vacant(r) and
// LiveRanks tell which ranks are held. Survivors Recover as after any
// failure (the new view replaces nothing, so they do not wait for a
// spare); then GroupAll, and so every collective given a nil group,
// SegmentCreate and Finalize, runs among the live ranks of the view. A
// group from NewGroup keeps its ranks: a collective on it that involves a
// vacant rank, and any one-sided operation on a vacant rank, fails with
// ErrVacant, which asks for no recovery. Handing the vacant rank's work to
// the survivors is the program's part.
//
// # Processes that join
//
// A process started after the job formed (a joiner, refilling the spare
// pool) has an id from Config.NumProcs on, never reused, and a
// membership whose current view lists it in View.Joined; NumProcs and
// Hosts stay the job's original ones. It is a spare until a view gives
// it a rank (or holds one in its first view). Every runtime learns the
// joiners from the views: applyView gives each new one's address to the
// transport (transport.PeerAdder; without it the joiner stays
// unreachable and the failure detector reports it), then makes room for
// it, then stores the view, and only then takes frames from it as from a
// process of the job. A frame from a joiner this process has not learnt
// yet (its view lags the sender's) waits for the view that lists it, up
// to 30 s. The process space never shrinks from one view to the next; an
// id below the highest joined one that no view lists never joined, and
// is neither live nor spare nor failed. A joiner shares no memory with
// anyone: collectives place it on a host of its own, so nothing with it
// goes through shared memory, only frames (transport/route sends to it
// through TCP).
//
// # Direct writes on one host
//
// With Config.DirectShm (job: on unless PGAS_SHM_SEGMENTS=0), segments live in
// memfds that the processes of one host map, their notification slots in
// memfds of their own (the transport names those processes, IsNear, and
// passes the memory over its authenticated socket,
// transport.MemorySharer: no right to trace a peer is needed). A Write,
// WriteNotify or Notify to such a rank is done in its memory by the
// caller: a copy, then a store into its slot; Wait's remote completion is
// an atomic fence on the slots' memory, and a frame goes only to wake a
// waiter that parked. While a frame to that rank is still on its way, the
// operation goes by frame, data and all, to keep the order. Every contract
// above holds: the notification follows the data, Wait is remote
// completion, and a write that raced a view change fails (its fence
// fails, or its frame is refused).
//
// The fencing contract a program may rely on (docs/design.md §3), for
// same-host memory as for frames: once this process has applied a view
// that declares a process failed, nothing that process sets is seen in a
// notification slot here; once Recover returned, nothing it copies
// changes a segment here; the same holds for a survivor still in an older
// epoch, whose operations fail as stale. A notification does not outlive
// its epoch: one set in an older epoch reads as not set (NotifyWaitSome,
// NotifyReset) once this process applied a newer view, so after Recover
// the program sets again what it needs. A WriteNotify or Notify that
// returned nil has woken any parked waiter, or will without the caller
// (the wake-up goes on in the background if the caller's context ended);
// waiters also look again whenever a peer is lost and at every view, and
// a NotifyWaitSome whose range held a value set during the wait that a
// view dropped unseen fails with ErrStaleEpoch. The
// program must not touch segment memory while
// Recover runs. NotifyWaitSome on such a segment polls its slots for a
// while before it parks: 50 µs when the host has a CPU for each of its
// ranks, 20 µs giving the CPU away between looks when it has up to four
// per CPU, not at all beyond (Config.SpinWait overrides).
// See direct.go and directnote.go; the mechanics (the mapped peer memory,
// the one decision "memory or frame?", the copy, the collective areas)
// are in package pgas/internal/samehost, the shared layouts in segments.
//
// # Concurrency
//
// A Runtime is safe for concurrent use. Operations on one queue from
// several goroutines are allowed but Wait then covers all of them. The
// runtime owns these goroutines: the transport's reader per peer (which
// applies incoming frames and never blocks on a send), and one outbox
// drainer per peer while replies are pending. Close stops the failure
// detector first (a leaving process neither reports nor vouches for the
// peers leaving around it), says goodbye to the peers (bounded by
// goodbyeTimeout, peer.go), stops the transport, closes the membership
// and the launcher (Config), which Init owns from the call on, and waits
// for its goroutines, which end once the transport's sends fail. Each
// step is bounded whatever the peers and the membership do, provided the
// transport's Close is (the membership's is: see spares.Config.
// ShutdownTimeout).
//
// # Seams and structure
//
// The runtime is given its transport (transport.Transport), membership
// (Membership) and launcher (Launcher) in Config and reads no environment;
// package job builds them for a process started by gaspirun. Optional
// capabilities are named interfaces (Disconnector, Queuer and Connector of
// a transport, Finisher and MembershipLoss of a membership). The callbacks the transport and the
// failure detector make (HandleFrame, PeerDown, SendHealth) go to an
// unexported adapter, not to Runtime's methods. By concern: runtime.go
// (Init, Close, accessors), view.go (the immutable view and its changes),
// peer.go and acks.go (per-peer state; the ack/nack protocol as a pure
// state machine), dispatch.go (incoming frames), outbox.go (replies),
// failure.go (lost peers, fencing, the detector), membership.go (Recover,
// promotion, Finalize), ops.go, read.go, segment.go, atomic.go (one-sided
// operations), direct.go and directnote.go (same-host segments, and
// operations done in their memory: the runtime's side, with
// pgas/internal/samehost doing the mechanics, told what the runtime knows
// through its State and callbacks), coll.go, hier.go, reduce.go,
// mailbox.go, collshm.go (collectives; their areas are samehost.Area).
//
// Lock order (outer first): segMu; a segment's use lock (held while a
// remote write or read touches its memory); a samehost.Seg's mu (the
// peers' memory of a segment: held shared from Seg.Get to Release)
// before a mapped peer's PeerNotes lock, neither held with any other lock;
// a segment's move lock before viewMu before its hmu before its
// notification lock (segments.Segment: provideMemory, and applyView's
// raiseEpochs under viewMu); viewMu before the peer table's growMu and
// the transport's own locks (applyView's AddPeer: leaves, which the
// transport never holds while it calls the handler); a Group's mu (held while the group's
// collective area is made or mapped) before the collective areas' mu
// (samehost.Areas), which provideMemory also takes under viewMu
// (collshm.go); peer.sendMu; peer.flushMu
// before peer.ackMu; peer.mu / peer.ackMu /
// outbox.mu / reqMu / mailbox.mu (leaves, never held together), except
// that an ack sent from the reader (Queuer) is queued under peer.ackMu:
// the transport's Queue takes only locks of its own that are leaves.
package pgas
