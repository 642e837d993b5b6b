package terasort

// The distributed sort, one process per rank under gaspirun; `terasort
// sort` is its command, and cmd/terasort/sort.go says what it does.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gaspigo/gaspigo/apps/internal/recovery"
	"github.com/gaspigo/gaspigo/ckpt"
	"github.com/gaspigo/gaspigo/internal/directio"
	"github.com/gaspigo/gaspigo/kvshuffle"
	"github.com/gaspigo/gaspigo/pgas"
)

// DistConfig is one rank's settings of the distributed sort (DistSort). Every
// rank of a job must pass the same values (Inject aside).
type DistConfig struct {
	In      string // input: a directory of part files (any number), or one file
	Out     string // output directory, new or empty (PlanOutput)
	Replace bool   // remove a previous sort's output from Out first
	Sample  int    // keys each rank samples for the splitters, >= 1
	// CkptRecords takes a key-count checkpoint every CkptRecords records
	// sent per rank; 0: none (a failure is then fatal).
	CkptRecords  int64
	Mirrors      int  // copies of each checkpoint on other ranks, >= 1
	CkptInMemory bool // checkpoints carry the received data held in memory instead of spilling it
	// Shuffle is the shuffle's configuration (validated); %h in its
	// SpillDir becomes the process's host label. DistSort sets Partition and
	// (with checkpoints) Holders.
	Shuffle kvshuffle.Config
	// Inject, when set, is asked once per rank (a promoted spare too)
	// for a fault to plant in its send loop; nil Injection: none. Its
	// error ends the rank.
	Inject func(InjectTarget) (*Injection, error)
	// Stdout receives the progress and result lines (rank 0's, and each
	// rank's own statistics line). Rank 0's progress: "sort: sent S of N
	// records; checkpoint S started" at each checkpoint it starts, "sort:
	// sent N of N records; merging and writing" once its sending is done
	// (S and N count its own input), and "sort: wrote W records of its
	// part" every CkptRecords records it writes; the logical clock
	// test/chaos aims TeraSort's faults at.
	Stdout io.Writer
}

// InjectTarget is the rank DistConfig.Inject is asked about.
type InjectTarget struct {
	Rank, Size int
	Host       string // the rank's host label (PGAS_HOST)
	Records    int64  // records in the rank's input
	Spare      bool   // the process started as a spare (promoted into Rank)
}

// Injection is a fault in one rank's send loop: Fire runs before the
// rank sends its record At (counted in its own input), the first time it
// gets there; or, with Phase "ckpt-new", in the setup of a starting rank,
// before the checkpointer's collective creation (ckpt.New), while the
// other ranks are inside it (At and Fault.Shuffle unused). An error from
// Fire ends the rank.
type Injection struct {
	At    int64
	Phase string // "": the send loop; "ckpt-new": the setup
	Fire  func(Fault) error
}

// Fault is what an Injection acts on.
type Fault struct {
	Rank     int
	Sent     int64 // records of the rank's input sent so far (== At; 0 in the setup)
	Records  int64 // records in the rank's input
	Shuffle  *kvshuffle.Shuffle
	SpillDir string // the rank's spill directory (Shuffle.LoseSpillDir removes it)
	Out      io.Writer
}

// OutputRefusedError: rank 0 refused Out (PlanOutput); every rank
// returns it before any rank wrote anything. Err says why.
type OutputRefusedError struct{ Err error }

func (e *OutputRefusedError) Error() string { return e.Err.Error() }
func (e *OutputRefusedError) Unwrap() error { return e.Err }

// RankError is a failure of one rank's sort after it started.
type RankError struct {
	Rank int
	Err  error
}

func (e *RankError) Error() string { return fmt.Sprintf("rank %d: %v", e.Rank, e.Err) }
func (e *RankError) Unwrap() error { return e.Err }

