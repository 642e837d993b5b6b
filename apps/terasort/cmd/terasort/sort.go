package main

// ---------------------------------------------------------------------------
// terasort sort: the distributed sort, built on kvshuffle, run under
// gaspirun (one process per rank):
//
//	gaspirun -n 4 -- terasort sort --in IN --out OUT [--memory BYTES] [--spill DIR]
//	gaspirun -n 4 --spares 1 -- terasort sort --in IN --out OUT --ckpt-records C \
//	    --inject kill:rank=2,at=0.5
//
// Input split: the files of --in (a directory's part files in part order,
// or one file) are one sequence of records; rank r takes the records
// PartRange(total, ranks, r) of it, as byte ranges on record boundaries
// (terasort.SplitInputs), so any number of files works with any number of
// ranks. Splitters: every rank samples --sample keys of its own range,
// kvshuffle.SampleSplitters allgathers them and picks ranks-1 quantiles.
// Pairs: key = the whole 100-byte record, value empty. That costs the same
// framed bytes as key = 10-byte key + 90-byte value (102 bytes either
// way), saves one slice per pair on both sides, and makes the order total
// (ties on the 10-byte key are broken by the rest of the record), so the
// output bytes are the same whatever failed on the way. The partitioner
// looks at the first 10 bytes only.
//
// Output: rank r writes OUT/part-NNNNN (terasort.PartName(r)) through a
// .tmp file renamed at the end; once every part is in place rank 0 syncs
// them and writes the marker OUT/_SUCCESS (terasort.WriteSuccess: the
// parts, their record counts, the total count and checksum), then prints
// the summary of all parts as the last line, "records=<n> checksum=<hex>",
// which must equal the one of `terasort sum IN`; `terasort validate OUT`
// checks the marker and the order. OUT must be new or empty (--replace
// removes a previous sort's output first, and nothing else), and neither
// be the input directory, nor inside it, nor contain it: rank 0 checks
// before any rank writes (terasort.PlanOutput).
//
// Fault tolerance (--ckpt-records C > 0): key-count checkpoints. A rank
// takes shuffle checkpoint c after sending its first c records, for c =
// C, 2C, ... up to the smallest rank's record count (so every rank takes
// the same ones); the state goes into a ckpt region (length + bytes),
// mirrored to ring neighbours, with ckpt id c+1; id 1 is taken at the
// start with an empty state (roll back to nothing sent) and carries the
// splitters, which a promoted spare reads from it. On a failure the
// survivors call pgas Recover, every rank restores the last committed
// checkpoint and rolls the shuffle back to it, and sending resumes at
// Consumed(). Checkpoints are asynchronous: at record c the send loop
// marks the shuffle (kvshuffle Mark) and sends on; a committer goroutine
// waits for the state (kvshuffle State: the receivers cut when every
// marker is in and spill the cut in the background) and commits it with
// ckpt; the send loop waits for that commit only at the next checkpoint.
// A checkpoint is complete once its commit is agreed; a failure before
// that rolls back to the one before. Each checkpoint spills what the
// rank held in memory at the cut (kvshuffle CheckpointSpill), so the
// state names spill files only; they stay on the local disk, pinned. When the job spans hosts (PGAS_HOST
// labels differ), the checkpoint also copies the files the rank's mirror
// holder (on another host, ckpt's placement) lacks into the holder's own
// spill directory (kvshuffle Config.Holders), and a spare that cannot read
// the lost rank's files fetches them from there; on one host the files
// are kept by reference and a spare reads them in place. --ckpt-in-memory
// puts the in-memory data into the state instead (files spilled under
// --memory pressure are still named, and copied across hosts the same
// way). The state is a ckpt RegisterVar region: a checkpoint saves and
// mirrors the state's bytes, not the region's bound. A failure before
// checkpoint 1 was committed makes every rank start over (sample again,
// empty shuffle).
//
// Performance settings: frames of up to 512 KiB, blocks (kvshuffle
// RunSize) of a quarter of --memory (each spilled as it lies), 1 MiB spill
// and output I/O around the page cache (--page-cache: through it).
// --cpuprofile PREFIX writes each process's CPU profile to
// PREFIX.r<rank>.
//
// --spill DIR/%h gives every host label its own spill directory (on one
// machine standing in for several hosts), and --inject ...,disk=lost
// removes the killed process's spill directory first, as the loss of its
// host would.
// ---------------------------------------------------------------------------

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"runtime/pprof"
	"strings"
	"syscall"

	"github.com/gaspigo/gaspigo/apps/internal/cli"
	"github.com/gaspigo/gaspigo/apps/internal/inject"
	"github.com/gaspigo/gaspigo/apps/terasort"
	"github.com/gaspigo/gaspigo/job"
	"github.com/gaspigo/gaspigo/kvshuffle"
	"github.com/gaspigo/gaspigo/pgas"
)

