package kmeans

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/gaspigo/gaspigo/apps/internal/recovery"
	"github.com/gaspigo/gaspigo/ckpt"
	"github.com/gaspigo/gaspigo/pgas"
)

// Inject is one injected failure: a real SIGKILL of the process that holds
// a rank when the job first completes an iteration. Iterations redone after
// a recovery never fire an injection again.
type Inject struct {
	// Exactly one target: Rank >= 0, Host != "", Leader, or MirrorOf >= 0.
	Rank     int
	Host     string // every rank whose process has this host label
	Leader   bool   // the process that leads the Raft membership
	MirrorOf int    // the rank that holds this rank's checkpoint mirror
	// Iter is the iteration after which (or during whose checkpoint commit)
	// the kill happens, 1-based; 0 with Phase "commit" kills during the
	// commit of the starting checkpoint, before any was committed.
	Iter int
	// Phase: "" kills after the iteration; "commit" kills inside the
	// checkpoint commit that follows the iteration.
	Phase string
}

// ParseInject parses kill:rank=R,iter=I[,phase=commit], kill:host=H,iter=I,
// kill:leader,iter=I and kill:mirror-of=R,iter=I.
func ParseInject(s string) (Inject, error) {
	in := Inject{Rank: -1, MirrorOf: -1}
	bad := func(why string) (Inject, error) {
		return Inject{}, fmt.Errorf("kmeans: --inject %q: %s (want kill:rank=R,iter=I, kill:host=H,iter=I, kill:leader,iter=I or kill:mirror-of=R,iter=I, optionally with ,phase=commit)", s, why)
	}
	rest, ok := strings.CutPrefix(s, "kill:")
	if !ok {
		return bad("only kill injections exist")
	}
	targets, hasIter := 0, false
	for _, kv := range strings.Split(rest, ",") {
		k, v, _ := strings.Cut(kv, "=")
		var err error
		switch k {
		case "rank":
			in.Rank, err = strconv.Atoi(v)
			if err == nil && in.Rank < 0 {
				err = errors.New("ranks count from 0")
			}
			targets++
		case "host":
			in.Host = v
			if v == "" {
				err = errors.New("empty host")
			}
			targets++
		case "leader":
			in.Leader = true
			targets++
		case "mirror-of":
			in.MirrorOf, err = strconv.Atoi(v)
			if err == nil && in.MirrorOf < 0 {
				err = errors.New("ranks count from 0")
			}
			targets++
		case "iter":
			in.Iter, err = strconv.Atoi(v)
			if err == nil && in.Iter < 0 {
				err = errors.New("iterations count from 1 (0 names the starting checkpoint, with phase=commit)")
			}
			hasIter = true
		case "phase":
			in.Phase = v
			if v != "commit" {
				err = errors.New("the only phase is commit")
			}
		default:
			return bad("unknown key " + strconv.Quote(k))
		}
		if err != nil {
			return bad(k + ": " + err.Error())
		}
	}
	if targets != 1 {
		return bad("name exactly one target")
	}
	if !hasIter {
		return bad("iter is missing")
	}
	if in.Iter == 0 && (in.Phase != "commit" || in.MirrorOf >= 0) {
		return bad("iter=0 names the commit of the starting checkpoint: give phase=commit with a rank, host or leader target (iterations count from 1)")
	}
	return in, nil
}

// CheckInjects refuses an injection that could never fire in a job of
// size ranks: a rank or mirror-of at or past size, or a host label that no
// process has (hosts: every process's label, spares included, as
// pgas.Runtime.HostLabels returns them; nil when the labels are unknown).
// The error wraps ErrConfig.
func CheckInjects(injects []Inject, size int, hosts []string) error {
	for _, in := range injects {
		switch {
		case in.Rank >= size:
			return configErr("--inject kill:rank=%d,iter=%d: the job has ranks 0..%d; name one of them", in.Rank, in.Iter, size-1)
		case in.MirrorOf >= size:
			return configErr("--inject kill:mirror-of=%d,iter=%d: the job has ranks 0..%d; name one of them", in.MirrorOf, in.Iter, size-1)
		case in.Host != "" && hosts == nil:
			return configErr("--inject kill:host=%s,iter=%d: the processes have no host labels; start the job with gaspirun (--hosts or --ranks-per-host label them)", in.Host, in.Iter)
		case in.Host != "" && !slices.Contains(hosts, in.Host):
			labels := slices.Compact(slices.Sorted(slices.Values(hosts)))
			return configErr("--inject kill:host=%s,iter=%d: no process has that host label; the labels are %s", in.Host, in.Iter, strings.Join(labels, ", "))
		}
	}
	return nil
}

