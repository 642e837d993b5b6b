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
	clitest.Usage(t, clitest.Command{Name: "wordcount", Run: run, Status: kvjob.ExitCode}, []clitest.Case{
		{Want: "wordcount: give a command: run, ref, gen (--help says more)"},
		{Args: []string{"count"}, Want: `wordcount: unknown command "count": give run, ref, gen (--help says more)`},
		{Args: []string{"run", "--generate", "x"}, Want: "wordcount: --generate x: give a whole number"},
		{Args: []string{"run", "--bogus"}, Want: "wordcount: --bogus: no such flag (wordcount run --help lists them)"},
		{Args: []string{"run", "--generate", "10", "--inject", "bogus"}, Want: `wordcount: --inject "bogus": only kill injections exist (want kill:rank=R,at=N or kill:rank=R,phase=ckpt-new)`},
		{Args: []string{"ref", "--generate", "10", "extra"}, Want: `wordcount: unexpected argument "extra": flags only`},
	})
}
