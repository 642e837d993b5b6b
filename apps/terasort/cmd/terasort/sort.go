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
// Consumed(). Each checkpoint first spills what the rank holds in memory
// (kvshuffle CheckpointSpill), so the state names spill files only; they
// stay on the local disk, pinned. When the job spans hosts (PGAS_HOST
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
// --spill DIR/%h gives every host label its own spill directory (on one
// machine standing in for several hosts), and --inject ...,disk=lost
// removes the killed process's spill directory first, as the loss of its
// host would.
// ---------------------------------------------------------------------------

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gaspigo/gaspigo/apps/terasort"
	"github.com/gaspigo/gaspigo/ckpt"
	"github.com/gaspigo/gaspigo/job"
	"github.com/gaspigo/gaspigo/kvshuffle"
	"github.com/gaspigo/gaspigo/pgas"
	"github.com/gaspigo/gaspigo/spares"
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
	replace   bool // remove a previous sort's output from out first
}

// injectSpec is --inject kill:rank=R|host=H,at=F[,disk=lost].
type injectSpec struct {
	rank     int    // -1 with host
	host     string // every rank of this host label (PGAS_HOST)
	at       float64
	diskLost bool // the process removes its spill directory before the kill
}

func parseInject(s string) (*injectSpec, error) {
	rest, ok := strings.CutPrefix(s, "kill:")
	if !ok {
		return nil, fmt.Errorf("--inject %q: want kill:rank=R|host=H,at=FRACTION[,disk=lost]", s)
	}
	in := &injectSpec{rank: -1, at: -1}
	for _, kv := range strings.Split(rest, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("--inject %q: %q is not key=value; want kill:rank=R,at=FRACTION", s, kv)
		}
		switch k {
		case "rank":
			r, err := strconv.Atoi(v)
			if err != nil || r < 0 {
				return nil, fmt.Errorf("--inject %q: rank %q: want a rank number >= 0", s, v)
			}
			in.rank = r
		case "host":
			if v == "" {
				return nil, fmt.Errorf("--inject %q: host is empty: want a host label (PGAS_HOST)", s)
			}
			in.host = v
		case "disk":
			if v != "lost" {
				return nil, fmt.Errorf("--inject %q: disk %q: the only value is lost", s, v)
			}
			in.diskLost = true
		case "at":
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || !(f >= 0 && f <= 1) {
				return nil, fmt.Errorf("--inject %q: at %q: want a fraction of the rank's input in [0, 1]", s, v)
			}
			in.at = f
		default:
			return nil, fmt.Errorf("--inject %q: unknown key %q; want kill:rank=R|host=H,at=FRACTION[,disk=lost]", s, k)
		}
	}
	if (in.rank < 0) == (in.host == "") || in.at < 0 {
		return nil, fmt.Errorf("--inject %q: give rank=R or host=H, and at=FRACTION", s)
	}
	return in, nil
}

