package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/gaspigo/gaspigo/apps/internal/cli"
	"github.com/gaspigo/gaspigo/apps/terasort"
)

// checksumFlag parses --expect-checksum.
type checksumFlag struct {
	v   uint64
	set bool
}

func (c *checksumFlag) String() string {
	if !c.set {
		return ""
	}
	return fmt.Sprintf("%016x", c.v)
}

func (c *checksumFlag) Set(s string) error {
	v, err := terasort.ParseChecksum(s)
	if err != nil {
		return err
	}
	c.v, c.set = v, true
	return nil
}

// cmdScan runs validate (order, count, checksum) or sum (count, checksum).
func cmdScan(ctx context.Context, name string, args []string, stdout, stderr io.Writer) error {
	cfg := terasort.DefaultScanConfig()
	fs := flag.NewFlagSet("terasort "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		sum     checksumFlag
		records = fs.String("expect-records", "", "fail unless there are exactly `N` records")
		verbose = fs.Bool("v", false, "print one line per file")
	)
	fs.Var(&sum, "expect-checksum", "fail unless the checksum is `HEX` (up to 16 hex digits, as printed by gen or sum)")
	fs.IntVar(&cfg.Workers, "workers", cfg.Workers, "goroutines reading at once")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: terasort %s [flags] DIR | FILE...\n\nDIR stands for its part files part-00000, part-00001, ... in order; FILEs are taken in the order given.\n", name)
		if name == "validate" {
			fmt.Fprintf(fs.Output(), "A DIR must be the complete output of terasort sort: its %s marker lists exactly its part files, and their count and checksum must match it.\n", terasort.SuccessName)
		}
		fmt.Fprintln(fs.Output())
		fs.PrintDefaults()
	}
	pos, err := cli.Parse(fs, args, stdout)
	if err != nil {
		return err
	}
	exp := terasort.Expect{Checksum: sum.v, CheckChecksum: sum.set}
	if *records != "" {
		n, err := strconv.ParseInt(*records, 10, 64)
		if err != nil || n < 0 {
			return usageErr("--expect-records %q: want a whole number ≥ 0", *records)
		}
		exp.Records, exp.CheckRecords = n, true
	}
	if len(pos) == 0 {
		return usageErr("name a directory of part files or one or more files")
	}
	if err := cfg.Validate(); err != nil {
		return usageErr("%v", err)
	}
	var (
		paths  []string
		marked *terasort.Summary // validate of directories: what their markers say
	)
	if name == "sum" {
		paths, err = terasort.ResolveInputs(pos)
	} else {
		paths, marked, err = resolveOutputs(pos)
	}
	if err != nil {
		return err
	}
	var (
		s        terasort.Summary
		failures []string
	)
	if name == "sum" {
		if s, err = terasort.SumFiles(ctx, paths, cfg); err != nil {
			return err
		}
	} else {
		rep, err := terasort.ValidateFiles(ctx, paths, cfg)
		var oe *terasort.OrderError
		switch {
		case errors.As(err, &oe):
			failures = append(failures, oe.Error())
		case err != nil:
			return err
		}
		s = rep.Summary
		if *verbose {
			for _, f := range rep.Files {
				fmt.Fprintf(stdout, "%s: %v first=%x last=%x disorders=%d\n", f.Path, f.Summary, f.FirstKey, f.LastKey, f.Disorders)
			}
		}
		if oe == nil {
			fmt.Fprintf(stderr, "validate: %d file(s), all records in order\n", len(paths))
		}
		valsortSummary(stdout, rep, oe)
	}
	if err := exp.Check(s); err != nil {
		failures = append(failures, err.Error())
	}
	if marked != nil && *marked != s {
		failures = append(failures, fmt.Sprintf("the parts hold %v, their %s marker says %v", s, terasort.SuccessName, *marked))
	}
	for _, f := range failures {
		fmt.Fprintf(stderr, "terasort %s: FAIL: %s\n", name, f)
	}
	fmt.Fprintln(stdout, s) // always the last line
	if failures != nil {
		return &cli.ExitError{Code: 1}
	}
	return nil
}

// resolveOutputs turns validate's arguments into the files to read: a
// directory must be a complete sort output (terasort.ReadSuccess: its
// _SUCCESS marker lists exactly its part files) and stands for its parts;
// a file stands for itself. When every argument is a directory, marked is
// the sum of what their markers record.
func resolveOutputs(args []string) (paths []string, marked *terasort.Summary, err error) {
	var total terasort.Summary
	dirs := 0
	for _, a := range args {
		st, err := os.Stat(a)
		if err != nil {
			return nil, nil, fmt.Errorf("terasort: %w", err)
		}
		if !st.IsDir() {
			paths = append(paths, a)
			continue
		}
		m, parts, err := terasort.ReadSuccess(a)
		if err != nil {
			return nil, nil, err
		}
		ms, err := m.Summary()
		if err != nil {
			return nil, nil, err
		}
		total = total.Add(ms)
		dirs++
		paths = append(paths, parts...)
	}
	if len(paths) == 0 {
		return nil, nil, fmt.Errorf("%w: name a directory of part files or one or more files", terasort.ErrNoInput)
	}
	if dirs == len(args) {
		marked = &total
	}
	return paths, marked, nil
}
