// Package bench is the logic of cmd/gaspibench: micro-benchmarks of a pgas
// runtime (write and read bandwidth, write+notify ping-pong, barrier and
// allreduce latency) and the plain TCP baselines they are compared with.
//
//	opts, err := bench.ParseFlags(os.Args[1:], os.Stderr) // or DefaultConfig()
//	rt, err := job.Init(ctx, job.Options{Runtime: &base}) // base.SpinWait = opts.Config.Spin
//	rep, err := bench.Run(ctx, rt, opts.Config, os.Stdout) // on every rank
//
// Run is SPMD: every rank calls it with the same Config (it checks so with
// a Bcast of a fingerprint and an Allreduce of the verdict, so that all
// ranks stop together when one differs). Point-to-point tests run between
// ranks 0 and 1 while the others wait at a barrier; collectives use every
// rank. The number of timed iterations of each measurement is decided by
// rank 0 from its warm-up and given to the participants chunk by chunk
// with Bcasts, so that every rank runs the same count and rank 0 can stop a
// measurement that overruns its time cap. A pgas figure and its raw
// baseline take turns chunk by chunk, so both see the same machine load
// even when it drifts (this machine is shared; the load does drift).
//
// Resources: Run creates segment 1 (twice the largest message on ranks 0
// and 1, 4 KiB elsewhere), group tag 1 (ranks 0 and 1) and, with the raw
// test, one TCP listener on rank 1 and one connection; it releases them
// before it returns. It uses queue 0 and notifications 1 and 2 of segment
// 1. The runtime must not be used by anything else during Run.
//
// Concurrency: Run uses the calling goroutine only; the raw connection is
// closed by Run, or by ctx ending, which unblocks its reads and writes.
package bench
