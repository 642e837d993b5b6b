// Package topk is Top-K, one of DataMPI's benchmark programs, in
// Streaming mode over package kvshuffle (kvshuffle.Stream): every rank
// reads an unbounded generated stream of item ids, and each window (by
// record count or by event time) ends in the K most frequent items of the
// window. Its command is cmd/topk:
//
//	gaspirun -n 4 --spares 1 -- topk run --window-records 20000 | --window-span 5s \
//	    --windows W [--k 10] [--ckpts 4] --out DIR [--check] [--inject kill:rank=R,record=N]
//	topk ref --ranks 4 --window-records 20000 --windows W    (one process, the reference)
//
// Stream (Gen): rank r's record at position p is the item "item<i>", i
// drawn from a Zipf law over --keys items (--skew s), from the seed, r and
// p only; its event time is 2026-01-01T00:00:00Z + p/rate_r, where rank
// r emits rate_r = --rate/(1 + r mod 2) records per second, so time
// windows hold different numbers of records per rank.
//
// The job (ModeCommon: every rank sends and reduces): pairs (item, 1),
// summed by Combine on the send side; each window's reduce sums its items'
// counts, keeps the local top K, and the ranks allgather them; as every
// item is reduced on one rank only, the best K of the union is exact.
// Ties go to the smaller item name. Rank 0 writes the window's report,
//
//	window=<w> records=<records in the window, all ranks> top=<item>:<count>,...
//
// to DIR/window-<w, 8 digits> and prints it, the first time only: a
// window redone after a recovery finds its report in place and must
// produce the same bytes (else the job fails: a wrong answer never goes
// unnoticed). --check makes rank 0 compute each window's reference too.
//
// Fault tolerance: --ckpts key-count checkpoints per window (at its start
// and every 1/ckpts of it), mirrored with package ckpt. A rank killed
// mid-window makes every rank roll back to the last committed checkpoint:
// the pairs sent before it are restored, each source is read again from
// the position it recorded, and every window is reported exactly once
// with the failure-free counts.
package topk
