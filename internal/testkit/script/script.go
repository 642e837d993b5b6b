// Package script runs scenario scripts against golden traces: the tests
// of the pure protocol cores (health's detector core, spares' State) are
// written as scripts of commands, one a line, whose output (the trace) is
// compared with a golden file next to the script.
//
// A test names its scripts and gives each a fresh Interpreter:
//
//	func TestScripts(t *testing.T) {
//		script.Test(t, "testdata/*.script", func(t *testing.T) script.Interpreter { return &run{t: t} })
//	}
//
// The trace holds the script's comments and blank lines as they are, each
// command as "> command", then whatever the interpreter wrote for it.
// With go test's -rewrite flag (registered by this package) the golden
// files are written from the current traces instead of compared.
package script

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the golden traces (testdata/*.golden) from the current output")

// Cmd is one command line of a script.
type Cmd struct {
	File string // the script's path
	Line int    // 1-based
	Text string // without surrounding spaces; never blank nor a comment
}

// String gives the position and the text, for messages.
func (c Cmd) String() string { return fmt.Sprintf("%s:%d: %s", c.File, c.Line, c.Text) }

// Interpreter runs the commands of one script, in order. Exec writes the
// command's trace to out; an error stops the script and fails the test
// (a failed expectation that should not stop the script is reported with
// t.Errorf by the interpreter and shows in the trace).
type Interpreter interface {
	Exec(out io.Writer, c Cmd) error
}

// Test runs every file matching pattern (filepath.Glob) as a subtest named
// after the file, with the interpreter start returns for it, and compares
// the trace with the file's golden (its name with the extension replaced
// by .golden). It fails when no file matches.
func Test(t *testing.T, pattern string, start func(t *testing.T) Interpreter) {
	t.Helper()
	files, err := filepath.Glob(pattern)
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts match %s (err %v)", pattern, err)
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), filepath.Ext(file))
		t.Run(name, func(t *testing.T) {
			got := Run(t, file, start(t))
			Golden(t, strings.TrimSuffix(file, filepath.Ext(file))+".golden", got)
		})
	}
}

// Run runs the script in file with in and returns its trace.
func Run(t *testing.T, file string, in Interpreter) string {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out strings.Builder
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			out.WriteString(line + "\n")
			continue
		}
		out.WriteString("> " + line + "\n")
		c := Cmd{File: file, Line: n, Text: line}
		if err := in.Exec(&out, c); err != nil {
			t.Fatalf("%v: %v", c, err)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return out.String()
}

// Golden compares got with the golden file, or writes it with -rewrite.
func Golden(t *testing.T, golden, got string) {
	t.Helper()
	if *rewrite {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test with -rewrite to create it)", err)
	}
	if got != string(want) {
		t.Errorf("trace differs from %s (rerun with -rewrite if the change is intended)\n%s", golden, FirstDiff(string(want), got))
	}
}

// FirstDiff describes the first line where want and got differ, "" when
// they are equal.
func FirstDiff(want, got string) string {
	wl, gl := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(wl) || i < len(gl); i++ {
		var w, g string
		if i < len(wl) {
			w = wl[i]
		}
		if i < len(gl) {
			g = gl[i]
		}
		if w != g {
			return fmt.Sprintf("line %d:\n  want: %s\n  got:  %s", i+1, w, g)
		}
	}
	return ""
}
