// Package kmtier holds the real-process acceptance tests of fault-tolerant
// K-means (apps/kmeans/cmd/kmeans) under gaspirun: 4 ranks on loopback,
// SIGKILLs injected by the program itself (--inject), and the outcome
// checked from the outside. It holds tests only.
//
// TestMain builds cmd/gaspirun and the kmeans command once per test binary
// (with -race when the tests run with -race). Every job runs with
// PGAS_LOG=info, a unique --job-id and a bounded --timeout; while it runs
// the harness collects the pids of its processes from /proc (they carry
// PGAS_JOB_ID in their environment) and, after gaspirun has exited,
// checks by pid that none of them is left.
//
// The workload is 200,000 generated points in 10 dimensions, k = 20, 25
// iterations, a checkpoint every 5 iterations. The failure-free run's
// final line (centroid checksum, SSE, iterations) is the reference: every
// recovered run must print exactly that line.
//
// What is checked:
//
//   - TestFailureFree: the reference; --ckpt-every 0 gives the same bits.
//   - TestEveryProcessEnds: 14 ranks and 2 spares, without and with a
//     kill: every rank's process ends by itself, nobody recovers at the
//     end, the same result.
//   - TestKillRank: one kill, one spare: the checkpoint of iteration 10
//     restored.
//   - TestKillDuringCommit: a kill inside a checkpoint's commit
//     (phase=commit).
//   - TestKillBeforeFirstCommit: a kill inside the starting checkpoint's
//     commit (iter=0,phase=commit): the ranks start over, or restore it.
//   - TestKillMirrorHolder: after a first recovery and the background
//     rebuild of the new process's mirror, the holder of that mirror is
//     killed (kill:mirror-of=R).
//   - TestKillLeader: the Raft leader's process is killed (kill:leader); a
//     new leader is elected. A leader that is an idle spare cannot be
//     killed from inside the job: the injection first moves the
//     leadership onto a rank.
//   - TestKillHost: --ranks-per-host 2 gives host labels host0 (ranks 0,
//     1), host1 (ranks 2, 3), host2 (the spares); kill:host=host1 loses two
//     ranks at once, and both come back from mirrors on other hosts.
//     TestKillTwoNeighboursOneHost is its control: the same two ranks on
//     one host lose rank 2's only mirror, and the job fails, naming it.
//   - TestBeyondRedundancy: a rank and its mirror holder in the same
//     iteration with --mirrors 1 --ckpt-dir: the in-run fallback to the
//     disk level, or (if the job fails) gaspirun --resume, gives the
//     reference result.
//   - TestResume: a kill without spares fails the job (exit 137);
//     gaspirun --resume continues it to the reference result; resumed
//     again from its final checkpoint it prints the same result (SSE
//     included) without iterating, and a smaller --max-iter is refused.
//   - TestInjectMissingRank: --inject naming rank 4 of 4 is refused by
//     every rank before any work (exit 2).
//   - TestFilesOwnerOnly: after a run with a kill, the state directory
//     (Raft logs), the disk checkpoints and --output have no group or
//     other permission bit.
//   - TestMatchesReference: points in a CSV and a binary file, --init
//     centroids, --output CSV: the distributed result equals
//     kernel.Reference within rounding, and a run with a kill gives the
//     same bits as without.
//   - TestPrunedKillRank, TestYinyangKillTwoRanks: --algo hamerly and
//     --algo yinyang (k = 64) with kills end with the brute-force
//     failure-free line, bit for bit.
//   - TestShardsAnyRanks: --shards 12 prints one line on 2, 3 and 4
//     ranks (-n varies), and a 4-rank run killed without a spare resumes
//     from its disk checkpoint on 3 ranks (pruned) to that line.
//   - TestShrinkFailureFree: the --shrink reference (its own: partials
//     are added per shard, so it differs from TestFailureFree's only in
//     rounding).
//   - TestShrinkKillRank: --shrink without spares (gaspirun --on-death
//     continue), rank 2 killed: rank 2 is left vacant, rank 3 takes over
//     its shard, and the result is the --shrink reference's.
//   - TestShrinkAfterSpares: --shrink with one spare and two kills: the
//     spare takes rank 1, then rank 0 is left vacant, rank 1 takes its
//     shard and prints the result, which is the --shrink reference's.
//   - TestPartitionedWriterIsFenced: the same-host fencing contract
//     (docs/design.md §3): rank 1 stores all the time into rank 2's
//     memory (--inject store:rank=1,iter=3) and is partitioned
//     (internal/netfault) until it was replaced and rank 2 recovered, then
//     2 s more: it stored directly after the partition began and kept
//     trying while rank 2 looked after every iteration, rank 2 saw none
//     of it, and, healed, it exits 77 (or 74) by itself.
//
// Two kills in turn and more kills than spares (exit 75) are membership
// cases: test/fttier covers them (TestKillTwoRanks, TestSparesExhausted);
// here two kills run only with a pruned algorithm (TestYinyangKillTwoRanks).
//
// The survivors report a vacant rank to gaspirun (bootstrap.KindVacant),
// which then counts it as done: a job that shrank exits 0.
//
// The tests need Linux and are skipped with -short.
package kmtier
