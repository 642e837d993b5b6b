// Package pagerank is PageRank, one of DataMPI's benchmark programs, in
// Iteration mode over package kvshuffle: every iteration is one round of
// the shuffle (ModeCommon: every rank sends and receives), fault tolerant
// through checkpoints of the ranks every few iterations. Its command is
// cmd/pagerank:
//
//	gaspirun -n 4 --spares 1 -- pagerank run --vertices N [--degree D] [--seed S] | --edges FILE \
//	    [--iterations I] [--ckpt-every C] [--check] [--inject kill:rank=R,iter=I]
//	pagerank ref ...        (one process, the reference)
//
// Graph: --edges FILE reads "src dst" lines (vertex numbers from 0; '#'
// starts a comment; the vertices are 0..max id), or the graph is
// generated (Generated): vertex v has 0 to 2D-1 out-edges (so about 1 in
// 2D vertices dangles), whose targets favour low vertex numbers (the
// product of two uniform draws), all from the seed and v only.
//
// Arithmetic: ranks are fixed-point integers, the whole mass being
// Mass = 2^40, so sums do not depend on the order pairs arrive in and the
// distributed answer is the reference's, bit for bit, on any number of
// ranks. One iteration, with d = 85/100: vertex v sends rank(v)/deg(v)
// (integer division) along each out-edge; the dangling mass D is the sum
// of the ranks of vertices without out-edges plus every division's
// remainder; then
//
//	rank'(u) = (Mass*15/100 + D*85/100) / N + (85 * Σ contributions to u) / 100.
//
// The job: vertex v belongs to rank v mod n. Each iteration resets the
// shuffle (RollBack to nothing, which starts the round), sums its
// vertices' contributions by target in an array of N (one pair per
// target, not per edge: a shuffle pair costs far more than an addition),
// sends the sums for other ranks' vertices keyed by the target (8-byte
// big-endian), with a summing Combine, keeps its own, ends the round
// (CloseSend), allreduces D, and adds each vertex's group. On one rank
// nothing goes through the shuffle. Rank 0 prints a line per iteration
// ("I/N iterations done: the last in T, dangling mass P%"). Every
// --ckpt-every iterations the ranks and the iteration number are
// checkpointed (package ckpt, mirrored); after a
// failure every rank restores the last committed one and iterates again
// from there. Rank 0 prints, as its last line,
//
//	vertices=<N> edges=<E> iterations=<I> sha256=<hex of the ranks, little-endian u64 in vertex order> top=<v>:<rank/Mass>,...
//
// (the 5 highest ranks, ties to the lower vertex). --check makes rank 0
// compute the reference itself and fail (exit 1) on a difference.
package pagerank