// Checkpoints is what the job needs from package ckpt.
type Checkpoints interface {
	// Register adds a region to every checkpoint, in order.
	Register(name string, b []byte) error
	// Start snapshots the regions as checkpoint id and pushes it to the
	// mirrors in the background; Commit waits until every rank's mirror
	// holds it.
	Start(ctx context.Context, id uint64) error
	Commit(ctx context.Context, id uint64) error
	// Restore is collective after a recovery: every rank gets the regions
	// of the last committed checkpoint back and its id (0: none).
	Restore(ctx context.Context) (uint64, error)
	// Holders returns the ranks holding rank's mirror.
	Holders(rank int) []int
}

// Options describe one K-means run.
type Options struct {
	Input   string    // points file (CSV or binary by extension); or Generate
	Gen     GenConfig // used when Input is ""
	K       int
	MaxIter int
	Tol     float64 // stop once no centroid moved farther; 0: run MaxIter
	Init    string  // starting centroids CSV; "" picks points by Seed (Seeding)
	Seeding Seeding // how Init == "" picks them: SeedRandom or SeedPlusPlus
	Seed    uint64  // for the choice of starting points
	Every   int     // checkpoint every Every iterations; 0: never
	Injects []Inject
	Kernel  Config
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
	// Kill carries out an injection that hit this rank: the command kills
	// its own process (SIGKILL), so it does not return as a rule; if it
	// does, the run goes on. Required when Injects is set.
	Kill func(Kill)
}

// Kill is an injection that hit this rank, for Options.Kill.
type Kill struct {
	Inject Inject
	Rank   int
	Iter   int    // the iteration just completed
	Phase  string // "" after the iteration, "commit" inside the checkpoint commit
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
	// summed over the iterations this process ran (Config.Algo).
	Prune PruneStats
}

// Job is one rank's part of a distributed K-means run. The data set is
// cut into logical shards (Options.Shards, or one per rank), fixed for the
// job: shard s holds points [N*s/S, N*(s+1)/S), and rank r of R is the
// home of shards [S*r/R, S*(r+1)/R).
type Job struct {
	rt  *pgas.Runtime
	opt Options
	n   int // points in the whole data set
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

	iter    int // iterations completed
	high    int // the most iterations the job ever completed (injections fire past it)
	pending uint64
	lastID  uint64 // the newest checkpoint id started or restored
	// fresh: the pending checkpoint follows an iteration completed for the
	// first time, so its commit may fire phase=commit injections.
	fresh bool
	// resumed: the job was resumed from a disk checkpoint (Resumed).
	resumed bool
	sse     float64
	recov   int
	// ckptTime, commits and loopStart: see RunResult.
	ckptTime  time.Duration
	commits   int
	loopStart time.Time
	hist      history

	prune PruneStats
}

// NewJob checks the injections (CheckInjects), then loads this rank's
// home shards and the starting centroids. Every rank calls it (a promoted
// spare too); it is collective when the input is a file and no --init is
// given, and with SeedPlusPlus.
func NewJob(ctx context.Context, rt *pgas.Runtime, opt Options) (*Job, error) {
	if err := CheckInjects(opt.Injects, rt.Size(), rt.HostLabels()); err != nil {
		return nil, err
	}
	if len(opt.Injects) > 0 && opt.Kill == nil {
		return nil, configErr("Options.Injects is set but Options.Kill, which carries an injection out, is nil")
	}
	j := &Job{rt: rt, opt: opt, hdr: make([]uint64, hdrLen)}
	if err := j.load(); err != nil {
		j.Close()
		return nil, err
	}
	k := opt.K
	j.cent = make([]float64, k*j.d)
	j.next = make([]float64, k*j.d)
	j.buf = make([]float64, k*j.d+k+2)
	j.counts = make([]int64, k)
	if err := j.initCentroids(ctx); err != nil {
		j.Close()
		return nil, err
	}
	return j, nil
}

