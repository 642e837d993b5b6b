package main

import (
	"testing"

	"github.com/gaspigo/gaspigo/apps/internal/cli/clitest"
	"github.com/gaspigo/gaspigo/apps/internal/kvjob"
)

// A bad command, flag or value is said once, on one line naming it,
// without the list of flags (every rank of a job prints the same line,
// which gaspirun collapses), and is exit status 2; --help is exit 0.
func TestUsageErrors(t *testing.T) {
	clitest.Usage(t, clitest.Command{Name: "topk", Run: run, Status: kvjob.ExitCode}, []clitest.Case{
		{Want: "topk: give a command: run, ref (--help says more)"},
		{Args: []string{"run", "--windows", "0", "--window-records", "10", "--out", "x"}, Want: "topk: --windows 0: want at least 1"},
		{Args: []string{"run", "--window-span", "10"}, Want: "topk: --window-span 10: give a duration such as 500ms, 30s or 2m"},
		{Args: []string{"ref", "--inject", "kill:rank=1,record=5"}, Want: "topk: --inject: no such flag (topk ref --help lists them)"},
		{Args: []string{"run", "--windows", "1", "--window-records", "10", "--out", "x", "--inject", "kill:rank=1"}, Want: `topk: --inject "kill:rank=1": give rank=R and record=N (or phase=ckpt-new) (want kill:rank=R,record=N or kill:rank=R,phase=ckpt-new)`},
	})
}
