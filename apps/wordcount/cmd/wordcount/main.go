// Command wordcount counts words over the key-value shuffle; see package
// apps/wordcount for what it does and prints.
//
//	gaspirun -n 4 --spares 1 -- wordcount run --generate 200000 --ckpts 8 \
//	    --inject kill:rank=2,at=0.5
//	wordcount ref --generate 200000
//
// Exit status: 0 success, 1 failure (or --check found a difference), 2
// bad usage.
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/gaspigo/gaspigo/apps/internal/kvjob"
	"github.com/gaspigo/gaspigo/apps/wordcount"
	"github.com/gaspigo/gaspigo/kvshuffle"
)

const usage = `usage: wordcount <command> [flags]

commands:
  run   the distributed count, under gaspirun: --in FILE | --generate LINES
  ref   the count in one process (the reference): --in FILE | --generate LINES
  gen   write the generated text: --generate LINES --out FILE
`

func main() { kvjob.Main("wordcount", run) }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cmd, err := kvjob.Command(args, usage, []string{"run", "ref", "gen"}, stdout, stderr)
	if cmd == "" {
		return err
	}
	fs := flag.NewFlagSet("wordcount "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	in := fs.String("in", "", "input text `FILE` (lines split at newlines)")
	gen := fs.Int64("generate", 0, "generate `LINES` lines of Zipf-distributed pseudo-words instead of --in")
	seed := fs.Uint64("seed", 1, "seed `S` of --generate")
	out := fs.String("out", "", "run: write part files (word<TAB>count) to `DIR`; gen: the text FILE")
	var c wordcount.Config
	def := kvshuffle.DefaultConfig()
	mem := def.MemoryBudget
	spill := ""
	inject := ""
	if cmd == "run" {
		fs.IntVar(&c.Reducers, "reducers", 0, "A tasks: ranks 0..`R`-1 receive and reduce (0: every rank)")
		fs.IntVar(&c.Ckpts, "ckpts", 0, "key-count checkpoints `K` during each rank's lines, at every 1/(K+1) of them (0: none; a failure then starts the lines over)")
		fs.IntVar(&c.Runnable, "runnable", 0, "at most `N` ranks of a host map (hold their input and send) at once; the others wait, having dropped theirs (0: no bound)")
		fs.StringVar(&c.RunnableDir, "runnable-dir", "", "`DIR` of the host's slot files for --runnable (default: under the system temporary directory, per job and host label)")
		fs.IntVar(&c.Mirrors, "mirrors", 1, "copies of each checkpoint on other ranks")
		fs.BoolVar(&c.Route, "route", false, "route words by a table built from every rank's digest of its words (HPMR key routing: each word goes to the reducer holding most of it), instead of by hash")
		fs.BoolVar(&c.Check, "check", false, "rank 0 also counts in one process and fails on a difference")
		fs.Int64Var(&mem, "memory", mem, "received data an A task holds in memory, in `BYTES`; above it runs spill to --spill")
		fs.StringVar(&spill, "spill", "", "spill `DIR` (default: the system temporary directory)")
		fs.StringVar(&inject, "inject", "", "kill:rank=R,at=F sends SIGKILL to rank R after it sent the fraction F of its lines")
	}
	if err := kvjob.Parse(fs, args[1:]); err != nil {
		return err
	}
	input, err := loadInput(*in, *gen, *seed)
	if err != nil {
		return err
	}
	switch cmd {
	case "ref":
		ref, err := input.Reference()
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, ref)
		return nil
	case "gen":
		if input.File != "" || *out == "" {
			return kvjob.Usage("gen: give --generate LINES and --out FILE")
		}
		return writeText(*out, input)
	}
	if inject != "" {
		if c.Kill, err = kvjob.ParseKill(inject, "at", true); err != nil {
			return kvjob.Usage("%v", err)
		}
	}
	if c.Mirrors < 1 || c.Ckpts < 0 || c.Reducers < 0 || c.Runnable < 0 {
		return kvjob.Usage("--mirrors wants at least 1, --ckpts, --reducers and --runnable at least 0")
	}
	if c.Shuffle, err = kvjob.ShuffleConfig(mem, 0, spill); err != nil {
		return err
	}
	c.Input, c.Out, c.Stdout = input, *out, stdout
	rt, err := kvjob.Init(ctx)
	if rt == nil {
		return err
	}
	defer rt.Close()
	if c.Runnable > 0 && c.RunnableDir == "" {
		c.RunnableDir = filepath.Join(os.TempDir(), fmt.Sprintf("gaspigo-runnable-%s-%s", os.Getenv("PGAS_JOB_ID"), strings.ReplaceAll(rt.Host(rt.Rank()), "/", "_")))
	}
	return wordcount.Run(ctx, rt, c)
}

// loadInput returns the lines of file, or n generated lines.
func loadInput(file string, n int64, seed uint64) (wordcount.Input, error) {
	switch {
	case (file == "") == (n == 0):
		return wordcount.Input{}, kvjob.Usage("give either --in FILE or --generate LINES")
	case n < 0:
		return wordcount.Input{}, kvjob.Usage("--generate %d: want a positive number of lines", n)
	case n > 0:
		return wordcount.Input{Lines: n, Line: func(i int64) []byte { return wordcount.Generate(seed, i) }}, nil
	}
	if _, err := os.Stat(file); err != nil {
		return wordcount.Input{}, kvjob.Usage("--in: %v", err)
	}
	return wordcount.Input{File: file}, nil
}

func writeText(path string, in wordcount.Input) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	for i := range in.Lines {
		w.Write(in.Line(i))
		w.WriteByte('\n')
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