func parseSort(args []string, stderr io.Writer) (*sortFlags, error) {
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
	inj := fs.String("inject", "", "inject a failure: kill:rank=R,at=FRACTION sends SIGKILL to rank R's own process after it sent FRACTION of its input records (kill:host=H,at=F: every rank of host label H, each at its own FRACTION); with ,disk=lost the process first removes its spill directory (needs --spill with %h), as the loss of its host would")
	fs.BoolVar(&f.verbose, "v", false, "log shuffle and checkpoint events to stderr")
	pos, err := parseInterleaved(fs, args)
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
	// Runs of a quarter of the budget, at least one frame: several runs
	// fit, and the merger works while the drain fills the next one.
	cfg.RunSize = max(min(cfg.RunSize, f.memory/4), int64(cfg.SlotSize))
	cfg.SpillDir = f.spill
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
	f, err := parseSort(args, stderr)
	if err != nil {
		return err
	}
	rt, err := job.Init(ctx, job.Options{FaultTolerant: true})
	if err != nil {
		if ctx.Err() != nil {
			return &exitError{code: 128 + int(syscall.SIGTERM)}
		}
		if code := spares.ExitCodeOf(err); code != 0 {
			return &exitError{code: code, msg: err.Error()}
		}
		return nil // a spare the job did not need
	}
	defer rt.Close()
	if rt.Rank() < 0 && rt.Fenced() {
		// A spare promoted and replaced again before it got going.
		return &exitError{code: spares.ExitCodeOf(pgas.ErrFenced), msg: "this process was replaced before it started: " + pgas.ErrFenced.Error()}
	}
	if !rt.StartedAsSpare() {
		// Before any rank writes to --out: rank 0 checks it, and every
		// rank learns the verdict from one agreement, so that a refused
		// directory ends every rank with the same usage error.
		var refused error
		verdict := []int64{0}
		if rt.Rank() == 0 {
			remove, err := terasort.PlanOutput(f.out, f.in, f.replace)
			if err == nil {
				err = terasort.RemoveOutput(remove)
				if err == nil && len(remove) > 0 {
					fmt.Fprintf(stdout, "sort: --replace: removed %d entries of a previous sort from %s\n", len(remove), f.out)
				}
			}
			if err != nil {
				refused, verdict[0] = err, 1
			}
		}
		// A failure during the agreement is left to the job's own
		// recovery below; the verdict is only known when it completes.
		if err := pgas.Allreduce(ctx, rt, nil, verdict, pgas.OpMax); err == nil && verdict[0] != 0 && refused == nil {
			refused = fmt.Errorf("rank 0 refused --out %s (its message says why)", f.out)
		}
		if refused != nil {
			return &exitError{code: 2, msg: refused.Error()}
		}
	}
	if err := os.MkdirAll(f.out, 0o700); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	j := &sortJob{f: f, rt: rt, out: stdout}
	defer rt.Close()
	if err := j.run(ctx); err != nil {
		code := spares.ExitCodeOf(err)
		if code == 0 {
			code = 1
		}
		return &exitError{code: code, msg: fmt.Sprintf("rank %d: %v", rt.Rank(), err)}
	}
	return nil
}

// sortJob is one rank's part of the distributed sort.
type sortJob struct {
	f   *sortFlags
	rt  *pgas.Runtime
	out io.Writer

	shards []terasort.Shard
	total  int64 // records in the whole input
	mine   int64 // records in this rank's shards
	part   *terasort.Partitioner

	cfg     kvshuffle.Config
	sh      *kvshuffle.Shuffle
	ck      *ckpt.Checkpointer
	hdr     []byte // ckpt region: splitters, fixed size
	state   []byte // ckpt region: 8-byte length + shuffle state
	phase   []byte // ckpt region: done flag, total records, total checksum (u64 each)
	maxCk   int64  // last checkpoint count every rank reaches
	done    bool   // every part is written and the totals agreed (final checkpoint)
	totals  terasort.Summary
	killAt  int64 // record index of the injected kill; -1 none
	recov   int
	ckpts   int
	ckptDur time.Duration
}

func (j *sortJob) printf(format string, args ...any) {
	if j.rt.Rank() == 0 {
		fmt.Fprintf(j.out, format, args...)
	}
}

// start samples the splitters, creates the shuffle and takes checkpoint 1
// (nothing sent yet): the job's beginning, and where every rank starts
// over when a rank fails before checkpoint 1 was committed.
func (j *sortJob) start(ctx context.Context, over bool) error {
	n := j.rt.Size()
	sample, err := terasort.SampleShards(j.shards, j.f.sample)
	if err != nil {
		return err
	}
	sp, err := kvshuffle.SampleSplitters(ctx, j.rt, sample, n, nil)
	if err != nil {
		return err
	}
	if err := j.setSplitters(sp); err != nil {
		return err
	}
	if j.sh == nil {
		if j.sh, err = kvshuffle.New(ctx, j.rt, j.cfg); err != nil {
			j.sh = nil
			return err
		}
	}
	if over {
		// Every rank rolls back to the empty state, as in any recovery
		// (a new rank's New pairs with the survivors' segment rejoin).
		if err := j.sh.RollBack(ctx, nil); err != nil {
			return err
		}
	}
	if j.ck == nil {
		return nil
	}
	binary.LittleEndian.PutUint64(j.state, 0)
	return j.commit(ctx, 1)
}