// DistSort runs this process's part of the distributed sort over rt. Before
// any rank writes to Out, rank 0 checks it (and removes a previous sort's
// output with Replace) and every rank learns the verdict from one
// agreement: a refused directory is an *OutputRefusedError on every rank.
// A failure of the sort itself is a *RankError; its Err is a membership
// error (job.ExitCode) when the job cannot go on.
func DistSort(ctx context.Context, rt *pgas.Runtime, c DistConfig) error {
	if c.Stdout == nil {
		c.Stdout = io.Discard
	}
	if !rt.StartedAsSpare() {
		var refused error
		verdict := []int64{0}
		if rt.Rank() == 0 {
			remove, err := PlanOutput(c.Out, c.In, c.Replace)
			if err == nil {
				err = RemoveOutput(remove)
				if err == nil && len(remove) > 0 {
					fmt.Fprintf(c.Stdout, "sort: --replace: removed %d entries of a previous sort from %s\n", len(remove), c.Out)
				}
			}
			if err != nil {
				refused, verdict[0] = err, 1
			}
		}
		// A failure during the agreement is left to the job's own
		// recovery below; the verdict is only known when it completes.
		if err := pgas.Allreduce(ctx, rt, nil, verdict, pgas.OpMax); err == nil && verdict[0] != 0 && refused == nil {
			refused = fmt.Errorf("rank 0 refused --out %s (its message says why)", c.Out)
		}
		if refused != nil {
			return &OutputRefusedError{Err: refused}
		}
	}
	if err := os.MkdirAll(c.Out, 0o700); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	j := &sortJob{c: c, rt: rt}
	if err := j.run(ctx); err != nil {
		if errors.Is(err, pgas.ErrFinished) {
			// A spare promoted for a rank that had already written its
			// part and reached the end: the job finished while it
			// recovered, and the sort is whole (as recovery.Finalize).
			return nil
		}
		return &RankError{Rank: rt.Rank(), Err: err}
	}
	return nil
}

// setSplitters installs the agreed splitters and copies them into the
// checkpoint header region.
func (j *sortJob) setSplitters(sp [][]byte) error {
	if len(sp)*KeySize != len(j.hdr) {
		return fmt.Errorf("terasort: %d splitters for %d ranks, want %d", len(sp), j.rt.Size(), j.rt.Size()-1)
	}
	for i, s := range sp {
		if len(s) != KeySize {
			return fmt.Errorf("terasort: splitter %d has %d bytes, want %d", i, len(s), KeySize)
		}
		copy(j.hdr[i*KeySize:], s)
	}
	p, err := NewPartitioner(sp)
	if err != nil {
		return err
	}
	j.part = p
	return nil
}

// splittersFromHeader reads the splitters back from the header region.
func (j *sortJob) splittersFromHeader() error {
	sp := make([][]byte, len(j.hdr)/KeySize)
	for i := range sp {
		sp[i] = bytes.Clone(j.hdr[i*KeySize : (i+1)*KeySize])
	}
	return j.setSplitters(sp)
}

// attempt sends this rank's records from Consumed() on (checkpointing on
// the way), ends the stream, and writes the received partition to tmp.
func (j *sortJob) attempt(ctx context.Context, tmp string) (Summary, error) {
	j.attemptStart = time.Now()
	from := int64(j.sh.Consumed())
	next := j.nextCheckpoint(from) // the next checkpoint's record count
	err := ReadShards(ctx, j.shards, from, 0, func(blk []byte, first int64) error {
		return j.sendBlock(ctx, blk, first, &next)
	})
	if err != nil {
		return Summary{}, err
	}
	if err := j.sh.CloseSend(ctx); err != nil {
		return Summary{}, err
	}
	j.sendDur = time.Since(j.attemptStart)
	j.printf("sort: sent %d of %d records; merging and writing\n", j.mine, j.mine)
	return j.writePart(ctx, tmp)
}

// nextCheckpoint is the record count of the first checkpoint after record
// i, or -1 when no checkpoint comes after it.
func (j *sortJob) nextCheckpoint(i int64) int64 {
	if j.ck == nil || j.c.CkptRecords <= 0 {
		return -1
	}
	next := (i/j.c.CkptRecords + 1) * j.c.CkptRecords
	if next > j.maxCk {
		return -1
	}
	return next
}

