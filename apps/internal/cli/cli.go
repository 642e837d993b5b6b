// Package cli is the applications' one way to read their flags and to
// say a usage error: once, on one line that names the flag and what to
// give instead, with no list of the flags unless --help (or -h) asked for
// it, and then on stdout with exit status 0. A usage error is exit status
// 2. The lines carry no rank: under gaspirun every rank hits the same
// error and prints the same line, which gaspirun collapses into one.
//
//	fs := flag.NewFlagSet("kmeans", flag.ContinueOnError)
//	... define the flags ...
//	args, err := cli.Parse(fs, os.Args[1:], os.Stdout)
//	if err != nil {
//		os.Exit(cli.Status("kmeans", err, os.Stderr)) // 0 for --help, 2 for a bad flag
//	}
//
// Every message goes through Line, which keeps one program prefix per
// line: "kmeans: --k 100: ..." rather than "kmeans: rank 0: kmeans: ...".
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/gaspigo/gaspigo/internal/buildinfo"
)

// ExitError carries a command's exit status; Msg, if set, is printed
// (by Status, after the program's name).
type ExitError struct {
	Code int
	Msg  string
}

func (e *ExitError) Error() string { return e.Msg }

// Usage is a usage error (exit status 2): a bad flag, a bad value, or
// flags that contradict each other. The message names the flag and says
// what to give instead.
func Usage(format string, args ...any) error {
	return &ExitError{Code: 2, Msg: fmt.Sprintf(format, args...)}
}

// IsUsage reports whether err is a usage error (exit status 2).
func IsUsage(err error) bool {
	var ee *ExitError
	return errors.As(err, &ee) && ee.Code == 2
}

// Status prints err on stderr for program prog ("kmeans", "terasort
// sort"), on one line (Line), and returns the exit status: 0 for nil and
// flag.ErrHelp (nothing printed), an *ExitError's Code (its Msg printed
// if set), 1 for any other error.
func Status(prog string, err error, stderr io.Writer) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		if ee.Msg != "" {
			fmt.Fprintln(stderr, Line(prog, ee.Msg))
		}
		return ee.Code
	}
	fmt.Fprintln(stderr, Line(prog, err.Error()))
	return 1
}

// Line is msg said by program prog: "prog: msg", without the repeats of
// the program's name that wrapping leaves in msg. A package's errors
// start with its name ("kmeans: ...", "terasort: ...", the rule of
// errors.go), and a command adds its own; Line drops every "NAME: " at
// the start of msg or after ": ", where NAME is prog's first word.
func Line(prog, msg string) string {
	name, _, _ := strings.Cut(prog, " ")
	rep := name + ": "
	for strings.HasPrefix(msg, rep) {
		msg = msg[len(rep):]
	}
	for strings.Contains(msg, ": "+rep) {
		msg = strings.ReplaceAll(msg, ": "+rep, ": ")
	}
	if msg == "" {
		return prog
	}
	return prog + ": " + msg
}