// recoverLoop takes err from a phase of the job and recovers until the
// job can go on: nil when err is nil or once the ranks rolled back (or
// started over), else the error that ends the job.
func (j *sortJob) recoverLoop(ctx context.Context, err error) error {
	for err != nil {
		switch {
		case errors.Is(err, errStartOver):
			j.printf("recovery: no checkpoint was committed yet: every rank starts over\n")
			err = j.start(ctx, true)
		case !needsRecovery(err) && !errors.Is(err, kvshuffle.ErrAborted):
			return err
		case j.ck == nil:
			return fmt.Errorf("%w (no checkpoints: set --ckpt-records and run with gaspirun --spares to recover)", err)
		default:
			err = j.rejoin(ctx, err)
		}
	}
	return nil
}

func (j *sortJob) run(ctx context.Context) error {
	rank, n := j.rt.Rank(), j.rt.Size()
	t0 := time.Now()
	paths, err := terasort.ResolveInputs([]string{j.f.in})
	if err != nil {
		return err
	}
	j.shards, j.total, err = terasort.SplitInputs(paths, n, rank)
	if err != nil {
		return err
	}
	j.mine = terasort.ShardRecords(j.shards)
	j.killAt = -1
	if in := j.f.inject; in != nil && (in.rank == rank || (in.host != "" && in.host == j.rt.Host(rank))) && !j.rt.StartedAsSpare() {
		j.killAt = int64(math.Floor(in.at * float64(j.mine)))
	}
	if in := j.f.inject; in != nil && in.rank >= n {
		return fmt.Errorf("--inject rank=%d: the job has ranks 0..%d", in.rank, n-1)
	}
	cfg, err := j.f.shuffleConfig(rank)
	if err != nil {
		return err
	}
	cfg.SpillDir = strings.ReplaceAll(cfg.SpillDir, "%h", hostDir(j.rt.Host(rank)))
	// The partitioner is set once the splitters are known (a promoted
	// spare learns them from the checkpoint, after New).
	cfg.Partition = func(key []byte, parts int) int { return j.part.Partition(key[:terasort.KeySize]) }
	if j.f.ckptEvery > 0 {
		// Spill files a checkpoint names are copied to the rank's mirror
		// holder when it is on another host (kvshuffle Config.Holders).
		cfg.Holders = func(r int) []int { return j.ck.Holders(r) }
	}
	j.hdr = make([]byte, (n-1)*terasort.KeySize)
	j.cfg = cfg
	// The checkpoints come first, so that a failure anywhere after this
	// point (the sampling included) is recovered: with no checkpoint
	// committed yet, every rank starts over (errStartOver).
	if j.f.ckptEvery > 0 {
		err = j.newCheckpoints(ctx)
		if j.ck != nil {
			defer j.ck.Close()
		}
	}
	if err == nil {
		if j.rt.StartedAsSpare() {
			// Join the survivors' recovery: restore, then the shuffle (New
			// pairs with their RollBack's segment rejoin), then roll back.
			err = j.rejoin(ctx, nil)
		} else {
			err = j.start(ctx, false)
		}
	}
	defer func() {
		if j.sh != nil {
			j.sh.Close()
		}
	}()
	tSample := time.Since(t0)
	if err = j.recoverLoop(ctx, err); err != nil {
		return err
	}

	tmp := filepath.Join(j.f.out, terasort.PartName(rank)+".tmp")
	var sum terasort.Summary
	var st kvshuffle.Stats
	tShuffle := time.Now()
	printed := false
	for {
		// Until every rank's part is written and agreed (the final
		// checkpoint, which records the totals): a failure anywhere on the
		// way rolls every rank back and the attempt is made again.
		for !j.done {
			sum, err = j.attempt(ctx, tmp)
			if err == nil {
				st = j.sh.Stats()
				err = j.finish(ctx, tmp, sum)
			}
			if err != nil {
				if err = j.recoverLoop(ctx, err); err != nil {
					return err
				}
			}
		}
		if !printed {
			printed = true
			shuffleTime := time.Since(tShuffle)
			if sum.Records > 0 || st.PairsSent > 0 {
				fmt.Fprintf(j.out, "sort: rank %d input=%d output=%d pairs_sent=%d pairs_received=%d spills=%d spill_bytes=%d copied_bytes=%d held_bytes=%d fetched_bytes=%d memory_peak=%d budget=%d rss_peak=%s\n",
					rank, j.mine, sum.Records, st.PairsSent, st.PairsReceived, st.Spills, st.SpillBytes, st.CopiedBytes, st.HeldBytes, st.FetchedBytes, st.MemoryPeak, j.f.memory, peakRSS())
			}
			j.printf("sort: ranks=%d records=%d sample=%.3fs shuffle+write=%.3fs total=%.3fs (%.0f MB/s) checkpoints=%d (%.3fs) recoveries=%d\n",
				n, j.total, tSample.Seconds(), shuffleTime.Seconds(), time.Since(t0).Seconds(),
				float64(j.total*terasort.RecordSize)/1e6/time.Since(t0).Seconds(), j.ckpts, j.ckptDur.Seconds(), j.recov)
			if err := j.markComplete(ctx); err != nil {
				return err
			}
			j.printf("%s\n", j.totals)
		}
		// A rank or spare lost while the ranks finalize: every rank
		// recovers (the final checkpoint as a rule, else the sort goes on
		// from an earlier one) and they finalize again.
		err := j.rt.Finalize(ctx)
		if err == nil || !pgas.NeedsRecovery(err) || j.ck == nil {
			return finalizeErr(err)
		}
		if err := j.recoverLoop(ctx, err); err != nil {
			return err
		}
	}
}

