// Package kvshuffle is a DataMPI-style key-value shuffle over the pgas
// one-sided runtime: O (operation) tasks Send pairs with no destination,
// A (aggregation) tasks receive them sorted and grouped by key.
//
// # Usage
//
//	sh, err := kvshuffle.New(ctx, rt, kvshuffle.DefaultConfig()) // collective
//	defer sh.Close()
//	for i := sh.Consumed(); i < uint64(len(input)); i++ {        // O side
//		err = sh.Send(ctx, key(input[i]), value(input[i]))
//		err = sh.MarkConsumed(i + 1)
//	}
//	err = sh.CloseSend(ctx)
//	for k, vals := range sh.Groups(ctx) {                        // A side
//		for v := range vals { ... }
//	}
//	err = sh.Err()
//
// Recv(ctx) yields every pair in Compare order instead of groups. Both are
// Go iterators (iter.Seq2), chosen over a Next method because a group's
// values are themselves an iterator that streams from the merge: a key
// with more values than fit in memory is fine. Slices yielded are valid
// only until the next step; errors are reported by Err afterwards, as
// with bufio.Scanner. SendTyped, RecvTyped and GroupsTyped encode keys
// and values with msgpack for convenience; Send with bytes never goes
// through an encoder.
//
// # Modes and roles
//
// ModeCommon is SPMD: every rank is an O task and an A task. ModeMapReduce
// is the bipartite job: Config.ORanks send, Config.ARanks receive (the A
// task of partition p is ARanks[p]); a rank may be in both. Every rank
// calls New and Close; Send on a rank outside ORanks is ErrNotOperator,
// Recv outside ARanks ErrNotAggregator. Iteration mode follows from this
// design without changing the wire protocol: a round is a shuffle whose
// streams end with CloseSend; the next round resets the streams (as
// RollBack does, raising the frame generation) and may swap ORanks and
// ARanks, so data flows back. Streaming mode is a Stream over a Shuffle
// (stream.go): an unbounded Source per O task, one round per window (by
// record count or event time), a result per window, and key-count
// checkpoints inside windows that make each window's counts exactly-once
// across a recovery.
//
// Key routing (route.go, after HPMR): BuildRoute gathers every rank's
// Digest of (key, count, bytes) and returns one RouteTable, the same on
// every rank, that routes each key (or hash bucket) to the partition
// already holding most of its bytes under a balance bound; set Partition
// to its Partition and checkpoint its Encode with the job.
//
// Hooks: Partition (default HashPartition, FNV-1a modulo; RangePartitioner
// with splitters from SampleSplitters gives globally sorted output, as
// TeraSort needs), Compare (default bytewise, with an 8-byte key-prefix
// fast path) and Combine (optional, applied on the send side to each
// frame-sized batch of one destination).
//
// # Pipeline
//
// Send partitions the pair and appends it, framed (see AppendPair), to the
// destination's current send buffer, which lives in the shuffle's pgas
// segment. A full buffer is sealed into a frame (16-byte header, see
// frame.go) and queued; the pump goroutine writes queued frames with
// WriteNotify straight from the segment into this task's receive ring at
// the destination: Slots slots of SlotSize bytes per sender. The
// notification value is the sender's cumulative frame count, so one
// notification covers any number of frames.
//
// Flow control is by credits. A sender may have at most Slots frames
// outstanding to a receiver. The receiver's drain goroutine copies each
// frame out of its slot into the open block, indexes its pairs, and
// returns the slot with a Notify whose value is its cumulative count of
// frames consumed. A receiver that does not drain therefore stops its
// senders' pumps; their buffers (SendBuffers per destination, fixed in the
// segment) fill, and Send blocks. Nothing on the send side grows with the
// data.
//
// Blocks: the drain appends the payloads of many frames to one block of
// RunSize bytes, with an index entry per pair (the key's 8-byte prefix and
// offsets). A full block is sealed and handed to the merger goroutine,
// which sorts it: in bytewise order it moves the pairs into key order
// (blocksort.go), otherwise it sorts the index in place, so every sealed
// block is a sorted run. Blocks are kept in a pool once freed and reused,
// so the memory is mapped once, not at every frame. When the sealed
// blocks plus the next one would exceed MemoryBudget, the merger spills
// while the drain fills the open block; the drain waits only when even
// that block does not fit. A block of a quarter of MemoryBudget or more is
// spilled alone, written as it lies (one sequential copy); smaller ones
// are k-way merged, all the sealed blocks (and any in-memory runs) into
// one sorted spill file in SpillDir, so that the files stay few. Without
// SpillDir, more than MergeFanIn sealed blocks are merged into one run in
// memory. Once every O task has ended its stream, the merger cuts the
// number of spill files to MergeFanIn with on-disk merge passes, and Recv
// merges runs, spill files and the sorted blocks in one heap. Spill files
// are written and read a buffer (IOBufferSize) at a time around the page
// cache where the file system allows it (PageCache: through it), the next
// buffer written or read in the background meanwhile; pairs are decoded
// in place. Compute (Send), transfer (pump, drain) and sorting (merger)
// overlap. Spill files are removed once merged or read, unless a
// checkpoint pins them, and all of them at Close.
//
// Exchange order: when several destinations are ready, the pump serves
// them in schedule order. With Schedule Diagonal, O task i starts at
// partition i and moves on by one after every frame, so at any time the
// senders are spread over the receivers; flushes (CloseSend, Checkpoint)
// go strictly step by step: in step s, O task i sends everything it holds
// for partition (i+s) mod parts before step s+1, which pairs every
// receiver with one sender per step (HPMR's diagonal skip). Schedule Naive
// serves 0, 1, 2, ... on every O task, for comparison (see
// BenchmarkSchedule).
//
// # Memory
//
// MemoryBudget bounds the received data an A task holds: blocks (each
// counted at its full RunSize from the moment it is taken, plus a 24-byte
// index entry per pair), large pairs, runs, and the output of an
// in-memory merge (reserved before it starts). Outside the budget, and
// constant in the data size:
//   - the pool of free blocks (at most MemoryBudget/RunSize+1 of them;
//     the blocks in use and in the pool together never exceed what the
//     budget held at its peak plus one block), and the merger's scratch
//     for moving a block into key order: two blocks of RunSize bytes and
//     three indexes of a block's pairs (24 bytes a pair);
//   - the segment: len(ORanks)*Slots*SlotSize bytes of rings on an A rank,
//     len(ARanks)*SendBuffers*SlotSize+64 bytes of send buffers on an O
//     rank, allocated by New;
//   - one frame being copied out of its slot (SlotSize), and one pair
//     larger than a frame being reassembled (at most MaxPairSize);
//   - spill I/O: two buffers of IOBufferSize for the file being written,
//     two more per file being read (at most MergeFanIn files, while
//     merging files and in Recv) and one IOBufferSize window each;
//   - with Combine, one SlotSize batch per destination on the O side, with
//     its index;
//   - checkpoint states, which copy the in-memory data and belong to the
//     caller;
//   - with Config.Holders, one 512 KiB chunk being copied, and on a holder
//     the copies of other ranks' files, on disk (Stats.HeldBytes).
//
// # Key-count checkpoints
//
// Checkpoints are asynchronous: Mark(ctx, c) starts one and returns,
// State(ctx, c) waits for its state (Checkpoint is the two in a row).
// Mark is collective (every rank, at the same point of its sequence of
// sends). Each O task records Consumed (the input records it marked
// consumed), seals its buffers and queues a marker frame carrying c behind
// its data to every partition, and Send goes on at once. Frames from one
// sender to one receiver are applied in order, so when the A task's drain
// meets the marker of a sender, everything that sender sent before c has
// been taken in. Until the markers of all senders are in, that sender's
// later data frames go to post blocks instead (while they leave room in
// the budget for one more block of data from before the marker, which the
// merger can always spill; otherwise they wait in the ring and credits
// throttle the sender). When the last marker is in, the A task holds exactly "the data
// sent before c": the drain cuts there (the sealed blocks, runs and spill
// files, which it pins; which streams had ended), hands the post blocks on
// as the first data after the cut, and resumes every source. With CheckpointSpill the merger
// then spills the cut's in-memory data before anything else, in the
// background (a merge never mixes data from before and after a cut);
// otherwise the cut's in-memory data is copied at once. State returns when
// the cut is complete, and typically runs in a goroutine of the
// application that then commits the state with package ckpt while the
// sending goes on: the checkpoint is complete when that commit is agreed.
// The state (opaque bytes, versioned and checksummed) is what the
// application mirrors with package ckpt, next to its own data. The
// bookkeeping of markers (which sender's is in, which sender is paused)
// and of the files each checkpoint pins (and which files Release or a roll
// back frees) is a pure state machine, tested from the scripts in
// testdata/markers.
//
// A call that waits on other ranks (Send and CloseSend for credits,
// Checkpoint, Recv, the copies to holders) wakes at the runtime's failure
// watch (pgas Runtime.Watch over the shuffle's ranks): the lost connection
// to a rank's process, a new view, or the runtime stopping ends the wait
// at once with a *pgas.RankError or the runtime's error. Nothing polls.
//
// RollBack(ctx, state) is collective too. The ranks agree (one Allreduce)
// that they roll back to the same c and that every state is usable; they
// stop their goroutines, complete their queues, and pass a barrier, after
// which nothing of the old generation is in flight. (After a rank was
// replaced, the goroutines stop before anything else: see below.) Each rank clears its
// notifications, raises the frame generation (frames carry it, and a
// frame of another generation is refused as corrupt), empties its send
// buffers and rings, loads the state's runs and spill files (files not
// named by it are deleted), and sets Consumed to the state's count. A
// second barrier, then the goroutines restart. Each O task resumes its
// input at record Consumed() and sends again: data sent before c is in
// the A tasks' states, data sent after c was discarded and is sent again,
// so no pair is lost and none is counted twice. This assumes a
// deterministic O task: the same input records produce the same pairs.
//
// Spill files a state names stay on the rank's disk, and a process on the
// same host restores them from there (by reference: nothing is copied).
// For a job across hosts, set Config.Holders to ckpt's
// Checkpointer.Holders: Checkpoint then also copies the files its state
// names to each holder on another host than the rank (only the files that
// holder lacks, so a checkpoint costs what arrived since the last one),
// and RollBack fetches every file it cannot read where the rank runs now
// (a spare on another host, a lost disk) from a rank that holds a copy.
// Which is used when: a holder on another host gets copies; a holder on
// the same host does not, since the loss of that host takes the holder
// too; when the job runs on one host label, everything is by reference
// and a spare must run on the same host (a file nobody can provide is
// ErrLost). A holder keeps the copies in a directory of its own under its
// SpillDir, for the checkpoints the source has not released (Release),
// and forgets those of an abandoned timeline at RollBack. The copies
// travel as pgas passive messages with credits (at most 8 chunks of 512
// KiB unconsumed per pair of ranks), inside Checkpoint and RollBack: while
// those run with Holders set, the program must not use passive messages.
//
// Integration with package ckpt: store the state bytes in a registered
// region (with their length; RegisterVar makes the checkpoint cost the
// state's length, not the region's), take the checkpoint after Checkpoint
// returns, call Release(c) once ckpt has committed c.
//
// # Concurrency and ownership
//
// Send, CloseSend, Mark, Checkpoint and RollBack are serialised by one
// mutex (opMu): they may be called from several goroutines but run one at
// a time. State may run in another goroutine at the same time as Send,
// CloseSend and Mark, not with another State or RollBack (ckMu). Recv and Groups are called by the A task; Stats, Consumed,
// MarkConsumed, Err and Close may be called at any time. Goroutines, owned
// by the Shuffle and stopped by Close and RollBack: the pump (O side; owns
// sealed frames, the control frame and Config.Queue), the drain (A side;
// owns the rings and Config.CreditQueue) and the merger (A side; sorts
// chunk indexes and owns spill output until it is listed).
//
// Lock order (outer first): Shuffle.opMu; Shuffle.ckMu; oside.mu;
// aside.mu; Shuffle.mu (a leaf). The drain and the merger never hold aside.mu while
// doing I/O, sorting or waiting.
package kvshuffle
