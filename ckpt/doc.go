// Package ckpt takes coordinated in-memory checkpoints of a program's
// state, mirrored to other ranks over the pgas one-sided API, and restores
// them after a failure: survivors from their own copy, a promoted spare
// from a mirror holder. An optional disk level writes committed
// checkpoints to a directory so that a job can be resumed after losses
// beyond the in-memory redundancy.
//
// # Usage
//
//	ck, err := ckpt.New(ctx, rt, ckpt.DefaultConfig()) // collective on a starting job
//	defer ck.Close()
//	ck.Register("centroids", centroidBytes)        // every rank, same names and order
//	ck.RegisterSegment("points", pointsSeg, 0, n)
//	ck.RegisterVar("log", logBuf, func() int { return logLen }) // only the prefix in use is saved
//	for iter := first; iter < last; iter++ {
//		compute(iter)
//		if iter%every == 0 {
//			if err := ck.Start(ctx, uint64(iter)); err != nil { ... } // copy, push in background
//			computeMore()                                            // overlaps the push
//			err = ck.Commit(ctx, uint64(iter))                       // collective agreement
//		}
//		if pgas.NeedsRecovery(err) {
//			rt.Recover(ctx)             // survivors; a promoted spare instead: Init, New, Register
//			id, err := ck.Restore(ctx)  // every rank; regions hold checkpoint id again
//			iter = int(id)
//		}
//	}
//
// A failure during the collective setup is recovered like one in the
// loop: New returns the Checkpointer with an error for which
// pgas.NeedsRecovery holds (register, Recover, and Restore finishes the
// setup with the promoted spare; ErrNoCheckpoint: start over), and a rank
// whose earlier setup step failed before New makes its Checkpointer with
// NewJoining, which leaves the collective part to Restore, as New does on
// a promoted spare.
//
// A program whose loop has a collective of its own after Commit's place
// can save Commit's allreduce: Vote (wait for this rank's push, then
// carry the vote in the program's collective, all must be true) and Agreed
// (the combined vote, or the collective's error) are Commit in two halves.
//
// To resume a job from the disk level (gaspirun --resume DIR), every rank
// calls LoadFromDisk(ctx, dir) after New and Register.
//
// A disk checkpoint that cannot be written is never silent. A write that
// fails for want of file descriptors is retried (a few descriptors are
// held in reserve and released for the retry); a write that still fails
// is logged at Error ("disk checkpoint LOST"), counted in Stats.DiskLost,
// and from then on FlushDisk and Close return a *DiskError (ErrDiskLost)
// naming the checkpoints, even after later ones were written. The
// in-memory level is unaffected. Before reporting success an application
// calls VerifyDisk, which is collective: it fails on every rank if any rank
// lost a disk checkpoint, and otherwise returns once the last one is
// complete on disk.
//
// # Design
//
// Each rank has two local snapshot buffers and, at each of its holders
// (Place: the next Config.Mirrors ranks on a host-interleaved ring, on
// other hosts when there are several), a pair of mirror slots. Start
// copies the regions into the buffer that does not hold the last
// committed checkpoint and pushes it into the slot of the same index, so
// a failure in the middle of a push or of a commit never touches the last
// committed copy, locally or at a holder. A push clears the slot's header,
// writes the payload, then writes the header (with a CRC32C of the
// payload) and a notification; frames between two processes are applied in
// order, so a slot shows a valid header only over a complete payload.
// Commit waits for the push's remote completion, then agrees with an
// allreduce: a checkpoint is committed when every rank's holders have it.
//
// A snapshot is named by its id and a generation (the timeline: bumped by
// every restore), because ids repeat when a program redoes iterations
// after a rollback. Restore takes an inventory (each rank's complete
// local snapshots; each holder reports the slots whose checksums verify
// to the ranks they belong to) and restores the snapshot with the
// highest id that every rank has, agreed by an allreduce; Restore's
// documentation explains why this, and not "the minimum last committed
// id", is the right target. Afterwards each rank pushes its snapshot to
// the holders that lack it in the background; the time from the first
// failure a rank saw (or the start of the restore) to the end of that
// rebuild is the unprotected window, logged and kept in Stats. The choice
// is a pure function of a rank's inventory and the agreement (planRestore:
// the target, where the rank's copy comes from, own buffer or holders in
// the order tried, and which holders get it pushed again), tested from
// the scripts in testdata/restore. The disk level's agreement on the
// checkpoint every rank loads (LoadFromDisk) is a pure state machine too
// (diskSearch), driven by two allreduces per round and tested from the
// same scripts. Both are in plan.go.
//
// A restore reads in three files, one path per level around shared
// steps. restore.go holds the steps both levels run, in the order every
// rank runs them: beginRestore (stop the pushes, re-create the local
// segment, agree on the inventory with the exchange of inbox.go), then
// the level's own step, then settleRestore (the mirror segment for the
// new placement, and an allreduce that every rank has its snapshot ready)
// and applyRestore (copy the snapshot into the regions, rebuild the
// mirrors); verifyBuf checks a snapshot in a local buffer for both.
// restoremem.go is the memory level: Restore makes the plan and carries
// it out, from this rank's own buffer or with one-sided Reads from a
// holder (no collective). restoredisk.go is the disk level: LoadFromDisk
// runs the search and loads this rank's file into a local buffer, with
// every check (manifest, size, chunk and payload CRCs). The disk level's
// writer is disk.go (each rank's files, reported to rank 0),
// diskmanifest.go (rank 0's manifests and the cleanup) and disklost.go
// (writes that fail, VerifyDisk).
//
// In a job that shrinks (pgas Runtime.Vacant), a rank lost with no spare
// left is vacant: Restore and Commit run among the live ranks
// (pgas.GroupAll), the target is the newest snapshot every live rank has
// (the survivors restore their own; the vacant rank's snapshot and its
// mirrors are no longer needed), and the placement is recomputed over the
// live ranks only, so no snapshot is pushed to or expected from a vacant
// rank. The disk level needs every rank: with Config.Dir set, Restore
// refuses a job with vacant ranks (ErrInvalid).
//
// After a recovery the placement is recomputed from the current host
// labels (a spare may sit on another host). When a holder must then hold
// more or fewer snapshots, the mirror slots move to the other of the two
// mirror segment IDs (a segment's size is fixed), and the old segment is
// freed once every rank has restored.
//
// # Cost
//
// Per rank, independent of the number of ranks N (TestCostFlatInN counts
// them): a checkpoint (Start and Commit) writes the snapshot to each of
// Config.Mirrors holders (a few frames each) and runs one allreduce
// (O(log N) frames), none with Vote and Agreed. A restore runs, besides
// pgas's two SegmentCreate exchanges (the local and the mirror segment,
// which pgas requires after Recover; an agreement of constant size when
// every rank passes the same size, else an allgather, O(N) bytes per
// rank),
// three allreduces of constant size, and per rank whose copies this rank
// holds one FetchAdd and one Write of a few dozen bytes. A survivor
// restores from its own buffer; only a promoted spare reads its snapshot,
// from a holder. State per peer: the disk board on rank 0 (4 records per
// rank); the layout tables are computed once per restore, and shared by
// the checkpointers of one process that derive the same layout.
//
// # Calls, blocking and ownership
//
// New (on a starting rank), Restore, LoadFromDisk, Commit and VerifyDisk
// are collective: every rank calls them, in the same order relative to
// the program's other collectives on pgas.GroupAll. NewJoining is local.
// Start is local and returns after the copy; Vote is local and Agreed
// ends the collective the program ran. Register, RegisterSegment, Start,
// Commit, Vote, Agreed, Restore and LoadFromDisk belong to the program's
// goroutine: do not call them concurrently with each other.
// Stats, LastCommitted, Holders, WaitProtected and FlushDisk are safe
// from any goroutine. Every blocking call takes a context; a context that
// ends gives an error wrapping pgas.ErrTimeout.
//
// The Checkpointer owns these goroutines, stopped and awaited by Close: a
// worker that runs pushes and rebuilds one at a time on Config.Queue, a
// disk writer (when Config.Dir is set) that writes files and reports them
// to rank 0 on Config.DiskQueue, and on rank 0 a manifest writer that
// waits on the board notification. Both queues must be used by nothing
// else. Registered memory is read by Start and written by Restore only.
//
// Lock order: Checkpointer.mu is a leaf; it is never held across a pgas
// call, a file operation or a channel wait.
package ckpt