// Parse parses fs over args, flags and positional arguments in any order
// ("validate DIR --expect-records N"; everything after "--" is
// positional), and returns the positional arguments. --help, -help or -h
// (unless fs defines them) prints the usage on stdout (printUsage: fs.Usage
// or a synopsis and the flags) and returns flag.ErrHelp; so does
// --version, after the version line. A bad flag or value returns a usage
// error naming the flag and what to give, and prints nothing. fs's
// output and Usage are restored before it returns.
func Parse(fs *flag.FlagSet, args []string, stdout io.Writer) ([]string, error) {
	if wantsVersion(fs, args) {
		PrintVersion(stdout, fs.Name())
		return nil, flag.ErrHelp
	}
	out, usage := fs.Output(), fs.Usage
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	var bad *refusal
	restore := watch(fs, &bad)
	defer func() {
		restore()
		fs.SetOutput(out)
		fs.Usage = usage
	}()
	var pos []string
	for {
		err := fs.Parse(args)
		switch {
		case errors.Is(err, flag.ErrHelp):
			restore() // PrintDefaults looks at the Values' types
			printUsage(stdout, fs, usage)
			return nil, err
		case err != nil && bad != nil:
			return nil, &ExitError{Code: 2, Msg: bad.message()}
		case err != nil:
			return nil, &ExitError{Code: 2, Msg: reword(fs.Name(), err.Error())}
		}
		rest := fs.Args()
		consumed := len(args) - len(rest)
		if consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// refusal is a flag value that its Value's Set refused.
type refusal struct {
	name, value string
	kind        any // the Value's Get() (its type says what to give), nil if none
	err         error
}

// message names the flag and the value, and says what to give instead.
func (r *refusal) message() string {
	v := r.value
	if v == "" || strings.ContainsAny(v, " \t") {
		v = strconv.Quote(v)
	}
	what := r.err.Error()
	switch what {
	case "parse error": // flag's numbers, durations and booleans
		what = "give " + want(r.kind)
	case "value out of range":
		what = "out of range; give " + want(r.kind)
	}
	if strings.Contains(what, "--"+r.name) { // the Value named the flag itself
		return what
	}
	return fmt.Sprintf("--%s %s: %s", r.name, v, what)
}

// want says what a flag of kind (a flag.Getter's Get()) takes.
func want(kind any) string {
	switch kind.(type) {
	case int, int64:
		return "a whole number"
	case uint, uint64:
		return "a whole number from 0"
	case float64:
		return "a number"
	case bool:
		return "true or false"
	case time.Duration:
		return "a duration such as 500ms, 30s or 2m"
	}
	return "another value"
}

// reword says the flag package's own errors (no such flag, a missing
// value, bad syntax) with the flag's name in the --name form.
func reword(prog, msg string) string {
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		return fmt.Sprintf("--%s: no such flag (%s --help lists them)", name, prog)
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		return fmt.Sprintf("--%s needs a value: --%s VALUE", name, name)
	}
	if arg, ok := strings.CutPrefix(msg, "bad flag syntax: "); ok {
		return fmt.Sprintf("%s: bad flag syntax; give --name or --name=value", arg)
	}
	return msg
}

// watch puts a watcher around every flag's Value, which records in *bad
// the first value refused; restore puts the Values back.
func watch(fs *flag.FlagSet, bad **refusal) (restore func()) {
	var flags []*flag.Flag
	var vals []flag.Value
	fs.VisitAll(func(f *flag.Flag) {
		flags, vals = append(flags, f), append(vals, f.Value)
		f.Value = &watcher{Value: f.Value, name: f.Name, bad: bad}
	})
	return func() {
		for i, f := range flags {
			f.Value = vals[i]
		}
	}
}

// watcher is a flag.Value that records the value its Value refused.
type watcher struct {
	flag.Value
	name string
	bad  **refusal
}

func (w *watcher) Set(s string) error {
	err := w.Value.Set(s)
	if err != nil && *w.bad == nil {
		r := &refusal{name: w.name, value: s, err: err}
		if g, ok := w.Value.(flag.Getter); ok {
			r.kind = g.Get()
		}
		*w.bad = r
	}
	return err
}

// IsBoolFlag keeps a boolean flag boolean (--quiet without a value).
func (w *watcher) IsBoolFlag() bool {
	b, ok := w.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// Get keeps the Value a flag.Getter.
func (w *watcher) Get() any {
	if g, ok := w.Value.(flag.Getter); ok {
		return g.Get()
	}
	return nil
}

// wantsVersion reports whether args ask for --version (or -version)
// before any "--", and fs does not define a flag of that name.
func wantsVersion(fs *flag.FlagSet, args []string) bool {
	if fs.Lookup("version") != nil {
		return false
	}
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "--version", "-version":
			return true
		}
	}
	return false
}

// IsVersion reports whether arg asks for the version of a command with
// subcommands (terasort --version).
func IsVersion(arg string) bool { return arg == "--version" || arg == "-version" || arg == "version" }

// PrintVersion prints prog's --version line on w.
func PrintVersion(w io.Writer, prog string) { fmt.Fprintln(w, buildinfo.Version(prog)) }

// longFlag is a flag of more than one letter at the start of a line of a
// usage text, as flag's PrintDefaults writes it ("  -max-iter int").
var longFlag = regexp.MustCompile(`(?m)^(\s+)-([A-Za-z0-9][A-Za-z0-9-]+)`)

// printUsage prints fs's usage (usage, or flag's own) on w, with a
// synopsis line instead of flag's "Usage of NAME:", and long flags
// written as they are given on the command line (--max-iter).
func printUsage(w io.Writer, fs *flag.FlagSet, usage func()) {
	var b strings.Builder
	fs.SetOutput(&b)
	if usage != nil {
		usage()
	} else {
		fs.PrintDefaults()
	}
	text := b.String()
	if rest, ok := strings.CutPrefix(text, "Usage of "+fs.Name()+":\n"); ok {
		text = "usage: " + fs.Name() + " [flags]\n\nflags:\n" + rest
	}
	io.WriteString(w, longFlag.ReplaceAllString(text, "$1--$2"))
}
