package kmeans

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"

	"github.com/gaspigo/gaspigo/apps/internal/recovery"
	"github.com/gaspigo/gaspigo/apps/kmeans/kernel"
	"github.com/gaspigo/gaspigo/apps/kmeans/points"
	"github.com/gaspigo/gaspigo/pgas"
)

// Checkpoints is what the job needs from package ckpt.
type Checkpoints interface {
	// Register adds a region to every checkpoint, in order.
	Register(name string, b []byte) error
	// Start snapshots the regions as checkpoint id and pushes it to the
	// mirrors in the background; Commit waits until every rank's mirror
	// holds it.
	Start(ctx context.Context, id uint64) error
	Commit(ctx context.Context, id uint64) error
	// Vote and Agreed are Commit in two halves, its agreement carried by
	// the iteration's reduction instead of an allreduce of its own.
	Vote(ctx context.Context, id uint64) (bool, error)
	Agreed(id uint64, allOK bool, err error) error
	// Restore is collective after a recovery: every rank gets the regions
	// of the last committed checkpoint back and its id (0: none).
	Restore(ctx context.Context) (uint64, error)
	// Holders returns the ranks holding rank's mirror.
	Holders(rank int) []int
}

// Options describe one K-means run.
type Options struct {
	Input   string           // points file (CSV or binary by extension); or Generate
	CSV     points.CSVLayout // how a CSV Input is laid out
	Gen     kernel.GenConfig // used when Input is ""
	K       int
	MaxIter int
	Tol     float64        // stop once no centroid moved farther; 0: run MaxIter
	Init    string         // starting centroids CSV; "" picks points by Seed (Seeding)
	Seeding kernel.Seeding // how Init == "" picks them: kernel.SeedRandom or SeedPlusPlus
	Seed    uint64         // for the choice of starting points
	Every   int            // checkpoint every Every iterations; 0: never
	Injects []Inject
	Stores  []Store // store injections (store.go): same-host stores that must stay fenced
	Kernel  kernel.Config
	// Shrink: the job goes on when a rank is lost with no spare left (the
	// membership must shrink too: spares.Config.Shrink). The vacant rank's
	// shard goes to the next live rank in ring order, which regenerates or
	// re-reads it, and the iteration's partials are combined per shard, in
	// shard order, so the result is the same bits however many ranks are
	// live (but not the same bits as a run without Shrink).
	Shrink bool
	// Shards fixes the number of logical shards of the data set (0: one
	// per rank). Shard s holds points [N*s/Shards, N*(s+1)/Shards); rank r
	// of R computes shards [Shards*r/R, Shards*(r+1)/R), each with its own
	// kernel, and the iteration's partials are combined per shard in shard
	// order (as with Shrink), so the result is the same bits on any number
	// of ranks up to Shards, and a job may resume from a disk checkpoint
	// on a different number of ranks (ResumeFrom).
	Shards   int
	Progress io.Writer // the lowest live rank's progress lines; nil: none
	// History receives the lowest live rank's per-iteration CSV lines
	// (HistoryHeader first); nil: none.
	History io.Writer
	// Leader, when set, returns the process (transport.Proc) that leads
	// the membership, if one is known (for kill:leader).
	Leader func() (proc int, ok bool)
	// MoveLeader, when set, moves the membership's leadership onto a
	// process that holds a rank and returns it (for kill:leader, when an
	// idle spare leads).
	MoveLeader func(ctx context.Context) (proc int, err error)
	// Kill carries out an injection that hit this rank: the command kills
	// its own process (SIGKILL), so it does not return as a rule; if it
	// does, the run goes on. Required when Injects is set.
	Kill func(Kill)
}

