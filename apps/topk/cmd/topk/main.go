// Command topk reports the K most frequent items of each window of a
// generated stream, over the key-value shuffle in Streaming mode; see
// package apps/topk for what it does and prints.
//
//	gaspirun -n 4 --spares 1 -- topk run --window-records 20000 --windows 10 \
//	    --out DIR --inject kill:rank=2,record=50000
//	topk ref --ranks 4 --window-records 20000 --windows 10
//
// Exit status: 0 success, 1 failure (a report that differs from one
// written before, or from the reference with --check), 2 bad usage.
package main

import (
	"context"
	"flag"
	"io"

	"github.com/gaspigo/gaspigo/apps/internal/kvjob"
	"github.com/gaspigo/gaspigo/apps/topk"
	"github.com/gaspigo/gaspigo/kvshuffle"
)

const usage = `usage: topk <command> [flags]

commands:
  run   the streaming job, under gaspirun: --window-records N | --window-span D, --windows W, --out DIR
  ref   the reports in one process (the reference): --ranks N and the same stream and window flags
`

func main() { kvjob.Main("topk", run) }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cmd, err := kvjob.Command(args, usage, []string{"run", "ref"}, stdout, stderr)
	if cmd == "" {
		return err
	}
	fs := flag.NewFlagSet("topk "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := topk.Config{Gen: topk.Gen{Seed: 1, Keys: 100000, Skew: 1.2, Rate: 1000}}
	fs.Uint64Var(&c.Gen.Seed, "seed", c.Gen.Seed, "seed `S` of the streams")
	fs.Uint64Var(&c.Gen.Keys, "keys", c.Gen.Keys, "distinct items `N` of the streams")
	fs.Float64Var(&c.Gen.Skew, "skew", c.Gen.Skew, "Zipf exponent `s` (> 1) of the items")
	fs.Float64Var(&c.Gen.Rate, "rate", c.Gen.Rate, "records per second of event time of rank 0 (odd ranks: half); for --window-span")
	fs.Uint64Var(&c.Windows.Records, "window-records", 0, "count windows of `N` records per rank")
	fs.DurationVar(&c.Windows.Span, "window-span", 0, "time windows of `D` of event time")
	fs.IntVar(&c.Windows.Checkpoints, "ckpts", 4, "key-count checkpoints per window (at its start and every 1/C of it)")
	fs.IntVar(&c.Count, "windows", 0, "windows `W` to process (the streams are unbounded)")
	fs.IntVar(&c.K, "k", 10, "items `K` per report")
	ranks := 0
	inject := ""
	mem := kvshuffle.DefaultConfig().MemoryBudget
	if cmd == "ref" {
		fs.IntVar(&ranks, "ranks", 0, "the job's ranks `N` (one stream each)")
	} else {
		fs.StringVar(&c.Out, "out", "", "directory `DIR` of the window reports")
		fs.BoolVar(&c.Check, "check", false, "rank 0 also computes each window's reference and fails on a difference")
		fs.IntVar(&c.Mirrors, "mirrors", 1, "copies of each checkpoint on other ranks")
		fs.Int64Var(&mem, "memory", mem, "received data a rank holds in memory per window, in `BYTES`")
		fs.StringVar(&inject, "inject", "", "kill:rank=R,record=N sends SIGKILL to rank R as it reads position N of its stream")
	}
	if err := kvjob.Parse(fs, args[1:]); err != nil {
		return err
	}
	c.Windows.Start = topk.Epoch
	switch {
	case c.Count < 1:
		return kvjob.Usage("--windows %d: want at least 1", c.Count)
	case c.K < 1:
		return kvjob.Usage("--k %d: want at least 1", c.K)
	case c.Gen.Keys < 2 || !(c.Gen.Skew > 1) || !(c.Gen.Rate > 0):
		return kvjob.Usage("--keys wants at least 2, --skew more than 1, --rate more than 0")
	}
	if err := c.Windows.Validate(); err != nil {
		return kvjob.Usage("give --window-records N or --window-span D, and --ckpts at least 1 (%v)", err)
	}
	if cmd == "ref" {
		if ranks < 1 {
			return kvjob.Usage("--ranks %d: want the job's number of ranks", ranks)
		}
		for _, line := range topk.Reference(ranks, c.Gen, c.Windows, c.Count, c.K) {
			io.WriteString(stdout, line+"\n")
		}
		return nil
	}
	if c.Out == "" {
		return kvjob.Usage("give --out DIR for the window reports")
	}
	if inject != "" {
		if c.Kill, err = kvjob.ParseKill(inject, "record", false); err != nil {
			return kvjob.Usage("%v", err)
		}
	}
	if c.Mirrors < 1 {
		return kvjob.Usage("--mirrors %d: want at least 1", c.Mirrors)
	}
	if c.Shuffle, err = kvjob.ShuffleConfig(mem, 32<<10, ""); err != nil {
		return err
	}
	c.Stdout = stdout
	rt, err := kvjob.Init(ctx)
	if rt == nil {
		return err
	}
	defer rt.Close()
	return topk.Run(ctx, rt, c)
}