// sortFlags are the settings of `terasort sort`.
type sortFlags struct {
	in, out   string
	memory    int64  // kvshuffle MemoryBudget, bytes
	spill     string // kvshuffle SpillDir; "" = under out
	sample    int    // keys sampled per rank
	ckptEvery int64  // records between checkpoints; 0 = off
	mirrors   int
	ckptMem   bool // checkpoints carry the in-memory received data instead of spilling it
	schedule  string
	inject    *injectSpec
	verbose   bool
	pageCache bool   // output and spill files through the page cache
	replace   bool   // remove a previous sort's output from out first
	cpuprof   string // CPU profile path prefix; "" = none
}

// injectSpec is --inject kill:rank=R|host=H,at=F[,disk=lost] or
// kill:rank=R|host=H,phase=ckpt-new.
type injectSpec struct {
	rank     int    // -1 with host
	host     string // every rank of this host label (PGAS_HOST)
	at       float64
	diskLost bool   // the process removes its spill directory before the kill
	phase    string // "ckpt-new": in the setup (terasort.Injection.Phase)
}

// injectGrammar is terasort's kill language (package inject).
var injectGrammar = &inject.Grammar{Keys: []inject.Key{
	{Name: "rank", Kind: inject.Rank, Target: true},
	{Name: "host", Kind: inject.Label, Target: true},
	{Name: "at", Kind: inject.Fraction},
	{Name: "disk", Kind: inject.Word, Words: []string{"lost"}},
	{Name: "phase", Kind: inject.Word, Words: []string{"ckpt-new"}},
}, Want: "kill:rank=R|host=H,at=FRACTION[,disk=lost] or kill:rank=R|host=H,phase=ckpt-new"}

func parseInject(s string) (*injectSpec, error) {
	k, err := inject.Parse(s, injectGrammar)
	if err != nil {
		return nil, err
	}
	in := &injectSpec{rank: k.Int("rank"), host: k.Text("host"), at: k.Float("at"), diskLost: k.Has("disk"), phase: k.Text("phase")}
	if in.phase != "" && (in.at >= 0 || in.diskLost) {
		return nil, k.Errorf("phase=ckpt-new kills in the setup: give no at or disk")
	}
	if in.at < 0 && in.phase == "" {
		return nil, k.Errorf("give at=FRACTION or phase=ckpt-new")
	}
	return in, nil
}

