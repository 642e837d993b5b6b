// Command terasort generates, checks and sorts gensort-format records
// (100 bytes, 10-byte key; the layout is in apps/terasort/doc.go).
//
//	terasort gen --records N --out DIR [--parts P | --single] [--seed S] [--format ascii|binary]
//	terasort validate [--expect-records N] [--expect-checksum HEX] DIR | FILE...
//	terasort sum [--expect-records N] [--expect-checksum HEX] DIR | FILE...
//	terasort sort --in DIR --out DIR [--replace] (distributed, under gaspirun; see sort.go)
//	terasort memsort --in DIR|FILE --out FILE (single-process in-memory baseline)
//
// gen, validate and sum print, as their last line on stdout,
//
//	records=<n> checksum=<16 hex digits>
//
// where the checksum is the 64-bit sum of the CRC-32 (IEEE) of every record:
// it does not depend on order, so a sort's input and output must agree.
// validate takes a directory only as the complete output of sort: its
// _SUCCESS marker must list exactly its part files, with their record
// counts, and the total count and checksum must match it. Part files
// named one by one are checked without a marker. Before its last line,
// validate prints gensort's valsort summary fields (see valsort.go):
// Records, Checksum, Duplicate keys, and SUCCESS or the first record out
// of order.
//
// An input directory (sort --in, sum, memsort --in) stands for its files
// of any name but _ files (_SUCCESS), dot files, .crc files and a sort's
// part-NNNNN.tmp leftovers, as Hadoop reads a directory (InputFiles).
// Exit status: 0 success, 1 a check failed or a file is bad, 2 bad usage.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

const usage = `usage: terasort <command> [flags] [args]

commands:
  gen       write gensort-format records: --records N --out DIR [--parts P | --single]
  validate  check global key order of DIR's part files (or FILEs in the order given), print count and checksum
  sum       print count and checksum of records in any order
  sort      distributed sort over the key-value shuffle, run under gaspirun
  memsort   single-process in-memory sort (baseline for benchmarks)

Run 'terasort <command> -h' for the flags of a command.
`

// exitError carries an exit status; its message (if any) is printed.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes one command and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch cmd, rest := args[0], args[1:]; cmd {
	case "gen":
		err = cmdGen(ctx, rest, stdout, stderr)
	case "validate":
		err = cmdScan(ctx, "validate", rest, stdout, stderr)
	case "sum":
		err = cmdScan(ctx, "sum", rest, stdout, stderr)
	case "sort":
		err = cmdSort(ctx, rest, stdout, stderr)
	case "memsort":
		err = cmdMemsort(ctx, rest, stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "terasort: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
	if err == nil {
		return 0
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintf(stderr, "terasort %s: %s\n", args[0], ee.msg)
		}
		return ee.code
	}
	fmt.Fprintf(stderr, "terasort %s: %v\n", args[0], err)
	return 1
}

// usageErr is a bad-usage error (exit status 2).
func usageErr(format string, args ...any) error {
	return &exitError{code: 2, msg: fmt.Sprintf(format, args...)}
}

// parseInterleaved parses fs over args, allowing flags after positional
// arguments ("validate DIR --expect-records N"); everything after "--" is
// positional. It returns the positional arguments.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, &exitError{code: 2} // the flag package printed the message
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

// setFlags returns the names of the flags given on the command line.
func setFlags(fs *flag.FlagSet) map[string]bool {
	m := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { m[f.Name] = true })
	return m
}
