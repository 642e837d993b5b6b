// Package kvjob is the fault-tolerant frame of the key-value programs
// (apps/wordcount, apps/pagerank, apps/topk): one rank's checkpointer
// (package ckpt) holding the program's own region and a shuffle state,
// the shuffle (package kvshuffle), and the recovery loop (package
// recovery) that rolls both back after a failure. It also holds what
// their commands share: joining the job under gaspirun, exit codes, and
// the --inject kill specification.
//
// # Contract
//
// Start is collective on the ranks of a starting job; a promoted spare
// joins the survivors' recovery inside it. Config.App is the program's
// region, fixed in size, holding its initial state when Start is called;
// a checkpoint saves it as it is then, and a restore writes it back and
// calls Config.Restored, so the program reloads its variables from it.
// Checkpoint(c) takes key-count checkpoint c of the shuffle (c = 0: none,
// the state is empty, as after a roll back to nothing) and commits the
// region and the state as one ckpt checkpoint; Save commits a state the
// caller produced (a kvshuffle Stream's). ckpt ids count the commits of
// the job, so they increase on every rank alike.
//
// Recover takes the error of a step and recovers until the job can go
// on: nil once every rank restored the last committed checkpoint (or,
// with none committed yet, the initial region and an empty shuffle), the
// error otherwise. A program therefore redoes its step from the restored
// region whenever Recover returns nil. Finalize ends the job, recovering
// a rank lost meanwhile and calling resume to redo what the restored
// checkpoint lacks.
//
// Gate bounds the ranks of one host that compute at once (BDMPI's
// runnable ranks) with lock-file slots: a rank holds a slot only while
// it computes and frees it before any wait on the other ranks.
package kvjob