// markComplete writes the marker of a complete output (rank 0) once every
// rank's part is in place: after the final checkpoint's commit, or
// without checkpoints after a barrier.
func (j *sortJob) markComplete(ctx context.Context) error {
	if j.ck == nil {
		if err := j.rt.Barrier(ctx, nil); err != nil {
			return fmt.Errorf("terasort: waiting for every part before marking %s complete: %w", j.f.out, err)
		}
	}
	if j.rt.Rank() != 0 {
		return nil
	}
	return terasort.WriteSuccess(j.f.out, j.rt.Size(), j.totals)
}

// hostDir turns a host label into a path element for --spill's %h.
func hostDir(label string) string {
	if label == "" {
		label, _ = os.Hostname()
	}
	label = strings.NewReplacer("/", "_", "\x00", "_").Replace(label)
	if label == "" || label == "." || label == ".." {
		label = "host"
	}
	return label
}

// finalizeErr reports a failed Finalize on stderr only: every part is
// written and agreed by then, so the rank's work is done.
func finalizeErr(err error) error {
	if err != nil && !errors.Is(err, pgas.ErrClosed) {
		fmt.Fprintf(os.Stderr, "terasort sort: finalize: %v\n", err)
	}
	return nil
}

// finish agrees on the totals, renames this rank's part into place, and
// takes the final checkpoint, which records the totals: from then on a
// recovery restores the finished state instead of sorting again.
func (j *sortJob) finish(ctx context.Context, tmp string, sum terasort.Summary) error {
	all, err := pgas.Allgather(ctx, j.rt, nil, []uint64{uint64(sum.Records), sum.Checksum})
	if err != nil {
		return err
	}
	var total terasort.Summary
	for r := range j.rt.Size() {
		total = total.Add(terasort.Summary{Records: int64(all[2*r]), Checksum: all[2*r+1]})
	}
	if total.Records != j.total {
		return fmt.Errorf("terasort: sorted %d records, the input has %d", total.Records, j.total)
	}
	if err := os.Rename(tmp, filepath.Join(j.f.out, terasort.PartName(j.rt.Rank()))); err != nil {
		return fmt.Errorf("terasort: %w", err)
	}
	if j.ck != nil {
		binary.LittleEndian.PutUint64(j.phase[0:], 1)
		binary.LittleEndian.PutUint64(j.phase[8:], uint64(total.Records))
		binary.LittleEndian.PutUint64(j.phase[16:], total.Checksum)
		id := uint64(j.maxCk) + 2 // above every shuffle checkpoint (c+1 <= maxCk+1)
		err := j.ck.Start(ctx, id)
		if err == nil {
			err = j.ck.Commit(ctx, id)
		}
		if err != nil {
			clear(j.phase)
			return err
		}
	}
	j.done, j.totals = true, total
	return nil
}
