// Package wordcount is WordCount, one of DataMPI's benchmark programs, in
// MapReduce mode over package kvshuffle, fault tolerant through key-count
// checkpoints. Its command is cmd/wordcount:
//
//	gaspirun -n 4 --spares 1 -- wordcount run --in FILE | --generate LINES \
//	    [--reducers R] [--route] [--ckpt-lines C] [--out DIR] [--check] [--inject kill:rank=R,at=F]
//	wordcount ref --in FILE | --generate LINES      (one process, the reference)
//	wordcount gen --generate LINES --out FILE       (write the generated text)
//
// Words: a word is a maximal run of Unicode letters and digits,
// lowercased (Words). Input: the lines of --in (split at '\n'; a final
// line without one counts), or LINES generated lines (Generate: Zipf
// words of a fixed pseudo-word vocabulary, from --seed; line i depends
// on the seed and i only). Rank r of n takes lines [r*L/n, (r+1)*L/n).
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
// Fault tolerance: with --ckpt-lines C every rank takes key-count
// checkpoint c after sending its first c lines, for c = C, 2C, ... below
// the smallest rank's line count (kvshuffle Checkpoint: the A tasks hold
// exactly the pairs sent before c); the state is mirrored with package
// ckpt. After a failure every rank restores the last committed checkpoint
// and resends from its line c, so no word is lost or counted twice; the
// result is the failure-free one. The final checkpoint records the
// result, so a failure after it only finalizes again.
package wordcount
