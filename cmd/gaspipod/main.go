package main

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"

	"github.com/gaspigo/gaspigo/internal/buildinfo"
)

// Names of the variables gaspipod reads.
const (
	varFailures        = "GASPIPOD_INDEX_FAILURES"
	varIgnoredFailures = "GASPIPOD_INDEX_IGNORED_FAILURES"
	varIndex           = "JOB_COMPLETION_INDEX"
)

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
	if !d.run {
		fmt.Fprintln(os.Stderr, "gaspipod:", d.why)
		return 0
	}
	path, err := exec.LookPath(args[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "gaspipod: cannot run %s: %v\n", args[0], err)
		return 127
	}
	err = syscall.Exec(path, args, os.Environ())
	fmt.Fprintf(os.Stderr, "gaspipod: cannot run %s: %v\n", path, err)
	return 127
}

// decision says whether this pod runs the program, and why not.
type decision struct {
	run bool
	why string
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
		return decision{run: true}, nil
	}
	index, _ := lookup(varIndex)
	if index = strings.TrimSpace(index); index == "" {
		index = "?"
	}
	return decision{why: fmt.Sprintf("index %s was started before (%d failed, %d ignored pods): a spare holds its rank, or its job has ended; this pod is not needed and exits 0",
		index, failures, ignored)}, nil
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
