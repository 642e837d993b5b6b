// Package kmeans is the fault-tolerant K-means app's distributed driver:
// Job (NewJob, SetupCheckpoints, Run, Finalize) runs Lloyd's algorithm
// over the ranks of a pgas job, one or more logical shards per rank, with
// the numeric core of package kernel (apps/kmeans/kernel: the assignment
// kernel, the update, the seeding, the data generator) and the point files
// of package points (apps/kmeans/points). Its recovery loop is package
// apps/internal/recovery's, shared with TeraSort. A failure during a
// collective step of the setup (the starting centroids, ckpt.New, a resume
// from disk) goes through the same loop when Run starts (Job.SetupFailed,
// Job.Joining; see setup.go). Failures to inject (Options.Injects) are
// chosen by the driver, collectively where needed (kill:leader,
// kill:mirror-of), and carried out by the command's Options.Kill hook: the
// library never kills a process.
//
// # Determinism
//
// The job combines the partials of its logical shards (Options.Shards, or
// one per rank) in shard order, each shard with its own kernel.Kernel, so
// a job with Shards set gives the same bits on any number of ranks (see
// package kernel, "Determinism", for a shard's own result).
//
// # Checkpoints
//
// The checkpointed state is a header (the iteration, the SSE and what a
// resume checks: ckptstate.go), the centroids and the home shards'
// assignments (the kernels' own memory, registered in place;
// kernel.Kernel.UseAssignments packs many shards into one region). The
// pruning bounds are derived state and are not checkpointed
// (package kernel, "Exact pruning"). A job may resume from a disk
// checkpoint (ResumeFrom), on another number of ranks when it has logical
// shards.
package kmeans