func parseSort(args []string, stdout, stderr io.Writer) (*sortFlags, error) {
	f := &sortFlags{}
	fs := flag.NewFlagSet("terasort sort", flag.ContinueOnError)
	fs.SetOutput(stderr)
	def := kvshuffle.DefaultConfig()
	fs.StringVar(&f.in, "in", "", "input `DIR` of part files (any number), or one FILE")
	fs.StringVar(&f.out, "out", "", "output `DIR`, new or empty: rank r writes DIR/part-NNNNN, then DIR/_SUCCESS marks it complete")
	fs.BoolVar(&f.replace, "replace", false, "remove the output of a previous terasort sort from --out first (its _SUCCESS marker, the parts it lists, leftover .tmp files and spill directories; anything else there is refused)")
	fs.Int64Var(&f.memory, "memory", def.MemoryBudget, "received data a rank holds in memory, in `BYTES` (kvshuffle MemoryBudget); above it sorted runs spill to --spill")
	fs.StringVar(&f.spill, "spill", "", "spill `DIR` (default: under --out, the same disk as the output); %h in it becomes the process's host label (PGAS_HOST)")
	fs.IntVar(&f.sample, "sample", 10000, "keys each rank samples for the splitters")
	fs.Int64Var(&f.ckptEvery, "ckpt-records", 0, "take a key-count checkpoint every `C` records sent per rank (0: none; a failure is then fatal)")
	fs.IntVar(&f.mirrors, "mirrors", 1, "copies of each checkpoint on other ranks")
	fs.StringVar(&f.schedule, "schedule", "diagonal", "exchange `ORDER`: diagonal (contention-free) or naive (every rank serves partition 0 first, for comparison)")
	fs.BoolVar(&f.ckptMem, "ckpt-in-memory", false, "checkpoints carry the received data held in memory (mirrored to other ranks) instead of spilling it to --spill; files spilled under --memory pressure are named, and copied to holders on other hosts as by default")
	inj := fs.String("inject", "", "inject a failure: kill:rank=R,at=FRACTION sends SIGKILL to rank R's own process after it sent FRACTION of its input records (kill:host=H,at=F: every rank of host label H, each at its own FRACTION); with ,disk=lost the process first removes its spill directory (needs --spill with %h), as the loss of its host would; kill:rank=R,phase=ckpt-new kills it in the setup, before the checkpointer's creation")
	fs.BoolVar(&f.pageCache, "page-cache", false, "write the output and the spill files through the page cache (default: around it with O_DIRECT where the file system allows, which costs a tenth of the CPU for files written once)")
	fs.BoolVar(&f.verbose, "v", false, "log shuffle and checkpoint events to stderr")
	fs.StringVar(&f.cpuprof, "cpuprofile", "", "write each process's CPU profile to `PREFIX`.r<rank> (for go tool pprof)")
	pos, err := cli.Parse(fs, args, stdout)
	if err != nil {
		return nil, err
	}
	switch {
	case len(pos) > 0:
		return nil, usageErr("unexpected argument %q: use --in and --out", pos[0])
	case f.in == "" || f.out == "":
		return nil, usageErr("give --in DIR|FILE and --out DIR")
	case f.sample < 1:
		return nil, usageErr("--sample %d: want at least 1 key per rank", f.sample)
	case f.ckptEvery < 0:
		return nil, usageErr("--ckpt-records %d: want 0 (off) or a positive number of records", f.ckptEvery)
	case f.mirrors < 1:
		return nil, usageErr("--mirrors %d: want at least 1", f.mirrors)
	case f.schedule != "diagonal" && f.schedule != "naive":
		return nil, usageErr("--schedule %q: want diagonal or naive", f.schedule)
	}
	if *inj != "" {
		in, err := parseInject(*inj)
		if err != nil {
			return nil, usageErr("%v", err)
		}
		if f.ckptEvery == 0 {
			return nil, usageErr("--inject needs checkpoints to recover from: set --ckpt-records")
		}
		if in.diskLost && !strings.Contains(f.spill, "%h") {
			return nil, usageErr("--inject disk=lost removes the spill directory of the killed process: give every host its own with --spill DIR/%%h")
		}
		f.inject = in
	}
	if _, err := f.shuffleConfig(0); err != nil {
		return nil, usageErr("%v", err)
	}
	if _, err := os.Stat(f.in); err != nil {
		return nil, usageErr("--in %s: %v", f.in, errors.Unwrap(err))
	}
	if err := terasort.CheckOutputPath(f.out, f.in); err != nil {
		return nil, usageErr("%v", err)
	}
	return f, nil
}

// shuffleConfig returns the kvshuffle settings for these flags (rank
// for the logger).
func (f *sortFlags) shuffleConfig(rank int) (kvshuffle.Config, error) {
	cfg := kvshuffle.DefaultConfig()
	cfg.MemoryBudget = f.memory
	// Frames of up to 512 KiB (a sixteenth of the budget, at least the
	// default 128 KiB): a quarter of the writes, notifications and credits
	// of 128 KiB frames, for 4 * ranks * SlotSize of receive rings and
	// 2 * ranks * SlotSize of send buffers (12 MiB at 4 ranks).
	cfg.SlotSize = int(min(512<<10, max(int64(cfg.SlotSize), f.memory/16)))
	// Blocks (runs) of a quarter of the budget, at least one frame: the
	// merger sorts each sealed one and spills it as it lies (no merge)
	// while the drain fills the next; at 4 ranks and 1 GiB a rank spills
	// about 14 files, which the final merge reads at once.
	cfg.RunSize = max(min(cfg.RunSize, f.memory/4), int64(cfg.SlotSize))
	// Spill files written and read 1 MiB at a time.
	cfg.IOBufferSize = 1 << 20
	cfg.SpillDir = f.spill
	cfg.PageCache = f.pageCache
	if cfg.SpillDir == "" {
		cfg.SpillDir = f.out
	}
	// A key-count checkpoint spills what memory holds, so the checkpoint
	// names files (pinned until a later one) and stays small.
	cfg.CheckpointSpill = !f.ckptMem
	if f.schedule == "naive" {
		cfg.Schedule = kvshuffle.Naive
	}
	if f.verbose {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil)).With("rank", rank)
	}
	if err := cfg.Validate(); err != nil {
		var ce *kvshuffle.ConfigError
		if errors.As(err, &ce) && (ce.Field == "MemoryBudget" || ce.Field == "RunSize") {
			return cfg, fmt.Errorf("--memory %d: want at least %d bytes (16 frames of %d)", f.memory, 16*cfg.SlotSize, cfg.SlotSize)
		}
		return cfg, err
	}
	return cfg, nil
}