// RunResult is what a distributed run ends with, identical on every rank.
type RunResult struct {
	Centroids  []float64
	SSE        float64
	Iterations int
	Recoveries int
	// CheckpointTime is the time this rank's loop spent in checkpoint
	// Start (the copy) and Commit (waiting for the push, the agreement),
	// the checkpoints' cost on the critical path; Checkpoints counts the
	// commits. Both leave out the starting state's checkpoint (before the
	// loop). LoopTime is the time from the start of the loop to the end.
	CheckpointTime time.Duration
	Checkpoints    int
	LoopTime       time.Duration
	// Prune counts this rank's points by how the kernels settled them,
	// summed over the iterations this process ran; Algo is the algorithm
	// of its kernels (kernel.Config.Algo, AlgoAuto's choice, or what fits
	// Config.BoundsMemory; the cheapest if its kernels differ).
	Prune kernel.PruneStats
	Algo  kernel.Algo
}

// Job is one rank's part of a distributed K-means run. The data set is
// cut into logical shards (Options.Shards, or one per rank), fixed for the
// job: shard s holds points [N*s/S, N*(s+1)/S), and rank r of R is the
// home of shards [S*r/R, S*(r+1)/R).
type Job struct {
	rt  *pgas.Runtime
	opt Options
	st  *stores // the store injections' part (store.go)
	n   int     // points in the whole data set
	d   int
	own int // the rank this process held at the start: its home shards
	nsh int // number of logical shards

	// mine: the shards this rank computes, ascending: its home shards and
	// (Shrink) those of vacant ranks it took over. owner: who computes
	// each shard as this rank last agreed it. slots: the per-shard
	// reduction buffer.
	mine  []*shard
	owner []int
	slots []float64
	// portable: the state was loaded from another job's disk checkpoint
	// (ResumeFrom), which this job's checkpointer does not hold: Run takes
	// a starting checkpoint.
	portable bool
	// The checkpointed state: header (see the hdr* indices), centroids
	// and the home shards' assignments (the kernels' own slices).
	hdr      []uint64
	finished bool // the final checkpoint is committed (or restored)
	cent     []float64
	next     []float64
	buf      []float64
	counts   []int64
	ck       Checkpoints

	iter int // iterations completed
	high int // the most iterations the job ever completed (injections fire past it)
	// low: the fewest iterations the current ranks' holders completed, as
	// of the last restore (an injection naming a rank fires past it; see
	// inject). done: the most this process completed as a rank; iterated:
	// it completed one (a promoted spare or a resumed process contributes
	// nothing to low before).
	low, done int
	iterated  bool
	// promotedAt: for a process that started as a spare, the job's high
	// mark when its first restore made it a rank (-1 before): the
	// iteration after it is the one its predecessor was lost in.
	promotedAt int
	pending    uint64
	lastID     uint64 // the newest checkpoint id started or restored
	// fresh: the pending checkpoint follows an iteration completed for the
	// first time, so its commit may fire phase=commit injections.
	fresh bool
	// resumed: the job was resumed from a disk checkpoint (Resumed).
	resumed bool
	// setupErr: a collective step of the setup failed (SetupFailed); Run
	// recovers from it first.
	setupErr error
	sse      float64
	recov    int
	// ckptTime, commits and loopStart: see RunResult.
	ckptTime  time.Duration
	commits   int
	loopStart time.Time
	hist      history

	prune kernel.PruneStats
}