// sendBlock sends the records of blk, the first of which is record
// number first, and marks them consumed; on the way it takes the
// checkpoint due at *next (then the next one) and fires the injection
// due in the send phase.
func (j *sortJob) sendBlock(ctx context.Context, blk []byte, first int64, next *int64) error {
	end := first + int64(len(blk)/RecordSize)
	sendInject := j.inject != nil && j.inject.Phase == ""
	for i := first; i < end; {
		if i == *next {
			if err := j.checkpoint(ctx, uint64(i)+1); err != nil {
				return err
			}
			j.printf("sort: sent %d of %d records; checkpoint %d started\n", i, j.mine, i)
			*next = j.nextCheckpoint(i)
		}
		if sendInject && i == j.inject.At {
			f := Fault{Rank: j.rt.Rank(), Sent: i, Records: j.mine, Shuffle: j.sh, SpillDir: j.cfg.SpillDir, Out: j.c.Stdout}
			if err := j.inject.Fire(f); err != nil {
				return fmt.Errorf("inject: %w", err)
			}
		}
		// The records up to the next checkpoint or injection go in one
		// call.
		stop := end
		if *next > i && *next < stop {
			stop = *next
		}
		if sendInject && j.inject.At > i && j.inject.At < stop {
			stop = j.inject.At
		}
		lo := int(i-first) * RecordSize
		if _, err := j.sh.SendKeys(ctx, blk[lo:int(stop-first)*RecordSize], RecordSize); err != nil {
			return err
		}
		i = stop
	}
	return j.sh.MarkConsumed(uint64(end))
}

// writePart writes the partition this rank receives to tmp and returns
// its summary, once the shuffle ended and the checkpoint being committed
// is.
func (j *sortJob) writePart(ctx context.Context, tmp string) (Summary, error) {
	var sum Summary
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return sum, fmt.Errorf("terasort: %w", err)
	}
	// The output goes out in 1 MiB writes around the page cache (unless
	// the shuffle's PageCache is set): it is written once.
	w := directio.NewBuffer(directio.NewWriter(f, !j.cfg.PageCache), 1<<20)
	var werr error
	// Rank 0's progress: a line every CkptRecords records written.
	say := int64(-1)
	if j.c.CkptRecords > 0 && j.rt.Rank() == 0 {
		say = j.c.CkptRecords
	}
	for k, v := range j.sh.Recv(ctx) {
		if len(k) != RecordSize || len(v) != 0 {
			werr = fmt.Errorf("terasort: received a pair of %d+%d bytes, want a %d-byte record", len(k), len(v), RecordSize)
			break
		}
		sum.Records++
		sum.Checksum += uint64(RecordCRC(k))
		if _, werr = w.Write(k); werr != nil {
			break
		}
		if sum.Records == say {
			j.printf("sort: wrote %d records of its part\n", sum.Records)
			say += j.c.CkptRecords
		}
	}
	if err := j.sh.Err(); err != nil {
		f.Close()
		return sum, err
	}
	if err := j.joinCommit(); err != nil {
		f.Close()
		return sum, err
	}
	if werr == nil {
		werr = w.Flush()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return sum, fmt.Errorf("terasort: write %s: %w", tmp, werr)
	}
	return sum, nil
}

// sortJob is one rank's part of the distributed sort.
type sortJob struct {
	c  DistConfig
	rt *pgas.Runtime

	shards []Shard
	total  int64 // records in the whole input
	mine   int64 // records in this rank's shards
	part   *Partitioner

	cfg     kvshuffle.Config
	sh      *kvshuffle.Shuffle
	ck      *ckpt.Checkpointer
	hdr     []byte // ckpt region: splitters, fixed size
	state   []byte // ckpt region: 8-byte length + shuffle state
	phase   []byte // ckpt region: done flag, total records, total checksum (u64 each)
	maxCk   int64  // last checkpoint count every rank reaches
	done    bool   // every part is written and the totals agreed (final checkpoint)
	totals  Summary
	inject  *Injection // nil: none
	recov   int
	ckpts   int
	ckptDur time.Duration // the send loop's time in checkpoint (marking, waiting for the previous commit)
	ckptBg  time.Duration // the committer's time, in the background
	cm      *committer    // the checkpoint being committed, nil for none

	attemptStart time.Time     // the last attempt's start
	sendDur      time.Duration // its sending: from the start to CloseSend's return
}

func (j *sortJob) printf(format string, args ...any) {
	if j.rt.Rank() == 0 {
		fmt.Fprintf(j.c.Stdout, format, args...)
	}
}