func cmdSort(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseSort(args, stdout, stderr)
	if err != nil {
		return err
	}
	rt, err := job.Init(ctx, job.Options{FaultTolerant: true})
	if err != nil {
		if ctx.Err() != nil {
			return &cli.ExitError{Code: 128 + int(syscall.SIGTERM)}
		}
		if code := job.ExitCode(err); code != 0 {
			return &cli.ExitError{Code: code, Msg: err.Error()}
		}
		return nil // a spare the job did not need
	}
	defer rt.Close()
	if rt.Rank() < 0 && rt.Fenced() {
		// A spare promoted and replaced again before it got going.
		return &cli.ExitError{Code: job.ExitCode(pgas.ErrFenced), Msg: "this process was replaced before it started: " + pgas.ErrFenced.Error()}
	}
	if f.cpuprof != "" {
		stopProf, err := startCPUProfile(fmt.Sprintf("%s.r%d", f.cpuprof, rt.Rank()))
		if err != nil {
			return &cli.ExitError{Code: 1, Msg: fmt.Sprintf("--cpuprofile: %v", err)}
		}
		defer stopProf()
	}
	cfg, err := f.distConfig(rt.Rank(), stdout)
	if err != nil {
		return &cli.ExitError{Code: 1, Msg: fmt.Sprintf("rank %d: %v", rt.Rank(), err)}
	}
	err = terasort.DistSort(ctx, rt, cfg)
	if ie := cli.Interrupted(ctx, err); ie != err {
		return ie // said once for every rank, without a rank or a chain
	}
	var refused *terasort.OutputRefusedError
	var bad *cli.ExitError
	var failed *terasort.RankError
	switch {
	case errors.As(err, &refused):
		return cli.Usage("%v", refused)
	case errors.As(err, &bad):
		return bad // a usage error every rank finds (plan): no rank in it
	case errors.As(err, &failed):
		code := job.ExitCode(failed.Err)
		if code == 0 {
			code = 1
		}
		return &cli.ExitError{Code: code, Msg: failed.Error()}
	}
	return err
}

// distConfig returns the settings of this rank's sort.
func (f *sortFlags) distConfig(rank int, stdout io.Writer) (terasort.DistConfig, error) {
	sh, err := f.shuffleConfig(rank)
	if err != nil {
		return terasort.DistConfig{}, err
	}
	c := terasort.DistConfig{In: f.in, Out: f.out, Replace: f.replace, Sample: f.sample, CkptRecords: f.ckptEvery,
		Mirrors: f.mirrors, CkptInMemory: f.ckptMem, Shuffle: sh, Stdout: stdout}
	if f.inject != nil {
		c.Inject = f.inject.plan
	}
	return c, nil
}

// plan places the injection in a rank's send loop: the rank (or every
// rank of the host) named, at its own fraction of its input; never in a
// promoted spare.
func (in *injectSpec) plan(t terasort.InjectTarget) (*terasort.Injection, error) {
	if in.rank >= t.Size {
		return nil, cli.Usage("--inject rank=%d: the job has ranks 0..%d; name one of them", in.rank, t.Size-1)
	}
	if t.Spare || !(in.rank == t.Rank || (in.host != "" && in.host == t.Host)) {
		return nil, nil
	}
	if in.phase != "" {
		return &terasort.Injection{Phase: in.phase, Fire: in.fire}, nil
	}
	return &terasort.Injection{At: int64(math.Floor(in.at * float64(t.Records))), Fire: in.fire}, nil
}

// fire kills this process with SIGKILL, after removing its spill
// directory with disk=lost (as the loss of its host would).
func (in *injectSpec) fire(f terasort.Fault) error {
	if in.diskLost {
		if err := f.Shuffle.LoseSpillDir(); err != nil {
			return err
		}
		fmt.Fprintf(f.Out, "inject: rank %d's spill directory %s removed (its host's disk is lost)\n", f.Rank, f.SpillDir)
	}
	if in.phase != "" {
		inject.Fire(f.Out, f.Rank, "in the setup, before the checkpointer's creation")
	}
	inject.Fire(f.Out, f.Rank, fmt.Sprintf("after %d of its %d records", f.Sent, f.Records))
	return nil
}

// startCPUProfile starts the process's CPU profile into path; the
// returned function stops it and closes the file.
func startCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