// NewJob checks the injections (CheckInjects), then loads this rank's
// home shards and the starting centroids. Every rank calls it (a promoted
// spare too, which leaves the centroids to its restore); it is collective
// on a starting rank when the input is a file and no --init is given, and
// with SeedPlusPlus. A failure of another rank during it is not an error:
// the job records it (see SetupFailed) and Run recovers from it.
func NewJob(ctx context.Context, rt *pgas.Runtime, opt Options) (*Job, error) {
	if err := CheckInjects(opt.Injects, rt.Size(), rt.HostLabels()); err != nil {
		return nil, err
	}
	if len(opt.Injects) > 0 && opt.Kill == nil {
		return nil, configErr("Options.Injects is set but Options.Kill, which carries an injection out, is nil")
	}
	for _, in := range opt.Stores {
		if in.Rank >= rt.Size() {
			return nil, configErr("--inject store:rank=%d,iter=%d: the job has ranks 0..%d; name one of them", in.Rank, in.Iter, rt.Size()-1)
		}
	}
	j := &Job{rt: rt, opt: opt, hdr: make([]uint64, hdrLen), promotedAt: -1, st: newStores(rt, opt.Stores)}
	if err := j.load(); err != nil {
		j.Close()
		return nil, err
	}
	k := opt.K
	j.cent = make([]float64, k*j.d)
	j.next = make([]float64, k*j.d)
	j.buf = make([]float64, k*j.d+k+3) // partial sums, counts, SSE, changed, checkpoint votes
	j.counts = make([]int64, k)
	if rt.StartedAsSpare() {
		// Its centroids come with the survivors' restore (or their start
		// over); a collective here would meet theirs out of order.
		return j, nil
	}
	if err := j.inject(ctx, "init", true, true); err != nil {
		j.Close()
		return nil, err
	}
	err := j.initCentroids(ctx)
	if err == nil {
		err = j.st.create(ctx)
	}
	if err != nil {
		if err = j.SetupFailed(err); err != nil {
			j.Close()
			return nil, err
		}
	}
	return j, nil
}

func (j *Job) load() error {
	if j.opt.Input != "" {
		info, err := points.Inspect(j.opt.Input, j.opt.CSV)
		if err != nil {
			return err
		}
		j.n, j.d = info.N, info.D
	} else {
		g := j.opt.Gen
		if err := g.Validate(); err != nil {
			return err
		}
		j.n, j.d = g.N, g.D
	}
	if k := j.opt.K; k < 1 || k > j.n {
		return configErr("--k %d: want 1..%d (the number of points)", k, j.n)
	}
	j.own = j.rt.Rank()
	if j.own < 0 {
		// A spare promoted and replaced again before it got going (its
		// host was cut off in between): it is fenced, not a bad input.
		if j.rt.Fenced() {
			return fmt.Errorf("kmeans: this process holds no rank: %w", pgas.ErrFenced)
		}
		return errors.New("kmeans: this process holds no rank")
	}
	size := j.rt.Size()
	j.nsh = size
	if j.opt.Shards != 0 {
		if j.opt.Shards < size || j.opt.Shards > j.n {
			return configErr("--shards %d: want at least the number of ranks (%d) and at most the number of points (%d)", j.opt.Shards, size, j.n)
		}
		j.nsh = j.opt.Shards
	}
	j.owner = make([]int, j.nsh)
	for s := range j.owner {
		j.owner[s] = j.homeRank(s)
	}
	for s := j.nsh * j.own / size; s < j.nsh*(j.own+1)/size; s++ {
		if err := j.addShard(s); err != nil {
			return err
		}
	}
	return nil
}

// homeRank is the rank whose home shard s is.
func (j *Job) homeRank(s int) int {
	size := j.rt.Size()
	r := s * size / j.nsh
	for j.nsh*(r+1)/size <= s {
		r++
	}
	for j.nsh*r/size > s {
		r--
	}
	return r
}

// algo is the algorithm of this rank's kernels, the cheapest if they
// differ (AlgoLloyd < AlgoHamerly < AlgoYinyang).
func (j *Job) algo() kernel.Algo {
	a := kernel.AlgoYinyang
	for _, sh := range j.mine {
		a = min(a, sh.kr.Algo())
	}
	if len(j.mine) == 0 {
		return kernel.ChooseAlgo(j.opt.Kernel.Algo, j.opt.K, j.d)
	}
	return a
}

// addShard loads shard s and makes its kernel.
func (j *Job) addShard(s int) error {
	lo, hi, pts, err := j.loadShard(s)
	if err != nil {
		return err
	}
	kr, err := kernel.NewKernel(pts, j.d, j.opt.K, j.opt.Kernel)
	if err != nil {
		return err
	}
	j.mine = append(j.mine, &shard{idx: s, lo: lo, hi: hi, pts: pts, kr: kr, part: kernel.NewPartial(j.opt.K, j.d)})
	slices.SortFunc(j.mine, func(a, b *shard) int { return a.idx - b.idx })
	return nil
}

