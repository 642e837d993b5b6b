package cli

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// kill is a flag.Value with its own error, as --inject's.
type kill string

func (k *kill) String() string { return string(*k) }
func (k *kill) Set(s string) error {
	if !strings.HasPrefix(s, "kill:") {
		return fmt.Errorf("only kill injections exist (want kill:rank=R)")
	}
	*k = kill(s)
	return nil
}

func newFlags() *flag.FlagSet {
	fs := flag.NewFlagSet("prog", flag.ContinueOnError)
	fs.Int("dim", 2, "dimensions `D`")
	fs.Uint64("seed", 1, "seed")
	fs.Float64("tol", 0, "tolerance")
	fs.Bool("quiet", false, "no lines")
	fs.Duration("span", time.Second, "window span")
	fs.String("out", "", "output `DIR`")
	var k kill
	fs.Var(&k, "inject", "inject a failure")
	return fs
}

// A bad flag is one line naming the flag and what to give, a usage error
// (exit status 2); nothing is printed while parsing.
func TestParseBadFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--dim", "x"}, "--dim x: give a whole number"},
		{[]string{"--dim=99999999999999999999"}, "--dim 99999999999999999999: out of range; give a whole number"},
		{[]string{"--seed", "-1"}, "--seed -1: give a whole number from 0"},
		{[]string{"--tol", "abc"}, "--tol abc: give a number"},
		{[]string{"--quiet=maybe"}, "--quiet maybe: give true or false"},
		{[]string{"--span", "10"}, "--span 10: give a duration such as 500ms, 30s or 2m"},
		{[]string{"--inject", "bogus"}, "--inject bogus: only kill injections exist (want kill:rank=R)"},
		{[]string{"--inject", ""}, `--inject "": only kill injections exist (want kill:rank=R)`},
		{[]string{"--bogus", "1"}, "--bogus: no such flag (prog --help lists them)"},
		{[]string{"--out"}, "--out needs a value: --out VALUE"},
		{[]string{"---dim=2"}, "---dim=2: bad flag syntax; give --name or --name=value"},
	} {
		fs := newFlags()
		var so bytes.Buffer
		_, err := Parse(fs, c.args, &so)
		var ee *ExitError
		if !errors.As(err, &ee) || ee.Code != 2 || ee.Msg != c.want || !IsUsage(err) {
			t.Errorf("Parse(%q) = %#v, want a usage error %q", c.args, err, c.want)
		}
		if so.Len() > 0 {
			t.Errorf("Parse(%q) printed %q on stdout", c.args, so.String())
		}
		var se bytes.Buffer
		if code := Status("prog", err, &se); code != 2 || se.String() != "prog: "+c.want+"\n" {
			t.Errorf("Status(%q) = %d, printed %q; want 2 and one line", c.args, code, se.String())
		}
	}
}

// --help, -help and -h print the usage on stdout, once, with a synopsis
// line and long flags written --name, and are exit 0; the flag set is as
// it was afterwards.
func TestParseHelp(t *testing.T) {
	for _, arg := range []string{"--help", "-help", "-h"} {
		fs := newFlags()
		var so bytes.Buffer
		_, err := Parse(fs, []string{"--dim", "3", arg}, &so)
		if !errors.Is(err, flag.ErrHelp) {
			t.Fatalf("Parse(%s) = %v, want flag.ErrHelp", arg, err)
		}
		if got := so.String(); !strings.HasPrefix(got, "usage: prog [flags]\n") || strings.Count(got, "  --dim D") != 1 || strings.Contains(got, "panic") {
			t.Errorf("Parse(%s) printed %q, want the synopsis, then the usage once, long flags with two dashes", arg, got)
		}
		var se bytes.Buffer
		if code := Status("prog", err, &se); code != 0 || se.Len() > 0 {
			t.Errorf("Status(help) = %d, printed %q; want 0 and nothing", code, se.String())
		}
		if _, ok := fs.Lookup("dim").Value.(*watcher); ok {
			t.Errorf("Parse left a watcher on --dim")
		}
	}
	fs := newFlags()
	fs.Usage = func() { fmt.Fprintln(fs.Output(), "usage: prog DIR") }
	var so bytes.Buffer
	if _, err := Parse(fs, []string{"-h"}, &so); !errors.Is(err, flag.ErrHelp) || so.String() != "usage: prog DIR\n" {
		t.Errorf("Parse(-h) with a Usage = %v, printed %q; want the program's usage on stdout", err, so.String())
	}
}

// Flags and positional arguments mix; "--" ends the flags. The values
// are set through the watchers, which are gone afterwards.
func TestParsePositional(t *testing.T) {
	fs := newFlags()
	pos, err := Parse(fs, []string{"a", "--dim", "4", "b", "--quiet", "--", "--tol", "c"}, nil)
	if err != nil || !slices.Equal(pos, []string{"a", "b", "--tol", "c"}) {
		t.Fatalf("Parse = %q, %v", pos, err)
	}
	if d := fs.Lookup("dim").Value.(flag.Getter).Get(); d != 4 {
		t.Errorf("--dim = %v, want 4", d)
	}
	if q := fs.Lookup("quiet").Value.String(); q != "true" {
		t.Errorf("--quiet = %s, want true", q)
	}
}

// One program prefix per line, whatever the wrapping repeated.
func TestLine(t *testing.T) {
	for _, c := range []struct{ prog, msg, want string }{
		{"kmeans", "kmeans: --k 100: want 1..50", "kmeans: --k 100: want 1..50"},
		{"kmeans", "rank 0: kmeans: --k 100: want 1..50", "kmeans: rank 0: --k 100: want 1..50"},
		{"terasort validate", "terasort: out/part-00001: record 3 out of order", "terasort validate: out/part-00001: record 3 out of order"},
		{"terasort sort", "rank 2: terasort: kvshuffle: pump", "terasort sort: rank 2: kvshuffle: pump"},
		{"wordcount", "--in: stat x: no such file", "wordcount: --in: stat x: no such file"},
		{"kmeans", "kmeansx: a", "kmeans: kmeansx: a"},
	} {
		if got := Line(c.prog, c.msg); got != c.want {
			t.Errorf("Line(%q, %q) = %q, want %q", c.prog, c.msg, got, c.want)
		}
	}
	if code := Status("prog", errors.New("prog: broken"), &bytes.Buffer{}); code != 1 {
		t.Errorf("Status(plain error) = %d, want 1", code)
	}
}

// Rule: --version prints the program's version line on stdout and asks
// the caller to exit 0 (flag.ErrHelp), before any flag is checked.
func TestVersion(t *testing.T) {
	fs := flag.NewFlagSet("prog", flag.ContinueOnError)
	fs.Int("k", 1, "")
	var out strings.Builder
	if _, err := Parse(fs, []string{"--k", "bad", "--version"}, &out); !errors.Is(err, flag.ErrHelp) || !strings.HasPrefix(out.String(), "prog ") {
		t.Fatalf("Parse(--version) = %v, printed %q", err, out.String())
	}
	if _, err := Parse(fs, []string{"--", "--version"}, &out); err != nil {
		t.Fatalf("--version after -- is an argument: %v", err)
	}
	if !IsVersion("--version") || IsVersion("--verbose") {
		t.Fatal("IsVersion")
	}
}
