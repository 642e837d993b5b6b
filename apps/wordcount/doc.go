// Package wordcount is WordCount, one of DataMPI's benchmark programs, in
// MapReduce mode over package kvshuffle, fault tolerant through key-count
// checkpoints. Its command is cmd/wordcount:
//
//	gaspirun -n 4 --spares 1 -- wordcount run --in FILE | --generate LINES \
//	    [--reducers R] [--route] [--ckpts K] [--runnable N] [--out DIR] [--check] [--inject kill:rank=R,at=F]
//	wordcount ref --in FILE | --generate LINES      (one process, the reference)
//	wordcount gen --generate LINES --out FILE       (write the generated text)
//
// Words: a word is a maximal run of Unicode letters and digits,
// lowercased (Words). Input: the lines of --in (split at '\n'; a final
// line without one counts), or LINES generated lines (Generate: Zipf
// words of a fixed pseudo-word vocabulary, from --seed; line i depends
// on the seed and i only). Rank r of n takes generated lines
// [r*L/n, (r+1)*L/n), or the lines of the file whose first byte lies in
// bytes [r*S/n, (r+1)*S/n) of its S (Input.Share: each rank reads only
// its share).
//
// The job: every rank is an O task and sends (word, 1) for each word of
// its lines; Combine sums the counts of each frame-sized batch on the
// send side (varint counts), so a frequent word crosses the network once
// per batch. The A tasks, the first --reducers ranks (all by default; a
// ModeMapReduce shuffle), sum each word's group, write DIR/part-NNNNN
// ("word\tcount" lines in byte order of the words) with --out, and
// contribute to the result. Rank 0 prints, as its last line,
//
//	words=<distinct> total=<words> digest=<16 hex digits>
//
// where digest is the 64-bit sum over distinct words of the FNV-1a hash
// of "word\tcount": it does not depend on how words were partitioned, so
// `wordcount ref` prints the same line for the same input. --check makes
// rank 0 compute the reference itself and fail (exit 1) on a difference.
//
// With --route (kvshuffle key routing, after HPMR), every rank first
// digests its words (count and bytes of each), BuildRoute agrees on one
// table that sends each word (the 128 most frequent of each rank one by
// one, the others by hash bucket) to the reducer that holds most of it,
// under a 10% balance bound, and the table is checkpointed before any
// pair is sent, so a recovered job routes alike. Each rank's statistics
// line reports bytes_moved, the bytes of pairs it sent to another rank.
//
// Fault tolerance: with --ckpts K every rank takes key-count checkpoints
// k = 1..K, checkpoint k before its line k*L_r/(K+1) of its L_r lines
// (kvshuffle Checkpoint: the A tasks hold exactly the pairs sent before
// it; a rank records how many lines it consumed); the state is mirrored
// with package ckpt. After a failure every rank restores the last
// committed checkpoint and resends from the line it recorded, so no word
// is lost or counted twice; the result is the failure-free one. The
// final checkpoint records the result, so a failure after it only
// finalizes again.
//
// Bounded runnable ranks (BDMPI): with --runnable N at most N ranks of a
// host map at once. A rank loads its share of the input and sends it
// while it holds one of the host's N slots (kvjob Gate: lock files in
// --runnable-dir, one directory per job and host label by default); at
// every wait on the other ranks (a checkpoint, building the route table,
// the end of its lines) it drops its share (read again after a
// checkpoint), has its shuffle spill the pairs it received so far
// (kvshuffle Spill) and frees the slot. What it receives while it waits
// is bounded by --memory, spilling to --spill above it. So a
// job whose ranks' shares do not fit in a host's memory together runs
// with N shares in memory at a time (see docs/applications.md for a run under a
// memory cgroup).
package wordcount
