package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"

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
		fmt.Fprintf(stderr, "usage: terasort %s [flags] DIR | FILE...\n\nDIR stands for its part files part-00000, part-00001, ... in order; FILEs are taken in the order given.\n\n", name)
		fs.PrintDefaults()
	}
	pos, err := parseInterleaved(fs, args)
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
	paths, err := terasort.ResolveInputs(pos)
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
	}
	if err := exp.Check(s); err != nil {
		failures = append(failures, err.Error())
	}
	for _, f := range failures {
		fmt.Fprintf(stderr, "terasort %s: FAIL: %s\n", name, f)
	}
	fmt.Fprintln(stdout, s) // always the last line
	if failures != nil {
		return &exitError{code: 1}
	}
	return nil
}
