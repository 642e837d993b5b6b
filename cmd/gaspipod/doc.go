// Command gaspipod is the entrypoint of a gaspigo process in a Kubernetes
// Indexed Job (deploy/kubernetes):
//
//	gaspipod [--] PROGRAM [ARGS...]
//
// It decides whether this pod is one of the job's own processes or the
// replacement of a lost one, and runs PROGRAM accordingly.
//
// A gaspigo job's processes have fixed ids, JOB_COMPLETION_INDEX in an
// Indexed Job. When a pod is lost after the job started (its node failed,
// it was evicted or deleted, its process was SIGKILLed or fenced), a
// spare takes over its rank, and the Job controller starts a new pod with
// the same index. That pod cannot be process INDEX again (ids are never
// reused: fencing keys on them), but it can refill the spare pool: gaspipod
// runs PROGRAM with PGAS_JOIN=1, and the process joins the running job as
// a new spare with an id the rendezvous gives it (docs/design.md §5.2.1),
// taking the next rank that is lost. The pod ends when the job does, with
// the program's exit code, so the index succeeds with the job.
//
// It recognises a replacement pod by the Job controller's per-index
// failure counts, which the manifest passes in through the downward API:
//
//	GASPIPOD_INDEX_FAILURES          metadata.annotations['batch.kubernetes.io/job-index-failure-count']
//	GASPIPOD_INDEX_IGNORED_FAILURES  metadata.annotations['batch.kubernetes.io/job-index-ignored-failure-count']
//
// Both are set by the controller on the pods of a Job with
// backoffLimitPerIndex; empty or unset means zero.
//
//   - Both zero: one of the job's own processes. gaspipod replaces itself
//     with PROGRAM (execve: same pid, same environment, PROGRAM's exit code
//     is the container's).
//   - Either above zero: a replacement. gaspipod prints one line naming its
//     index and the counts, runs PROGRAM as its child with PGAS_JOIN=1
//     added to the environment, passes on SIGTERM, SIGINT, SIGHUP and
//     SIGQUIT (the kubelet's SIGTERM when the pod is deleted), and exits
//     with PROGRAM's code, or 128+N when a signal N killed it. A joiner
//     that finds no job to join exits 69; that pod is not needed (the job
//     has ended, or its rendezvous went with pod 0, which hosts it), and
//     gaspipod says so and exits 0, so that the index succeeds.
//
// A pod lost before every process had registered at the rendezvous cannot
// be replaced this way, and the job does not start
// (PGAS_RENDEZVOUS_TIMEOUT and the Job's activeDeadlineSeconds bound that
// wait).
//
// Exit codes: PROGRAM's own (128+N for a replacement's PROGRAM killed by
// signal N); 0 for a replacement that found no job to join; 2 for bad
// arguments or a malformed count, with a message saying what to fix; 127
// when PROGRAM cannot be executed.
package main