// shardRange is shard s's range of points.
func (j *Job) shardRange(s int) (lo, hi int) {
	return j.n * s / j.nsh, j.n * (s + 1) / j.nsh
}

// loadShard reads shard s from the input file, or generates it (the
// generator is seeded per point, so any rank makes the same points).
func (j *Job) loadShard(s int) (lo, hi int, pts []float64, err error) {
	lo, hi = j.shardRange(s)
	if j.opt.Input != "" {
		pts, _, err = points.ReadShard(j.opt.Input, lo, hi, j.opt.CSV)
		return lo, hi, pts, err
	}
	pts = kernel.NewPoints(hi-lo, j.d)
	return lo, hi, pts, kernel.Generate(j.opt.Gen, lo, hi, pts)
}

// shard is a logical shard this rank computes.
type shard struct {
	idx, lo, hi int
	pts         []float64
	kr          *kernel.Kernel
	part        *kernel.Partial
}

// Close stops the kernels' worker goroutines. It is idempotent.
func (j *Job) Close() error {
	for _, sh := range j.mine {
		sh.kr.Close()
	}
	j.st.close()
	return nil
}

// reporter says whether this rank prints the job's progress: the lowest
// live rank (rank 0 unless the job shrank).
func (j *Job) reporter() bool {
	live := j.rt.LiveRanks()
	return len(live) > 0 && live[0] == j.rt.Rank()
}

func (j *Job) printf(format string, args ...any) {
	if j.opt.Progress != nil && j.reporter() {
		fmt.Fprintf(j.opt.Progress, format, args...)
	}
}

// loop iterates until the final checkpoint is committed (or, without
// checkpoints, the last iteration is done), recovering on the way.
func (j *Job) loop(ctx context.Context) error {
	for !j.finished {
		// A job resumed with MaxIter at the checkpoint's iteration has no
		// iteration left: it only takes its final checkpoint.
		done, err := j.iter >= j.opt.MaxIter, error(nil)
		if !done {
			done, err = j.iterate(ctx)
		}
		if err == nil && done {
			err = j.finish(ctx)
		}
		if err == nil || !recovery.Needed(err) {
			if err != nil {
				return err
			}
			continue
		}
		if err := j.rejoin(ctx, err, fmt.Sprintf("iteration %d", j.iter+1)); err != nil {
			return err
		}
	}
	return nil
}

// finish takes the final checkpoint, marked as such: from then on a
// recovery (a rank lost while the ranks finalize, or an idle spare lost)
// restores the finished state instead of iterating again.
func (j *Job) finish(ctx context.Context) error {
	if j.ck == nil || j.opt.Every <= 0 {
		j.finished = true
		return nil
	}
	j.setHeader(true)
	id := j.nextID()
	t0 := time.Now()
	err := j.ck.Start(ctx, id)
	if err == nil {
		err = j.ck.Commit(ctx, id)
	}
	j.ckptTime += time.Since(t0)
	if err != nil {
		j.hdr[hdrFinal] = 0
		return err
	}
	j.finished = true
	return nil
}

// Finalize ends the job for this rank (pgas Finalize). A rank or spare
// lost meanwhile sends every rank back to the last checkpoint, the final
// one as a rule, and the ranks finalize again together.
func (j *Job) Finalize(ctx context.Context) error {
	if j.ck == nil || j.opt.Every <= 0 {
		return j.rt.Finalize(ctx) // nothing to recover from
	}
	return j.recovery("finalize").Finalize(ctx, j.loop)
}

