// Package fttier holds the real-process acceptance tests of failure
// detection and membership: gaspirun jobs of test/fttier/testprog/ftstep
// (4 ranks + 2 spares on loopback, the runtime's default detector and
// membership configuration) in which the tests kill, stop and resume
// processes by pid and check the outcome from the outside. It holds tests
// only.
//
// TestMain builds cmd/gaspirun, ftstep, and the TeraSort and WordCount
// commands once per test binary (with -race when the tests run with
// -race). Every job runs with PGAS_LOG=info, so the runtime's "failure
// confirmed" and "view applied" records are part of the output the tests
// read; ftstep runs with -leader (it prints a line when its process
// becomes the Raft leader), -stats (the runtime's counters after the
// result line) and -result-dir (result files, for the test that kills
// gaspirun). Each test checks at the end that no process of its job is
// left, by pid.
//
// What is checked:
//
//   - TestFailureFree: the reference result, the same on every rank, in
//     epoch 1, with no failure confirmed.
//   - TestKillRankAcrossHosts: SIGKILL of a rank mid-run, the processes
//     labelled as three hosts (gaspirun --ranks-per-host 2); every survivor
//     ends in the same new epoch, a spare on another host holds the rank,
//     the results equal the failure-free run's.
//   - TestKillRaftLeader: SIGKILL of the Raft leader's process; a new
//     leader is elected and recovery completes with the correct result.
//   - TestKillTwoRanks: two kills, one after the other's recovery; both
//     spares are used.
//   - TestSparesExhausted: a third kill after both spares are used ends
//     the job with the named error and gaspirun's exit code 75.
//   - TestStoppedRankIsFenced: SIGSTOP of a rank until it is replaced,
//     then SIGCONT: it exits 77 (fenced), the survivors rejected what it
//     sent, the result is correct.
//   - TestPartitionedForGood: a rank cut off from every other process for
//     good (internal/netfault, PGAS_CUTOFF=6s) is replaced, the job exits
//     0 with the failure-free result, and the cut-off process ends by
//     itself with exit 74 soon after the bound.
//   - TestPartitionHealedAfterReplacement: a rank and an idle spare cut
//     off until both were declared failed, then healed: both exit 77
//     (fenced) within seconds of the heal, long before the cut-off bound.
//   - TestNobodyServesRendezvous: a process started by hand with nobody
//     serving the rendezvous exits 69 after PGAS_RENDEZVOUS_TIMEOUT.
//   - TestLauncherKilled: SIGKILL of gaspirun; the ranks finish on their
//     own and write correct result files, and every process ends.
//   - TestRespawnTeraSortFiveKills, TestRespawnWordCountFiveKills: the
//     refilling pool (gaspirun --respawn) under the key-value
//     applications, 4 ranks and 1 spare, and five SIGKILLs by pid of the
//     current holders of ranks 1, 2, 3, 1, 2, each once the last rank
//     lost was taken over, rank 0 recovered and the job checkpointed
//     since (TeraSort's rank 0 says so; WordCount's process 0 counts it
//     in gaspirun --metrics). The first rank lost goes to the job's
//     spare, every later one to a different replacement, the
//     replacements having new ids (5, 6, ... in turn); exit 0,
//     gaspirun's summary counts the five kills and every other process
//     exited 0; TeraSort's output validates with the input's checksum,
//     WordCount's result line and part files equal a failure-free run's.
//     A job that stops progressing is asked for its goroutines (SIGQUIT)
//     before the test fails, so that its output shows where it waits.
//
// This tier covers membership: the kill of one rank, of two in turn and
// past the spares (exit 75) are its own, checked by epochs, holders and
// false positives. test/kmtier covers the same kills seen by an
// application (checkpoints restored, the failure-free K-means line) and
// keeps only the single kill (TestKillRank) and its variants.
//
// A failure confirmed for a process the test did not touch is a false
// positive: the tests fail and name it. On a machine too loaded for the
// default detector timeouts, FTTIER_FTSTEP_ARGS passes extra ftstep flags
// to every job, e.g. FTTIER_FTSTEP_ARGS="-suspicion 1s -probe 500ms".
//
// The tests need Linux (/proc) and are skipped with -short.
package fttier
