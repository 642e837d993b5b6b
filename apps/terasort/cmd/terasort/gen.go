package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gaspigo/gaspigo/apps/internal/cli"
	"github.com/gaspigo/gaspigo/apps/terasort"
)

func cmdGen(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg := terasort.DefaultGenConfig()
	fs := flag.NewFlagSet("terasort gen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		out     string
		single  bool
		force   bool
		quiet   bool
		format        = cfg.Format.String()
		records int64 = -1
	)
	fs.Int64Var(&records, "records", -1, "number of records `N` to write (100 bytes each; 1 GiB is 10737418)")
	fs.StringVar(&out, "out", "", "output `DIR` (created if missing), or the output FILE with --single")
	fs.IntVar(&cfg.Parts, "parts", cfg.Parts, "number of part files `P` (DIR/part-00000 ...), generated in parallel; default: number of CPUs")
	fs.BoolVar(&single, "single", false, "write one file, --out FILE, instead of part files")
	fs.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed `S`: record i depends only on the seed, the format and i")
	fs.StringVar(&format, "format", format, "record layout: ascii (gensort -a: printable keys, lines end in \\r\\n) or binary (gensort default)")
	fs.IntVar(&cfg.Workers, "workers", cfg.Workers, "goroutines generating at once")
	fs.BoolVar(&force, "force", false, "first remove existing part files in DIR (or the --single FILE)")
	fs.BoolVar(&quiet, "quiet", false, "print only the summary line")
	pos, err := cli.Parse(fs, args, stdout)
	if err != nil {
		return err
	}
	set := setFlags(fs)
	switch {
	case len(pos) > 0:
		return usageErr("unexpected argument %q: give the output with --out", pos[0])
	case records < 0:
		return usageErr("give --records N (N ≥ 0)")
	case out == "":
		return usageErr("give --out DIR (or --out FILE with --single)")
	case single && set["parts"]:
		return usageErr("--single and --parts exclude each other: --single writes one file")
	}
	cfg.Records = records
	if cfg.Format, err = terasort.ParseFormat(format); err != nil {
		return usageErr("--format: %v", err)
	}
	if single {
		cfg.Parts = 1
	}
	if err := cfg.Validate(); err != nil {
		return usageErr("%v", err)
	}
	if force {
		if err := removeOutput(out, single); err != nil {
			return err
		}
	}
	start := time.Now()
	var sum terasort.Summary
	if single {
		sum, err = terasort.GenerateFile(ctx, out, cfg)
	} else {
		sum, err = terasort.Generate(ctx, out, cfg)
	}
	if err != nil {
		return err
	}
	el := time.Since(start)
	if !quiet {
		files := fmt.Sprintf("%d part files in %s", cfg.Parts, out)
		if single {
			files = "file " + out
		}
		fmt.Fprintf(stderr, "gen: %d %s records (seed %d) to %s in %.2fs (%.0f MB/s)\n",
			sum.Records, cfg.Format, cfg.Seed, files, el.Seconds(), float64(sum.Records*terasort.RecordSize)/1e6/el.Seconds())
	}
	fmt.Fprintln(stdout, sum)
	return nil
}

// removeOutput deletes the --single file, or DIR's part files (and
// leftover .tmp parts), for --force.
func removeOutput(out string, single bool) error {
	if single {
		if err := os.Remove(out); err != nil && !os.IsNotExist(err) {
			return err
		}
		return nil
	}
	ents, err := os.ReadDir(out)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "part-") && !e.IsDir() {
			if err := os.Remove(filepath.Join(out, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}
