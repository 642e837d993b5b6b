// Command gaspibench measures the pgas runtime in the manner of the OSU
// micro-benchmarks, and compares it with plain Go TCP between the same two
// processes in the same run.
//
//	go build -o bin/ ./cmd/gaspirun ./cmd/gaspibench
//	bin/gaspirun -n 2 -- bin/gaspibench                 # everything, 12-15 s on 2 cores
//	bin/gaspirun -n 4 -- bin/gaspibench --tests barrier,allreduce
//	bin/gaspirun -n 2 -- bin/gaspibench --tests bw,raw --sizes 64K..4M --csv --out bw.csv
//	bin/gaspirun -n 2 -- bin/gaspibench --tests bw,flush,barrier --sizes 8 --poll-spin 50us
//
// It must run under gaspirun (or another launcher that sets the
// environment of cmd/gaspirun). Every rank gets the same flags; rank 0
// prints the tables (prefixed "[r0] " by gaspirun; --out FILE writes an
// unprefixed copy), the other ranks take part.
//
// # What is measured
//
//   - bw: rank 0 posts a window of Writes of one size to rank 1, then Waits
//     (remote completion), over and over; MiB/s.
//   - rbw: the same with Reads from rank 1.
//   - lat: write+notify ping-pong. Rank 0 WriteNotifies to rank 1, which
//     waits with NotifyWaitSome, resets, and answers the same way. Reported
//     as round trip (RTT) and one-way (RTT/2), median and p99.
//   - flush: write+Wait round trip, the counterpart of MPI's put+flush.
//     Rank 0 Writes one message of each --lat-sizes to rank 1 and Waits
//     for its remote completion, one at a time; median and p99.
//   - barrier, allreduce: one call at a time over every rank (allreduce is a
//     float64 sum of --coll-sizes bytes), median and p99 of rank 0's calls,
//     and the mean of the slowest rank.
//   - raw: the baselines, between ranks 0 and 1 over a plain net.Conn whose
//     address travels through the runtime (a Bcast): a stream of the same
//     messages and the same total bytes as bw, and a ping-pong of the
//     --lat-sizes. Each bandwidth and latency row shows pgas/raw.
//
// Written data, read data and allreduce results are checked; a mismatch
// fails the run. The report ends with the runtime's acceptance targets
// (issue 2) and the load average before and after, since figures from a
// shared machine mean little without it.
//
// # Run time
//
// Each measurement runs --warmup untimed iterations, then at least --iters
// timed ones and enough to last --min-time at the warm-up's pace, in
// chunks; pgas and raw take turns chunk by chunk, so that their ratio is
// not skewed by load that comes and goes. A measurement that overruns 10 x
// --min-time (at least 2 s) is cut short and its count is starred. The
// defaults (20 sizes from 8 B to 4 MiB, 3 ping-pong sizes, 3 allreduce
// sizes, 200 ms each) take 12-15 s with -n 2 or -n 4 on 2 cores.
// --timeout bounds the whole run.
//
// Exit status: 0 on success, 2 for bad flags or no job to join, 1 when a
// measurement fails (a lost rank, a data mismatch, the timeout).
//
// The logic lives in cmd/gaspibench/internal/bench; this package turns flags
// into a bench.Config, joins the job and calls bench.Run.
package main