// Run iterates to the end, recovering from failures on the way. A
// promoted spare calls it too and joins the survivors' recovery first.
func (j *Job) Run(ctx context.Context) (RunResult, error) {
	if j.Joining() {
		// A promoted spare joins the survivors' recovery; a rank whose
		// setup failed recovers from that first.
		if err := j.rejoin(ctx, j.setupErr, "the setup"); err != nil {
			return RunResult{}, err
		}
	} else if j.ck != nil && j.opt.Every > 0 && (j.iter == 0 || j.portable) && !j.finished {
		// Checkpoint the starting state, so a failure before the first
		// periodic checkpoint restores it instead of nothing. (A job
		// resumed from disk starts from the checkpoint it loaded.)
		err := j.checkpoint(ctx)
		if err == nil {
			j.fresh = j.high == 0 // the first start: iter=0,phase=commit injections fire
			err = j.commit(ctx)
		}
		if err != nil && !recovery.Needed(err) {
			return RunResult{}, err
		}
		if err != nil {
			if err := j.rejoin(ctx, err, "the starting checkpoint"); err != nil {
				return RunResult{}, err
			}
		}
	}
	// The starting checkpoint's commit waits for the slowest rank to load
	// its data: that is not what checkpoints cost, so the figures start
	// here.
	j.ckptTime, j.commits, j.loopStart = 0, 0, time.Now()
	if err := j.loop(ctx); err != nil {
		return RunResult{}, err
	}
	if err := j.st.close(); err != nil {
		return RunResult{}, err
	}
	return RunResult{Centroids: slices.Clone(j.cent), SSE: j.sse, Iterations: j.iter, Recoveries: j.recov,
		CheckpointTime: j.ckptTime, Checkpoints: j.commits, LoopTime: time.Since(j.loopStart), Prune: j.prune, Algo: j.algo()}, nil
}

// iterate runs one Lloyd iteration; done reports the end of the run.
func (j *Job) iterate(ctx context.Context) (done bool, err error) {
	t0 := time.Now()
	for _, sh := range j.mine {
		if err := sh.kr.Step(j.cent, sh.part); err != nil {
			return false, err
		}
		j.prune = j.prune.Add(sh.kr.PruneStats())
	}
	// The previous checkpoint's push overlapped this step's compute; the
	// step's reduction carries its commit's agreement (vote, agreed).
	voting, vote := j.pending != 0, 0.0
	if voting {
		if vote, err = j.vote(ctx); err != nil {
			return false, err
		}
	}
	k, d := j.opt.K, j.d
	kd := k * d
	var votes float64
	if j.opt.Shrink || j.opt.Shards != 0 {
		votes, err = j.reduceShards(ctx, vote)
	} else {
		putPartial(j.buf, j.mine[0].part) // one shard per rank
		j.buf[kd+k+2] = vote
		err = pgas.Allreduce(ctx, j.rt, nil, j.buf, pgas.OpSum)
		votes = j.buf[kd+k+2]
	}
	if voting {
		err = j.agreed(votes, err)
	}
	if err != nil {
		return false, err
	}
	for i := range j.counts {
		j.counts[i] = int64(j.buf[kd+i])
	}
	shift, err := kernel.Update(j.next, j.cent, j.buf[:kd], j.counts, k, d)
	if err != nil {
		return false, err
	}
	copy(j.cent, j.next)
	j.iter++
	j.sse = j.buf[kd+k]
	j.iterDone(t0, int64(j.buf[kd+k+1]), shift)
	j.printf("iter %4d  sse=%-22s moved=%-9d shift=%-10.3g time=%v\n", j.iter, strconv.FormatFloat(j.sse, 'g', -1, 64), int64(j.buf[kd+k+1]), shift, time.Since(t0).Round(10*time.Microsecond))
	fresh := j.iter > j.high
	if err := j.inject(ctx, "", fresh, j.iter > j.low); err != nil {
		return false, err
	}
	if err := j.st.tick(j.iter, fresh, j.promotedAt >= 0 && j.iter <= j.promotedAt+1); err != nil {
		return false, err
	}
	j.high = max(j.high, j.iter)
	j.low = max(j.low, j.iter)
	j.done, j.iterated = max(j.done, j.iter), true
	done = j.iter >= j.opt.MaxIter || (j.opt.Tol > 0 && shift <= j.opt.Tol)
	if j.ck != nil && j.opt.Every > 0 && j.iter%j.opt.Every == 0 && !done {
		if err := j.checkpoint(ctx); err != nil {
			return false, err
		}
		j.fresh = fresh
	}
	return done, nil
}
