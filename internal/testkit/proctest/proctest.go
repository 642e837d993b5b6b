// Package proctest builds the programs that the real-process test tiers
// and benchmark tools run under gaspirun.
//
//	dir, cleanup, err := proctest.Build("fttier", proctest.Race, "./cmd/gaspirun", "./test/fttier/testprog/ftstep")
//	defer cleanup()
//	gaspirun := filepath.Join(dir, "gaspirun")
//
// It also holds the one job runner of the tiers and benchmarks, Job: it
// starts a job's processes (gaspirun, or the processes of a job started
// without it), records every output line with its time and process, and
// lets a test wait, with a bound and woken at each line (never polling),
// for a line (WaitLine), a condition over what it read (WaitCond, with
// JobConfig.OnLine building that reading), or the end (Wait, WaitEnd),
// then read the exit status (ExitCode, Proc.Exit). Around it: Procs finds
// the job's processes by its PGAS_JOB_ID, and Leftovers and WaitGone check
// that every process ended by itself.
package proctest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Build compiles the main packages pkgs (module-relative, like
// "./cmd/gaspirun") into a new temporary directory named after tier, with
// the race detector when race is set, and returns the directory and a
// function that removes it. Errors carry the compiler's output.
func Build(tier string, race bool, pkgs ...string) (dir string, cleanup func(), err error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", nil, err
	}
	dir, err = os.MkdirTemp("", tier+"-")
	if err != nil {
		return "", nil, err
	}
	cleanup = func() { os.RemoveAll(dir) }
	if err := BuildInto(root, dir, race, pkgs...); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("%s: %w", tier, err)
	}
	return dir, cleanup, nil
}

// BuildInto compiles the main packages pkgs of the module at root into dir.
func BuildInto(root, dir string, race bool, pkgs ...string) error {
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	if race {
		args = append(args, "-race")
	}
	args = append(args, pkgs...)
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

// ModuleRoot finds the directory of the gaspigo module's go.mod above the
// working directory, past the go.mod of a nested module (test/clustertier
// is one: its tests build the root module's programs).
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && isRootModule(b) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod of " + modulePath + " above the working directory: run from inside the module")
		}
		dir = parent
	}
}

// modulePath is the root module's path.
const modulePath = "github.com/gaspigo/gaspigo"

// isRootModule reports whether the go.mod file gomod declares modulePath.
func isRootModule(gomod []byte) bool {
	for _, l := range strings.Split(string(gomod), "\n") {
		if p, ok := strings.CutPrefix(strings.TrimSpace(l), "module "); ok {
			return strings.Trim(strings.TrimSpace(p), `"`) == modulePath
		}
	}
	return false
}
