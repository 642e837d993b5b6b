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
	"flag"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/gaspigo/gaspigo/apps/internal/cli"
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

func main() {
	ctx, stop := cli.SignalContext()
	code := cli.SignalStatus(ctx, run(ctx, os.Args[1:], os.Stdout, os.Stderr))
	stop()
	os.Exit(code)
}

// commands are terasort's commands, by name.
var commands = map[string]func(ctx context.Context, args []string, stdout, stderr io.Writer) error{
	"gen": cmdGen,
	"validate": func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		return cmdScan(ctx, "validate", args, stdout, stderr)
	},
	"sum": func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		return cmdScan(ctx, "sum", args, stdout, stderr)
	},
	"sort":    cmdSort,
	"memsort": cmdMemsort,
}

// run executes one command and returns the exit status. A usage error is
// one line on stderr (the usage only with --help, on stdout).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		return cli.Status("terasort", cli.Usage("give a command: gen, validate, sum, sort or memsort (terasort --help says more)"), stderr)
	}
	cmd, ok := commands[args[0]]
	switch {
	case slices.Contains([]string{"-h", "-help", "--help", "help"}, args[0]):
		fmt.Fprint(stdout, usage)
		return 0
	case cli.IsVersion(args[0]):
		cli.PrintVersion(stdout, "terasort")
		return 0
	case !ok:
		return cli.Status("terasort", cli.Usage("unknown command %q: give gen, validate, sum, sort or memsort (terasort --help says more)", args[0]), stderr)
	}
	return cli.Status("terasort "+args[0], cli.Interrupted(ctx, cmd(ctx, args[1:], stdout, stderr)), stderr)
}

// usageErr is a bad-usage error (exit status 2).
func usageErr(format string, args ...any) error { return cli.Usage(format, args...) }

// setFlags returns the names of the flags given on the command line.
func setFlags(fs *flag.FlagSet) map[string]bool {
	m := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { m[f.Name] = true })
	return m
}