// start samples the splitters, creates the shuffle and takes checkpoint 1
// (nothing sent yet): the job's beginning, and where every rank starts
// over when a rank fails before checkpoint 1 was committed.
func (j *sortJob) start(ctx context.Context, over bool) error {
	n := j.rt.Size()
	sample, err := SampleShards(j.shards, j.c.Sample)
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
	if err != nil {
		j.abandonCommit()
	}
	for err != nil {
		switch {
		case ctx.Err() != nil:
			return err // interrupted: no recovery to announce
		case errors.Is(err, errStartOver):
			j.printf("recovery: no checkpoint was committed yet: every rank starts over\n")
			err = j.start(ctx, true)
		case !recovery.Needed(err) && !errors.Is(err, kvshuffle.ErrAborted):
			return err
		case j.ck == nil:
			return fmt.Errorf("%w (no checkpoints: set --ckpt-records and run with gaspirun --spares to recover)", err)
		default:
			err = j.rejoin(ctx, err)
		}
	}
	return nil
}

// run is the rank's whole sort: set up, create the checkpoints and the
// shuffle (or join the survivors' recovery as a spare), then attempt
// until every part is written and agreed, and finalize.
func (j *sortJob) run(ctx context.Context) (err error) {
	rank, t0 := j.rt.Rank(), time.Now()
	if err := j.setUp(); err != nil {
		return err
	}
	// The checkpoints come first, so that a failure anywhere after this
	// point (the sampling included) is recovered: with no checkpoint
	// committed yet, every rank starts over (errStartOver).
	if j.c.CkptRecords > 0 {
		if in := j.inject; in != nil && in.Phase == "ckpt-new" && !j.rt.StartedAsSpare() {
			if err := in.Fire(Fault{Rank: rank, Records: j.mine, Out: j.c.Stdout}); err != nil {
				return err
			}
		}
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
		j.abandonCommit()
		if j.sh != nil {
			j.sh.Close()
		}
	}()
	c := &completion{j: j, rank: rank, size: j.rt.Size(), t0: t0, tSample: time.Since(t0)}
	if err = j.recoverLoop(ctx, err); err != nil {
		return err
	}
	c.tmp = filepath.Join(j.c.Out, PartName(rank)+".tmp")
	defer func() {
		if err != nil {
			j.leaveOutput(c.tmp)
		}
	}()
	c.tShuffle = time.Now()
	if err := c.complete(ctx); err != nil {
		return err
	}
	if j.ck == nil {
		return finalizeErr(j.rt.Finalize(ctx))
	}
	// A rank or spare lost while the ranks finalize: every rank recovers
	// (the final checkpoint as a rule, else the sort goes on from an
	// earlier one) and they finalize again.
	err = recovery.Finalize(ctx, j.rt, func(ctx context.Context, cause error) error {
		if err := j.recoverLoop(ctx, cause); err != nil {
			return err
		}
		return c.complete(ctx)
	})
	if fe := (*recovery.FinalizeError)(nil); errors.As(err, &fe) {
		return finalizeErr(fe.Err)
	}
	return err
}

// setUp finds this rank's shards of the input, draws its injection and
// makes the shuffle's configuration.
func (j *sortJob) setUp() error {
	rank, n := j.rt.Rank(), j.rt.Size()
	paths, err := ResolveInputs([]string{j.c.In})
	if err != nil {
		return err
	}
	j.shards, j.total, err = SplitInputs(paths, n, rank)
	if err != nil {
		return err
	}
	j.mine = ShardRecords(j.shards)
	if j.c.Inject != nil {
		target := InjectTarget{Rank: rank, Size: n, Host: j.rt.Host(rank), Records: j.mine, Spare: j.rt.StartedAsSpare()}
		if j.inject, err = j.c.Inject(target); err != nil {
			return err
		}
	}
	cfg := j.c.Shuffle
	cfg.SpillDir = strings.ReplaceAll(cfg.SpillDir, "%h", hostDir(j.rt.Host(rank)))
	// The partitioner is set once the splitters are known (a promoted
	// spare learns them from the checkpoint, after New).
	cfg.Partition = func(key []byte, parts int) int { return j.part.Partition(key[:KeySize]) }
	if j.c.CkptRecords > 0 {
		// Spill files a checkpoint names are copied to the rank's mirror
		// holder when it is on another host (kvshuffle Config.Holders).
		cfg.Holders = func(r int) []int { return j.ck.Holders(r) }
	}
	j.hdr = make([]byte, (n-1)*KeySize)
	j.cfg = cfg
	return nil
}
