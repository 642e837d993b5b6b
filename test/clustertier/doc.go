// Package clustertier tests gaspigo under the cluster launchers it ships
// files for: a Kubernetes Indexed Job (deploy/kubernetes) on simulated
// hosts, and a real Slurm (deploy/slurm) on this machine. It holds tests
// only.
//
// It is a module of its own (go.mod here, the root module replaced by
// ../..), so that k8s.io/api and the YAML parser stay out of the library's
// go.mod; the root's go test ./... leaves it out. Run it from here:
//
//	cd test/clustertier && go test ./...
//
// TestMain builds gaspirun, gaspipod and kmeans with deploy/build.sh, the
// build the container image runs, and TestImageBinariesAreStatic checks
// that they are static. Every job is K-means, 200,000 points, 40
// iterations, 4 ranks and 2 spares; its answer must be the failure-free
// checksum of the same job under gaspirun.
//
//   - The manifest is deploy/kubernetes rendered: its kustomization.yaml
//     through a Go model of the kustomize features it uses (render_test.go,
//     go.yaml.in/yaml/v3; kustomize's own module is too large a
//     dependency), which TestKustomizeSizeInOnePlace compares with
//     kubectl kustomize where kubectl is installed, for several sizes set
//     in the one place. TestManifestSchema decodes it, and
//     kmeans-job.yaml alone, strictly into k8s.io/api's Job and Service
//     (an unknown, misspelt or mistyped field fails);
//     TestManifestPodSecurityRestricted checks the Pod Security
//     "restricted" profile, ttlSecondsAfterFinished and the metrics port;
//     TestTokenNotOnCommandLines that no document passes the token to
//     kubectl as an argument.
//   - TestManifestShape checks the manifest against the environment
//     contract and the Job rules it relies on: PGAS_NPROCS equal to
//     completions, the rendezvous at pod 0's name under the headless
//     Service, the token from a Secret only, and what its
//     podFailurePolicy does with each exit code.
//   - TestKubernetesPodLost runs the Job's pods on three simulated hosts
//     (internal/testkit/simhost) with exactly the environment the manifest gives
//     them, loses one node (every process on it SIGKILLed after iteration
//     12: node2, or node1 with process 0 and the rendezvous), and plays the
//     Job controller's part: each lost pod's exit must take a retry under
//     the manifest's podFailurePolicy, and the retry pod joins the running
//     job (node2) or, with the rendezvous gone (node1), ends with 0.
//   - TestKubernetesPodDeleted deletes the pods of ranks 1, 2 and 3 in
//     turn (SIGTERM, as the kubelet does), and retries each: the retry
//     joins the running job as a spare (gaspipod, PGAS_JOIN=1), so the
//     third loss, beyond the two spares, is covered by a pod that joined;
//     the deleted pods exit 143, which the policy counts, and the answer
//     is the failure-free checksum.
//   - TestSlurm starts a one-machine Slurm cluster with
//     deploy/slurm/local-cluster.sh (in a state directory of its own, on
//     free ports) and runs the job under srun with a SIGKILLed task and a
//     spare, with PGAS_RENDEZVOUS given as the node's name, which resolves
//     to 127.0.1.1.
//
// Skips: without Linux or with -short; without root and iproute2 (the
// simulated hosts); without Debian's slurmctld, slurmd, slurm-client and
// munge packages, or without root (Slurm). The manifest's tests need
// nothing but Go.
package clustertier
