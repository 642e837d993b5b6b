package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gaspigo/gaspigo/internal/buildinfo"
)

// Names of the variables gaspipod reads and sets.
const (
	varFailures        = "GASPIPOD_INDEX_FAILURES"
	varIgnoredFailures = "GASPIPOD_INDEX_IGNORED_FAILURES"
	varIndex           = "JOB_COMPLETION_INDEX"
	varJoin            = "PGAS_JOIN"
	varRVTimeout       = "PGAS_RENDEZVOUS_TIMEOUT"
)

// joinWait caps a replacement's wait for the rendezvous
// (PGAS_RENDEZVOUS_TIMEOUT, which the manifest sets to minutes for pods
// waiting to be scheduled): a running job's rendezvous answers within a
// second, and one that does not is gone with pod 0, so the pod, not
// needed, should end soon rather than hold the Job open.
const joinWait = 30 * time.Second

// exitCannotJoin is a joiner's exit code when it found no running job to
// join (job.ExitNoRendezvous; not imported, to keep this entrypoint free
// of the runtime).
const exitCannotJoin = 69

// forwarded are the signals a replacement pod passes on to its program:
// the kubelet's SIGTERM when the pod is deleted, and a terminal's.
var forwarded = []os.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT}

func main() { os.Exit(run(os.Args[1:], os.LookupEnv)) }

// run returns an exit code, or does not return when it executes the
// program.
func run(args []string, lookup func(string) (string, bool)) int {
	if len(args) == 1 && (args[0] == "--version" || args[0] == "-version") {
		fmt.Println(buildinfo.Version("gaspipod"))
		return 0
	}
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fmt.Fprintln(os.Stderr, "gaspipod: usage: gaspipod [--] PROGRAM [ARGS...]; give the program to run, e.g. gaspipod -- /kmeans --generate 1000000")
		return 2
	}
	d, err := decide(lookup)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gaspipod:", err)
		return 2
	}
	path, err := exec.LookPath(args[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "gaspipod: cannot run %s: %v\n", args[0], err)
		return 127
	}
	if d.join {
		fmt.Fprintln(os.Stderr, "gaspipod:", d.why)
		return join(path, args)
	}
	if os.Getpid() == 1 {
		// The container's first process: the kernel does not kill the
		// first process of a PID namespace with a signal's default
		// action. A program put in its place that does not catch the
		// kubelet's SIGTERM would not die of it: a Go program's runtime
		// then exits 2, which the Job's podFailurePolicy takes for bad
		// flags and fails the Job on a deleted pod. Run it as a child
		// instead, and pass signals on: it dies of them, and gaspipod
		// exits 128+N as a shell reports it.
		return supervise(path, args, os.Environ())
	}
	err = syscall.Exec(path, args, os.Environ())
	fmt.Fprintf(os.Stderr, "gaspipod: cannot run %s: %v\n", path, err)
	return 127
}

// decision says whether this pod is one of the job's own processes, or
// the Job controller's replacement of a lost one, which joins the running
// job (why says so).
type decision struct {
	join bool
	why  string
}

// decide reads the per-index failure counts.
func decide(lookup func(string) (string, bool)) (decision, error) {
	failures, err := count(lookup, varFailures)
	if err != nil {
		return decision{}, err
	}
	ignored, err := count(lookup, varIgnoredFailures)
	if err != nil {
		return decision{}, err
	}
	if failures == 0 && ignored == 0 {
		return decision{}, nil
	}
	index, _ := lookup(varIndex)
	if index = strings.TrimSpace(index); index == "" {
		index = "?"
	}
	return decision{join: true, why: fmt.Sprintf("index %s was started before (%d failed, %d ignored pods): a spare holds its rank; this pod joins the running job as a new spare (%s=1)",
		index, failures, ignored, varJoin)}, nil
}

// join runs the program as a joiner (PGAS_JOIN=1, with at most joinWait
// for the rendezvous) under supervise. A joiner that found no job to join
// (the job ended, or its rendezvous went with pod 0) is not needed: that
// is exit 0, so the index succeeds.
func join(path string, args []string) int {
	code := supervise(path, args, joinerEnv(os.Environ()))
	if code == exitCannotJoin {
		fmt.Fprintf(os.Stderr, "gaspipod: %s found no running job to join (exit %d: it has ended, or its rendezvous went with pod 0); this pod is not needed and exits 0\n", path, code)
		return 0
	}
	return code
}

// supervise runs the program in a child process with env, passing on the
// signals in forwarded, and returns its exit code as a shell reports it
// (128+N for a death by signal N, so that the Job's podFailurePolicy sees
// 137 or 143 as it would for a program that is the container's first
// process).
func supervise(path string, args, env []string) int {
	cmd := exec.Command(path, args[1:]...)
	cmd.Args = args
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "gaspipod: cannot run %s: %v\n", path, err)
		return 127
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sigs:
				cmd.Process.Signal(s)
			case <-done:
				return
			}
		}
	}()
	err := cmd.Wait()
	close(done)
	return exitCode(err)
}

// joinerEnv is environ for a replacement's program: PGAS_JOIN=1, and
// PGAS_RENDEZVOUS_TIMEOUT at most joinWait.
func joinerEnv(environ []string) []string {
	out := make([]string, 0, len(environ)+2)
	wait := joinWait
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case varJoin:
			continue
		case varRVTimeout:
			d, err := time.ParseDuration(strings.TrimSpace(v))
			if n, nerr := strconv.Atoi(strings.TrimSpace(v)); err != nil && nerr == nil {
				d, err = time.Duration(n)*time.Second, nil
			}
			if err == nil && d > 0 && d < wait {
				wait = d
			}
			continue
		}
		out = append(out, kv)
	}
	return append(out, varJoin+"=1", varRVTimeout+"="+wait.String())
}

// exitCode is err's exit status as a shell reports it.
func exitCode(err error) int {
	var ee *exec.ExitError
	if err == nil {
		return 0
	}
	if !errors.As(err, &ee) {
		fmt.Fprintf(os.Stderr, "gaspipod: %v\n", err)
		return 1
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ee.ExitCode()
}

func count(lookup func(string) (string, bool), name string) (int, error) {
	v, _ := lookup(name)
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%s=%q is not a count of pods; set it from the pod's annotation (valueFrom.fieldRef.fieldPath: metadata.annotations['batch.kubernetes.io/job-index-failure-count'] or ...-ignored-failure-count), or leave it unset", name, v)
	}
	return n, nil
}
