// Package chaos is the chaos suite: seeded fault schedules applied to real
// jobs (gaspirun, real processes, real sockets, real signals), with
// invariants checked after every schedule.
//
// A seed alone decides a schedule (Draw): the workload (fault-tolerant
// K-means, or TeraSort for one seed in four), the number of spares, the
// host layout, and one to three faults (a respawn schedule: three or
// four kills) with their targets, trigger points and durations. The
// faults:
//
//   - SIGKILL of a rank, of an idle spare, of the Raft leader's process;
//   - a kill inside a checkpoint's commit, and a kill of the holder of a
//     recovered rank's rebuilt mirror (K-means --inject);
//   - a second kill while the first recovery runs;
//   - SIGSTOP/SIGCONT pauses shorter and longer than failure detection;
//   - a slow link, a lossy link and a partition of one process, through
//     internal/netfault (PGAS_NETFAULTS: every connection of the job is
//     wrapped, and the harness rewrites the rules file; the rings of the
//     shared-memory transport and the collectives in shared memory,
//     pgas.Config.Faults, are held alike, else a partitioned process went
//     on meeting its host's members in memory and a K-means job ended
//     before the partition was noticed: "the job ended first");
//   - the loss of a whole host label (two ranks at once);
//   - corruption or truncation of a disk-level checkpoint file, then
//     gaspirun --resume;
//   - faults of the same-host fast path, on K-means with --inject
//     store:... (a rank storing a record and a notification into its
//     right neighbour's memory every half millisecond): a partition of
//     the writer (partition-writer), declared failed while it runs and
//     stores; stores with contexts that have ended or end during the call
//     to a waiting neighbour (cancel-writer); a SIGKILL of the writer
//     between a store that found a parked waiter and its wake-up frame
//     (kill-store-wake: the runtime's fault point, PGAS_FAULTPOINT,
//     internal/faultpoint). Every rank checks after each iteration that
//     nothing of an older epoch changes its memory once it has looked in
//     its current epoch (the run fails otherwise), and a waiter asleep
//     20 s with its notification set fails it too.
//   - more losses than spares, spaced (respawn-spaced): gaspirun --respawn,
//     one spare, and three or four SIGKILLs of rank holders from outside.
//     gaspirun replaces each lost process by a new one that joins the
//     running job as a spare with a new process id (from ranks+spares up,
//     never reused). Before each kill the harness waits until as many
//     processes joined the job as it lost (the runtime's "a process
//     joined the job" records) and for the recoveries to settle (a join
//     is a new epoch: rank 0 recovers through it as through a failure),
//     so that each kill finds the replacement of the one before it idle;
//     the job must succeed. A kill counts as applied only if its signal
//     reached a live process and, for the n-th kill beyond the spare,
//     gaspirun printed n respawn lines; a sweep whose respawn schedules
//     never lost more processes than spares with the pool refilled fails.
//     The harness follows rank holders and idle spares by process id,
//     whatever the id: from each view line's own rank, its moves, and
//     gaspirun's "process P now holds rank R (epoch E)".
//
// Faults trigger on logical clocks, so that the same seed hits the same
// point of the computation and a fault lands inside the job however
// fast a load makes it run. K-means faults trigger on rank 0's iteration
// lines. TeraSort faults trigger on rank 0's progress lines, in per mille
// of the job (tsProgress): the sending is the first half ("sort: sent S of
// N records", at each checkpoint), the writing of its part the second
// ("sort: wrote W records of its part", as often); a point between a
// quarter and three quarters of the job falls in the second half of the
// sending or the first half of the writing. Faults that last (links,
// partitions, long pauses) end early at the next fault's iteration (a pause
// beyond detection or a partition only once the membership declared its
// process failed), so that a fault's real-time duration cannot outlast
// the rest of the job and leave the faults after it unapplied. A pause
// beyond detection and a partition last their duration times the factor
// by which the membership stretched its timeouts on an oversubscribed
// host (its "membership timeouts stretched" record), and count as applied
// only once the membership declared their process failed.
//
// The invariants (Violations), after every schedule:
//
//   - the result equals the failure-free reference (K-means: the centroid
//     checksum line; TeraSort: terasort validate's order check and its
//     count and checksum, equal to the input's), or, where the schedule
//     has more losses than spares, the job ends with exit 75 (spares
//     exhausted; without spares, the first lost process's code: 137 when
//     it was killed, 77 or 74 when it was paused or partitioned and
//     resumed to find itself declared failed or cut off) and no result;
//   - no two processes applied a view in which they held the same rank in
//     the same epoch, and all processes saw the same rank table per epoch
//     (the runtime's "view applied" lines);
//   - no frame from a stale epoch was applied (the runtime counts any that
//     finishes applying after its program acknowledged a newer epoch, and
//     logs the count when it closes);
//   - processes that joined the running job (replacements) got new ids:
//     at or above the job's first processes' (ranks plus spares), none
//     twice, since the membership fences processes by id;
//   - no process of the job, replacements included, is left running
//     after gaspirun ends;
//   - the job ended by itself: a hang is a violation.
//
// On a violation the test prints the seed, the schedule, the violations,
// the command that replays it, and the job's last output lines.
//
// Tiers. The normal test command runs a fixed sample of seeds (a couple of
// minutes). The long sweep and replays:
//
//	go test ./test/chaos -run TestChaos -chaos.schedules=500 -timeout 0 -chaos.summary=/tmp/chaos.md
//	go test ./test/chaos -run '^TestChaos$/kmeans/seed=17$' -chaos.seeds=17 -v
//
// -chaos.list prints the schedules of the seeds instead of running them
// (to find the seeds that draw a kind), with the -race setting of the
// run it is for (K-means has fewer iterations under the race detector):
//
//	go test -short ./test/chaos -run 'TestChaos$' -chaos.list -chaos.schedules=200 -v
//
// The sweep prints a summary table: schedules, recoveries (epochs after
// the first: failures, and joins with --respawn), median and p99
// recovery time (fault to the next completed K-means iteration, or to the
// last rank's recovery for TeraSort), wrong answers, hangs and leftover
// processes; what respawn schedules did to refill their pools
// (replacements started, joined, promoted to a rank); and, per fault
// kind, how many faults its schedules drew, how many were applied and
// why the others were not (the job ended first, no idle spare left,
// ...). A fault counts as applied only on evidence: the
// signal reached a live process, the target process logged the netfault
// rule in force, K-means printed the kill it injected, the membership
// declared the process of a long pause or a partition failed; a
// partition-writer also only if its writer's count lines show direct
// stores after the rule was in force, a cancel-writer only if stores with
// an ended context returned nil and sent wake-ups, a kill-store-wake only
// on the fault point's line. A sweep fails when
// a kind it drew was applied in none of its schedules: it did not test it.
// Each schedule logs what became of each of its faults.
//
// The harness reads what the processes report from their log records by
// key (ParseRecord: slog's text or JSON form), never by matching a
// formatted line: the Raft leader a kill-leader fault aims at is the proc
// of the newest "spares: became raft leader" record, forgotten once that
// process is killed or declared failed.
// # Multi-host mode
//
// TestChaosHosts draws host faults from a seed (DrawHosts) and applies
// them to K-means on three simulated hosts (internal/testkit/simhost: network
// namespaces on a bridge), launched with the bare PGAS_* contract
// (internal/testkit/mhjob): a blip (a silent cut shorter than detection), a host
// cut off and healed, cut off for good, unplugged (its own link down)
// and plugged back, a host crash (SIGKILL of everything on it) and the
// crash of the rendezvous host. Each schedule has one host loss, after an
// optional blip. HostViolations adds to the invariants above that every
// process the harness did not kill ended by itself within 30 s of the
// job's end with a documented code (0, 75, 77, 74). It needs root
// and iproute2 and skips without them. The sample runs in the test
// command; the sweep and a replay:
//
//	go test ./test/chaos -run TestChaosHosts -chaos.hostschedules=100 -timeout 0 -chaos.hostsummary=/tmp/hosts.md
//	go test ./test/chaos -run 'TestChaosHosts/seed=13$' -chaos.hostseeds=13 -v
//
// # Scale mode
//
// TestChaosScale runs DrawScale's schedules (ScaleKinds: kills of ranks,
// spares and the Raft leader, a kill inside a commit or during a
// recovery, short and long pauses) on K-means of -chaos.scale ranks (128
// by default), with the programs built without the race detector. Its
// reference is the same job without faults, which must go through no new
// epoch (no false failure). The sample runs in the test command; the
// sweep and a replay:
//
//	go test ./test/chaos -run TestChaosScale -chaos.scale=256 -chaos.scaleschedules=20 -timeout 0 -v
//	go test ./test/chaos -run 'TestChaosScale/seed=5$' -chaos.scale=128 -chaos.scaleseeds=5 -v
package chaos
