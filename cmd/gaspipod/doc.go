// Command gaspipod is the entrypoint of a gaspigo process in a Kubernetes
// Indexed Job (deploy/kubernetes):
//
//	gaspipod [--] PROGRAM [ARGS...]
//
// It decides whether this pod should run PROGRAM, and if so replaces itself
// with it (execve: same pid, same environment, PROGRAM's exit code is the
// container's).
//
// A gaspigo job's processes have fixed ids, JOB_COMPLETION_INDEX in an
// Indexed Job. When a pod is lost after the job started (its node failed,
// it was evicted, its process was SIGKILLed or fenced), a spare takes over
// its rank; the Job controller, though, starts a new pod with the same
// index. That pod is not needed: the rendezvous refuses a second process
// with a taken id, and if it could join it would have no rank to hold.
// gaspipod ends such a pod at once with exit code 0, so that the index
// counts as succeeded and the Job completes once the job's own processes
// have (rather than failing for an index that never succeeded).
//
// It recognises a replacement pod by the Job controller's per-index
// failure counts, which the manifest passes in through the downward API:
//
//	GASPIPOD_INDEX_FAILURES          metadata.annotations['batch.kubernetes.io/job-index-failure-count']
//	GASPIPOD_INDEX_IGNORED_FAILURES  metadata.annotations['batch.kubernetes.io/job-index-ignored-failure-count']
//
// Both are set by the controller on the pods of a Job with
// backoffLimitPerIndex; empty or unset means zero. A pod with either count
// above zero prints one line naming its index and the counts and exits 0.
// A pod with both zero runs PROGRAM.
//
// This holds only while the job runs: a pod lost before every process had
// registered at the rendezvous cannot be replaced this way, and the job
// does not start (PGAS_RENDEZVOUS_TIMEOUT and the Job's
// activeDeadlineSeconds bound that wait).
//
// Exit codes: PROGRAM's own; 0 for a replacement pod; 2 for bad arguments
// or a malformed count, with a message saying what to fix; 127 when
// PROGRAM cannot be executed.
package main
