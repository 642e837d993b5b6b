// Package clitest checks, for the tests of the applications' commands,
// that a usage error is one line and exit status 2, and that --help is
// the usage on stdout and exit status 0 (package cli's contract).
package clitest

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
)

// Case is a command line and the one line it must print on stderr.
type Case struct {
	Args []string
	Want string
}

// Command runs a command line (the run function of kvjob.Main) and
// Status turns its error into the exit status, printing it.
type Command struct {
	Name   string
	Run    func(ctx context.Context, args []string, stdout, stderr io.Writer) error
	Status func(name string, err error, stderr io.Writer) int
}

// Usage checks every case: exit status 2, its line alone on stderr,
// nothing on stdout. Then --help: status 0, nothing on stderr, and on
// stdout the usage, which starts with "usage: NAME".
func Usage(t *testing.T, c Command, cases []Case) {
	t.Helper()
	for _, k := range cases {
		var so, se bytes.Buffer
		code := c.Status(c.Name, c.Run(context.Background(), k.Args, &so, &se), &se)
		if code != 2 || se.String() != k.Want+"\n" || so.Len() > 0 {
			t.Errorf("%s %q: exit %d, stdout %q, stderr %q; want 2 and %q", c.Name, k.Args, code, so.String(), se.String(), k.Want)
		}
	}
	var so, se bytes.Buffer
	code := c.Status(c.Name, c.Run(context.Background(), []string{"--help"}, &so, &se), &se)
	if code != 0 || se.Len() > 0 || !strings.HasPrefix(so.String(), "usage: "+c.Name) {
		t.Errorf("%s --help: exit %d, stdout %q, stderr %q; want the usage on stdout and 0", c.Name, code, so.String(), se.String())
	}
}