func (j *Job) load() error {
	if j.opt.Input != "" {
		info, err := Inspect(j.opt.Input)
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
		return fmt.Errorf("kmeans: --k %d: want 1..%d (the number of points)", k, j.n)
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

// addShard loads shard s and makes its kernel.
func (j *Job) addShard(s int) error {
	lo, hi, pts, err := j.loadShard(s)
	if err != nil {
		return err
	}
	kr, err := NewKernel(pts, j.d, j.opt.K, j.opt.Kernel)
	if err != nil {
		return err
	}
	j.mine = append(j.mine, &shard{idx: s, lo: lo, hi: hi, pts: pts, kr: kr, part: NewPartial(j.opt.K, j.d)})
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
		pts, _, err = ReadShard(j.opt.Input, lo, hi)
		return lo, hi, pts, err
	}
	pts = make([]float64, (hi-lo)*j.d)
	return lo, hi, pts, Generate(j.opt.Gen, lo, hi, pts)
}

// shard is a logical shard this rank computes.
type shard struct {
	idx, lo, hi int
	pts         []float64
	kr          *Kernel
	part        *Partial
}

// Close stops the kernels' worker goroutines. It is idempotent.
func (j *Job) Close() error {
	for _, sh := range j.mine {
		sh.kr.Close()
	}
	return nil
}

// ShardOwners returns, for each of the len(vacant) shards, the rank that
// computes it: its own rank while that is live, else the next live rank in
// ring order (s+1, s+2, ... modulo the size). It is a pure function of the
// vacant ranks, so every rank computes the same table; -1 marks every
// shard when no rank is live.
func ShardOwners(vacant []bool) []int {
	n := len(vacant)
	out := make([]int, n)
	for s := range out {
		out[s] = -1
		for i := 0; i < n; i++ {
			if r := (s + i) % n; !vacant[r] {
				out[s] = r
				break
			}
		}
	}
	return out
}

// reporter says whether this rank prints the job's progress: the lowest
// live rank (rank 0 unless the job shrank).
func (j *Job) reporter() bool {
	live := j.rt.LiveRanks()
	return len(live) > 0 && live[0] == j.rt.Rank()
}

// redistribute takes over, after a recovery, the shards of vacant ranks
// that ShardOwners gives this rank (loading their points and building a
// kernel for each), and returns one line per shard that changed hands
// since the last agreement, for the progress output. The vacant ranks are
// those of the view the program recovered into: a newer view fails the
// next collective and brings the job back here.
func (j *Job) redistribute() ([]string, error) {
	size := j.rt.Size()
	vacant := make([]bool, size)
	for r := range vacant {
		vacant[r] = j.rt.Vacant(r)
	}
	ranks := ShardOwners(vacant)
	owner := make([]int, j.nsh)
	for s := range owner {
		owner[s] = ranks[j.homeRank(s)]
	}
	me := j.own
	live := size
	for _, v := range vacant {
		if v {
			live--
		}
	}
	var lines []string
	for s, o := range owner {
		if o != j.owner[s] {
			lo, hi := j.shardRange(s)
			lines = append(lines, fmt.Sprintf("recovery: rank %d is vacant: shard %d (points [%d, %d)) goes to rank %d; %d of %d ranks live\n",
				j.owner[s], s, lo, hi, o, live, size))
		}
	}
	keep := j.mine[:0]
	for _, sh := range j.mine {
		if owner[sh.idx] == me {
			keep = append(keep, sh)
		} else {
			// Not expected: views only ever add vacant ranks, so a shard
			// stays with the rank computing it. Dropped all the same, so
			// that no shard is ever computed twice.
			sh.kr.Close()
		}
	}
	j.mine = keep
	for s, o := range owner {
		if o != me || slices.ContainsFunc(j.mine, func(sh *shard) bool { return sh.idx == s }) {
			continue
		}
		if err := j.addShard(s); err != nil {
			lo, hi := j.shardRange(s)
			return nil, fmt.Errorf("kmeans: taking over shard %d (points [%d, %d)) of vacant rank %d: %w", s, lo, hi, j.owner[s], err)
		}
	}
	j.owner = owner
	return lines, nil
}

func (j *Job) initCentroids(ctx context.Context) error {
	k, d := j.opt.K, j.d
	if j.opt.Init != "" {
		c, err := ReadCentroidsCSV(j.opt.Init, k, d)
		if err != nil {
			return err
		}
		copy(j.cent, c)
		return nil
	}
	if j.opt.Seeding == SeedPlusPlus {
		return j.initPlusPlus(ctx)
	}
	idx, err := InitIndices(j.opt.Seed, j.n, k)
	if err != nil {
		return err
	}
	if j.opt.Input == "" {
		// Generated data: any rank can make any point.
		for c, i := range idx {
			if err := Generate(j.opt.Gen, i, i+1, j.cent[c*d:(c+1)*d]); err != nil {
				return err
			}
		}
		return nil
	}
	// From a file: each row comes from the rank that owns it. Rows travel
	// with an ownership flag and are taken, never added, so the bits
	// (a -0 included) are exactly the file's.
	rows := make([]float64, k*(d+1))
	for c, i := range idx {
		for _, sh := range j.mine {
			if i >= sh.lo && i < sh.hi {
				rows[c*(d+1)] = 1
				copy(rows[c*(d+1)+1:], sh.pts[(i-sh.lo)*d:(i-sh.lo+1)*d])
			}
		}
	}
	err = pgas.AllreduceFunc(ctx, j.rt, nil, rows, func(dst, src []float64) {
		for c := 0; c < k; c++ {
			if src[c*(d+1)] == 1 {
				copy(dst[c*(d+1):(c+1)*(d+1)], src[c*(d+1):(c+1)*(d+1)])
			}
		}
	})
	if err != nil {
		return err
	}
	for c := 0; c < k; c++ {
		copy(j.cent[c*d:(c+1)*d], rows[c*(d+1)+1:(c+1)*(d+1)])
	}
	return nil
}

// StateBytes is the largest checkpoint any rank of the job registers:
// header, centroids and the assignments of the home shards.
func (j *Job) StateBytes() int64 {
	size, most := j.rt.Size(), 0
	for r := 0; r < size; r++ {
		lo, _ := j.shardRange(j.nsh * r / size)
		_, hi := j.shardRange(j.nsh*(r+1)/size - 1)
		most = max(most, hi-lo)
	}
	return int64(8*len(j.hdr) + 8*len(j.cent) + 4*most)
}

// The checkpoint header: one uint64 each.
const (
	hdrIter    = iota // iterations completed
	hdrHigh           // the high-water mark
	hdrFinal          // 1 for the final checkpoint of a run
	hdrSSE            // the SSE of the last iteration (float64 bits)
	hdrMaxIter        // the --max-iter of the run that wrote it
	hdrShards         // the number of logical shards of the job
	hdrLen
)

// nextID is the id of a checkpoint of the state after iteration j.iter:
// j.iter+1 (id 1 is the starting state), unless a checkpoint of that
// iteration was already taken (a resumed job whose MaxIter is the
// loaded checkpoint's iteration takes its final checkpoint right away).
func (j *Job) nextID() uint64 {
	j.lastID = max(uint64(j.iter)+1, j.lastID+1)
	return j.lastID
}

// setHeader fills the header for a checkpoint of the current state.
func (j *Job) setHeader(final bool) {
	j.hdr[hdrIter], j.hdr[hdrHigh], j.hdr[hdrFinal] = uint64(j.iter), uint64(j.high), 0
	if final {
		j.hdr[hdrFinal] = 1
	}
	j.hdr[hdrSSE], j.hdr[hdrMaxIter] = math.Float64bits(j.sse), uint64(j.opt.MaxIter)
	j.hdr[hdrShards] = uint64(j.nsh)
}

// fromHeader takes the counters and the SSE from a checkpoint just loaded
// into the registered regions. A final checkpoint ends the job unless it
// was written by a run with a smaller MaxIter (a resumed job told to go
// further).
func (j *Job) fromHeader() {
	j.iter, j.high = int(j.hdr[hdrIter]), int(j.hdr[hdrHigh])
	j.sse = math.Float64frombits(j.hdr[hdrSSE])
	j.finished = j.hdr[hdrFinal] == 1 && uint64(j.opt.MaxIter) <= j.hdr[hdrMaxIter]
}

// Resumed takes the job's state from a checkpoint just loaded into the
// registered regions from the disk level (gaspirun --resume) as
// checkpoint id, and settles
// Options.MaxIter against the run that wrote it. note says what the job
// does next, for the reporting rank to print; the error (the same on
// every rank, wrapping ErrConfig) is a MaxIter below the checkpoint's
// iteration.
func (j *Job) Resumed(id uint64) (note string, err error) {
	if sh := j.hdr[hdrShards]; sh != uint64(j.nsh) {
		return "", configErr("the checkpoint is of a job with %d logical shards, this one has %d: give --shards %d (a different number of shards is a different sum order, so a different answer)", sh, j.nsh, sh)
	}
	j.fromHeader()
	j.lastID, j.resumed = id, true
	it, was, now := j.iter, int(j.hdr[hdrMaxIter]), j.opt.MaxIter
	final := j.hdr[hdrFinal] == 1
	switch {
	case now < it:
		return "", configErr("--max-iter %d is below the %d iterations the checkpoint already holds (its run had --max-iter %d): give --max-iter %d or more", now, it, was, it)
	case final && j.finished:
		return fmt.Sprintf("the checkpoint is the final one of a finished run (%d iterations, --max-iter %d): printing its result; give a larger --max-iter to iterate further", it, was), nil
	case final:
		return fmt.Sprintf("the checkpoint is the final one of a run with --max-iter %d: iterating on from iteration %d to --max-iter %d", was, it, now), nil
	case now != was:
		return fmt.Sprintf("the checkpointed run had --max-iter %d: continuing to --max-iter %d", was, now), nil
	}
	return fmt.Sprintf("continuing to --max-iter %d", now), nil
}

// ResumeFrom loads the newest complete checkpoint in dir, the disk level
// of a job with the same Options (Shards set) that ran on any number of
// ranks, and settles MaxIter as Resumed does. It reads the header and the
// centroids, which every rank holds alike, from rank 0's file (so every
// rank loads the same checkpoint); the assignments, which only count the
// points that changed cluster, are not restored, and the pruned kernels'
// bounds start afresh (a full scan). The checkpointer does not hold the
// loaded state, so Run first takes a starting checkpoint of it.
func (j *Job) ResumeFrom(dir string) (id uint64, note string, err error) {
	if j.opt.Shards == 0 {
		return 0, "", configErr("resuming on a different number of ranks needs logical shards: give --shards as the checkpointed run did")
	}
	snap, err := ckpt.ReadDiskRank(dir, 0, int64(8*len(j.hdr)+8*len(j.cent)+4*j.n))
	if err != nil {
		return 0, "", err
	}
	if len(snap.Regions) < 2 || len(snap.Regions[0]) != 8*len(j.hdr) || len(snap.Regions[1]) != 8*len(j.cent) {
		sizes := make([]int, len(snap.Regions))
		for i, r := range snap.Regions {
			sizes[i] = len(r)
		}
		return 0, "", configErr("the checkpoint %d in %s has regions of %v bytes; a job with k = %d, d = %d wants a %d-byte header and %d bytes of centroids: resume with the checkpointed run's --k and data",
			snap.ID, dir, sizes, j.opt.K, j.d, 8*len(j.hdr), 8*len(j.cent))
	}
	copy(bytesOf(j.hdr), snap.Regions[0])
	copy(bytesOf(j.cent), snap.Regions[1])
	note, err = j.Resumed(snap.ID)
	if err != nil {
		return 0, "", err
	}
	j.portable = true
	if snap.Ranks != j.rt.Size() {
		note += fmt.Sprintf(" (the checkpoint was written by %d ranks, this job has %d)", snap.Ranks, j.rt.Size())
	}
	return snap.ID, note, nil
}

// Shards reports whether the job has logical shards (Options.Shards).
func (j *Job) Shards() bool { return j.opt.Shards != 0 }

// Iteration returns the number of iterations completed.
func (j *Job) Iteration() int { return j.iter }

// UseCheckpoints registers the job's state with ck.
func (j *Job) UseCheckpoints(ck Checkpoints) error {
	j.ck = ck
	for _, r := range []struct {
		name string
		b    []byte
	}{{"header", bytesOf(j.hdr)}, {"centroids", bytesOf(j.cent)}} {
		if err := ck.Register(r.name, r.b); err != nil {
			return err
		}
	}
	// The home shards' assignments (only Partial.Changed depends on
	// them); a single shard keeps the region name of one shard per rank.
	for _, sh := range j.mine {
		name := "assignments"
		if len(j.mine) > 1 || j.nsh != j.rt.Size() {
			name = fmt.Sprintf("assignments %d", sh.idx)
		}
		if err := ck.Register(name, bytesOf(sh.kr.Assignments())); err != nil {
			return err
		}
	}
	return nil
}

func bytesOf[T any](s []T) []byte {
	if len(s) == 0 {
		return []byte{}
	}
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(z)))
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
	if j.rt.StartedAsSpare() {
		if err := j.rejoin(ctx, nil, ""); err != nil {
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
	return RunResult{Centroids: slices.Clone(j.cent), SSE: j.sse, Iterations: j.iter, Recoveries: j.recov,
		CheckpointTime: j.ckptTime, Checkpoints: j.commits, LoopTime: time.Since(j.loopStart), Prune: j.prune}, nil
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
	if j.pending != 0 {
		// The previous checkpoint's push overlapped this step's compute.
		if err := j.commit(ctx); err != nil {
			return false, err
		}
	}
	k, d := j.opt.K, j.d
	kd := k * d
	if j.opt.Shrink || j.opt.Shards != 0 {
		if err := j.reduceShards(ctx); err != nil {
			return false, err
		}
	} else {
		putPartial(j.buf, j.mine[0].part) // one shard per rank
		if err := pgas.Allreduce(ctx, j.rt, nil, j.buf, pgas.OpSum); err != nil {
			return false, err
		}
	}
	for i := range j.counts {
		j.counts[i] = int64(j.buf[kd+i])
	}
	shift, err := Update(j.next, j.cent, j.buf[:kd], j.counts, k, d)
	if err != nil {
		return false, err
	}
	copy(j.cent, j.next)
	j.iter++
	j.sse = j.buf[kd+k]
	j.iterDone(t0, int64(j.buf[kd+k+1]), shift)
	j.printf("iter %4d  sse=%-22s moved=%-9d shift=%-10.3g time=%v\n", j.iter, strconv.FormatFloat(j.sse, 'g', 10, 64), int64(j.buf[kd+k+1]), shift, time.Since(t0).Round(10*time.Microsecond))
	fresh := j.iter > j.high
	if err := j.inject(ctx, "", fresh); err != nil {
		return false, err
	}
	j.high = max(j.high, j.iter)
	done = j.iter >= j.opt.MaxIter || (j.opt.Tol > 0 && shift <= j.opt.Tol)
	if j.ck != nil && j.opt.Every > 0 && j.iter%j.opt.Every == 0 && !done {
		if err := j.checkpoint(ctx); err != nil {
			return false, err
		}
		j.fresh = fresh
	}
	return done, nil
}

// putPartial lays p out as the iteration's reduction vector: sums, counts,
// SSE, changed points.
func putPartial(b []float64, p *Partial) {
	kd := len(p.Sums)
	copy(b[:kd], p.Sums)
	for i, c := range p.Counts {
		b[kd+i] = float64(c)
	}
	b[kd+p.K] = p.SSE
	b[kd+p.K+1] = float64(p.Changed)
}

// reduceShards combines the iteration's partials by shard rather than by
// rank (Options.Shrink), so that the result does not depend on how many
// ranks are live: the reduction vector has one slot per shard, led by a
// flag, which only the rank computing the shard fills; the combine takes
// the filled slot instead of adding, so every slot arrives with its exact
// bits; then every rank adds the slots in shard order. A shard that no
// rank or two ranks filled means the ranks disagree on who computes it,
// which the views rule out: it is an error, not a reason to recover.
func (j *Job) reduceShards(ctx context.Context) error {
	w := len(j.buf)
	slot := w + 1
	n := j.nsh
	if len(j.slots) != n*slot {
		j.slots = make([]float64, n*slot)
	}
	clear(j.slots)
	put := func(s int, p *Partial) {
		j.slots[s*slot] = 1
		putPartial(j.slots[s*slot+1:(s+1)*slot], p)
	}
	for _, sh := range j.mine {
		put(sh.idx, sh.part)
	}
	err := pgas.AllreduceFunc(ctx, j.rt, nil, j.slots, func(dst, src []float64) {
		for s := 0; s < n; s++ {
			ds, ss := dst[s*slot:(s+1)*slot], src[s*slot:(s+1)*slot]
			switch {
			case ss[0] == 0:
			case ds[0] == 0:
				copy(ds, ss)
			default:
				ds[0] = 2 // computed twice
			}
		}
	})
	if err != nil {
		return err
	}
	for s := 0; s < n; s++ {
		if f := j.slots[s*slot]; f != 1 {
			who := map[bool]string{true: "no rank", false: "more than one rank"}[f == 0]
			return fmt.Errorf("kmeans: %s computed shard %d in iteration %d, want exactly one: the ranks disagree on who owns it", who, s, j.iter+1)
		}
		b := j.slots[s*slot+1 : (s+1)*slot]
		if s == 0 {
			copy(j.buf, b)
			continue
		}
		for i, x := range b {
			j.buf[i] += x
		}
	}
	return nil
}

// checkpoint snapshots the state after iteration j.iter as checkpoint
// j.iter+1 (id 1 is the starting state); its commit follows the next step.
func (j *Job) checkpoint(ctx context.Context) error {
	j.setHeader(false)
	id := j.nextID()
	t0 := time.Now()
	defer func() { j.ckptTime += time.Since(t0) }()
	if err := j.ck.Start(ctx, id); err != nil {
		return err
	}
	j.pending = id
	return nil
}

func (j *Job) commit(ctx context.Context) error {
	// The checkpoint of iteration j.iter is being committed; the high-water
	// mark already counts that iteration, so whether this is the first time
	// was decided when the checkpoint started.
	if err := j.inject(ctx, "commit", j.fresh); err != nil {
		return err
	}
	id := j.pending
	j.pending, j.fresh = 0, false
	t0 := time.Now()
	err := j.ck.Commit(ctx, id)
	j.ckptTime += time.Since(t0)
	if err == nil {
		j.commits++
		j.event("checkpoint", strconv.Itoa(j.iter))
	}
	if errors.Is(err, ckpt.ErrNotCommitted) {
		j.printf("checkpoint %d not committed (%v); the previous one stays in force\n", id, err)
		return nil
	}
	return err
}

// inject fires the injections due now, the first time the job gets here
// (fresh: iteration j.iter was never completed before). Every rank calls
// it at the same point; a due kill:leader injection makes it collective.
func (j *Job) inject(ctx context.Context, phase string, fresh bool) error {
	if !fresh {
		return nil // a redone iteration
	}
	me := j.rt.Rank()
	for _, in := range j.opt.Injects {
		if in.Iter != j.iter || in.Phase != phase {
			continue
		}
		hit := in.Rank == me ||
			(in.Host != "" && j.rt.Host(me) == in.Host) ||
			(in.MirrorOf >= 0 && j.ck != nil && slices.Contains(j.ck.Holders(in.MirrorOf), me))
		if in.Leader {
			var err error
			if hit, err = j.isAgreedLeader(ctx); err != nil {
				return err
			}
		}
		if hit {
			j.opt.Kill(Kill{Inject: in, Rank: me, Iter: j.iter, Phase: phase})
		}
	}
	return nil
}

// leaderWait bounds the wait for a Raft leader at a kill:leader injection.
const leaderWait = time.Minute

// isAgreedLeader decides a kill:leader injection collectively: every rank
// waits until its membership knows a leader (the election may still be
// under way early in a run), the ranks agree on one leader process (the
// highest any of them saw, so a change of leader between their looks
// still kills at most one), and this reports whether it is this process.
// A leader that holds no rank (an idle spare) is not killed: the
// reporting rank says so on stderr.
func (j *Job) isAgreedLeader(ctx context.Context) (bool, error) {
	if j.opt.Leader == nil {
		j.printf("inject: kill:leader after iteration %d: the membership has no leader to ask; nothing killed\n", j.iter)
		return false, nil
	}
	wctx, cancel := context.WithTimeout(ctx, leaderWait)
	defer cancel()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	seen := int64(-1)
	for seen < 0 {
		if p, ok := j.opt.Leader(); ok {
			seen = int64(p)
			break
		}
		select {
		case <-wctx.Done():
			return false, fmt.Errorf("kmeans: kill:leader after iteration %d: no Raft leader known after %v", j.iter, leaderWait)
		case <-tick.C:
		}
	}
	v := []int64{seen}
	if err := pgas.Allreduce(ctx, j.rt, nil, v, pgas.OpMax); err != nil {
		return false, err
	}
	mine := int64(0)
	if v[0] == int64(j.rt.Proc()) {
		mine = 1
	}
	h := []int64{mine}
	if err := pgas.Allreduce(ctx, j.rt, nil, h, pgas.OpSum); err != nil {
		return false, err
	}
	if h[0] == 0 && j.reporter() {
		fmt.Fprintf(os.Stderr, "inject: kill:leader after iteration %d: the Raft leader is process %d, which holds no rank (an idle spare); nothing killed\n", j.iter, v[0])
	}
	return mine == 1, nil
}

// rejoin recovers from cause, a failure of what (nil for a promoted spare,
// which joins a recovery under way): wait for the new view, restore the
// last committed checkpoint everywhere, and agree on the job's high-water
// mark so redone iterations inject nothing.
func (j *Job) rejoin(ctx context.Context, cause error, what string) error {
	return j.recovery(what).Rejoin(ctx, cause)
}

// recovery is the job's recovery loop, reporting failures of what.
func (j *Job) recovery(what string) *recovery.Loop {
	return &recovery.Loop{RT: j.rt, Restore: j.restoreAll, Report: func(a recovery.Attempt) {
		if a.Retry {
			what = "the recovery" // another failure during the recovery
		}
		j.printf("recovery: %s failed: %s\n", what, recovery.Brief(a.Cause))
		j.event("failure", what+": "+recovery.Brief(a.Cause))
	}}
}

// restoreAll is rejoin's restore: the checkpoint, then the shards of
// vacant ranks handed out (shrinking).
func (j *Job) restoreAll(ctx context.Context, a recovery.Attempt) error {
	err := j.restore(ctx)
	if live := j.rt.LiveRanks(); err == nil && !j.opt.Shrink && len(live) < j.rt.Size() {
		// The membership shrank but this job was not told to: the
		// vacant ranks' points would silently drop out of the sums.
		var vacant []string
		for r := 0; r < j.rt.Size(); r++ {
			if j.rt.Vacant(r) {
				vacant = append(vacant, strconv.Itoa(r))
			}
		}
		return fmt.Errorf("kmeans: rank %s is vacant (the membership shrinks) but the job does not redistribute shards: run every rank with --shrink (Options.Shrink)", strings.Join(vacant, ", "))
	}
	if err == nil && j.opt.Shrink {
		var lines []string
		if lines, err = j.redistribute(); err == nil {
			for _, l := range lines {
				j.printf("%s", l)
			}
		}
	}
	if err == nil {
		j.recov++
		j.event("recovery", fmt.Sprintf("epoch %d: checkpoint of iteration %d restored", j.rt.Epoch(), j.iter))
		j.printf("recovery: epoch %d in force after %v; checkpoint of iteration %d restored after %v; %d iterations to redo\n",
			j.rt.Epoch(), a.View.Round(time.Microsecond), j.iter, time.Since(a.Started).Round(time.Microsecond), j.high-j.iter)
	}
	return err
}

// startOver is restore when no checkpoint is restorable (noCk is
// ckpt.ErrNoCheckpoint or nil): if no rank ever committed or loaded one,
// a rank failed before the starting checkpoint was committed, and every
// rank goes back to the starting state (the initial centroids are a
// function of the options and the data, so the run is the same). If some
// rank had one, the loss is beyond what the mirrors cover: an error.
func (j *Job) startOver(ctx context.Context, noCk error) error {
	had := []int64{int64(j.commits)}
	if j.resumed {
		had[0]++
	}
	if err := pgas.Allreduce(ctx, j.rt, nil, had, pgas.OpMax); err != nil {
		return err
	}
	if had[0] > 0 {
		if noCk == nil {
			noCk = errors.New("kmeans: no checkpoint to restore, though one was committed")
		}
		return noCk
	}
	if err := j.initCentroids(ctx); err != nil {
		return err
	}
	ids := []int64{int64(j.lastID)}
	if err := pgas.Allreduce(ctx, j.rt, nil, ids, pgas.OpMax); err != nil {
		return err
	}
	j.lastID = uint64(ids[0]) // every rank numbers its next checkpoint alike
	j.iter, j.sse, j.finished = 0, 0, false
	j.printf("recovery: no checkpoint was committed yet: every rank starts over from the initial centroids\n")
	return nil
}

func (j *Job) restore(ctx context.Context) error {
	j.pending, j.fresh = 0, false
	if j.ck == nil {
		return errors.New("kmeans: a rank failed and checkpoints are off (--ckpt-every 0): nothing to restore from")
	}
	id, err := j.ck.Restore(ctx)
	if errors.Is(err, ckpt.ErrNoCheckpoint) || (err == nil && id == 0) {
		return j.startOver(ctx, err)
	}
	if err != nil {
		return err
	}
	j.lastID = id
	high := j.high
	j.fromHeader()
	h := []int64{int64(max(high, j.high))}
	if err := pgas.Allreduce(ctx, j.rt, nil, h, pgas.OpMax); err != nil {
		return err
	}
	j.high = int(h[0])
	return nil
}
