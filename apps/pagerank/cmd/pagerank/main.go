// Command pagerank is PageRank over the key-value shuffle in Iteration
// mode; see package apps/pagerank for what it does and prints.
//
//	gaspirun -n 4 --spares 1 -- pagerank run --vertices 100000 --iterations 20 \
//	    --ckpt-every 5 --inject kill:rank=2,iter=12
//	pagerank ref --vertices 100000 --iterations 20
//
// Exit status: 0 success, 1 failure (or --check found a difference), 2
// bad usage.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/gaspigo/gaspigo/apps/internal/kvjob"
	"github.com/gaspigo/gaspigo/apps/pagerank"
	"github.com/gaspigo/gaspigo/kvshuffle"
)

const usage = `usage: pagerank <command> [flags]

commands:
  run   the distributed PageRank, under gaspirun: --vertices N | --edges FILE
  ref   PageRank in one process (the reference): --vertices N | --edges FILE
`

func main() { kvjob.Main("pagerank", run) }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cmd, err := kvjob.Command(args, usage, []string{"run", "ref"}, stdout, stderr)
	if cmd == "" {
		return err
	}
	fs := flag.NewFlagSet("pagerank "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var gen pagerank.Generated
	var c pagerank.Config
	fs.Int64Var(&gen.N, "vertices", 0, "generate a graph of `N` vertices instead of reading --edges")
	fs.IntVar(&gen.Degree, "degree", 8, "mean out-degree `D` of the generated graph")
	fs.Uint64Var(&gen.Seed, "seed", 1, "seed `S` of the generated graph")
	edges := fs.String("edges", "", "read the graph from `FILE`: \"src dst\" lines")
	fs.IntVar(&c.Iterations, "iterations", 20, "iterations `I`")
	inject := ""
	mem := kvshuffle.DefaultConfig().MemoryBudget
	if cmd == "run" {
		fs.IntVar(&c.CkptEvery, "ckpt-every", 5, "checkpoint every `C` iterations (0: only the start and the end)")
		fs.IntVar(&c.Mirrors, "mirrors", 1, "copies of each checkpoint on other ranks")
		fs.BoolVar(&c.Check, "check", false, "rank 0 also computes the reference and fails on a difference")
		fs.Int64Var(&mem, "memory", mem, "received data a rank holds in memory per round, in `BYTES`")
		fs.StringVar(&inject, "inject", "", "kill:rank=R,iter=I sends SIGKILL to rank R as it starts iteration I (counted from 0)")
	}
	if err := kvjob.Parse(fs, args[1:]); err != nil {
		return err
	}
	switch {
	case (gen.N == 0) == (*edges == ""):
		return kvjob.Usage("give either --vertices N or --edges FILE")
	case gen.N < 0:
		return kvjob.Usage("--vertices %d: want a positive number", gen.N)
	case gen.Degree < 1:
		return kvjob.Usage("--degree %d: want at least 1", gen.Degree)
	case c.Iterations < 1:
		return kvjob.Usage("--iterations %d: want at least 1", c.Iterations)
	case c.CkptEvery < 0:
		return kvjob.Usage("--ckpt-every %d: want 0 or more", c.CkptEvery)
	}
	var g pagerank.Graph = gen
	if *edges != "" {
		f, err := os.Open(*edges)
		if err != nil {
			return kvjob.Usage("--edges: %v", err)
		}
		el, err := pagerank.ReadEdges(f)
		f.Close()
		if err != nil {
			return kvjob.Usage("--edges %s: %v", *edges, err)
		}
		g = el
	}
	if cmd == "ref" {
		fmt.Fprintln(stdout, pagerank.Summary(pagerank.Reference(g, c.Iterations), pagerank.Edges(g), c.Iterations))
		return nil
	}
	if inject != "" {
		k, err := kvjob.ParseKill(inject, "iter", false)
		if err != nil {
			return kvjob.Usage("%v", err)
		}
		c.Kill = k
	}
	if c.Mirrors < 1 {
		return kvjob.Usage("--mirrors %d: want at least 1", c.Mirrors)
	}
	if c.Shuffle, err = kvjob.ShuffleConfig(mem, 32<<10, ""); err != nil {
		return err
	}
	c.Graph, c.Stdout = g, stdout
	rt, err := kvjob.Init(ctx)
	if rt == nil {
		return err
	}
	defer rt.Close()
	return pagerank.Run(ctx, rt, c)
}
