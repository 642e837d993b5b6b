package kmeans

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/gaspigo/gaspigo/ckpt"
)

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
	j.low = j.high
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
	if len(j.mine) > maxShardRegions {
		return j.registerPacked(ck)
	}
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

// maxShardRegions is how many home shards a rank checkpoints as regions
// of their own; beyond, their assignments share one (registerPacked). A
// snapshot holds at most ckpt.MaxRegions regions: 2,048 shards on 4 ranks
// did not fit, and a job with many shards could not resume on few ranks.
const maxShardRegions = 64

// registerPacked moves the assignments of every home shard into one
// buffer, each kernel keeping its part, and registers that as one region.
// (Resuming on another number of ranks reads the header and the
// centroids only: the regions' layout within a rank is the rank's own.)
func (j *Job) registerPacked(ck Checkpoints) error {
	total := 0
	for _, sh := range j.mine {
		total += sh.kr.N()
	}
	buf := make([]int32, total)
	off := 0
	for _, sh := range j.mine {
		n := sh.kr.N()
		if err := sh.kr.UseAssignments(buf[off : off+n : off+n]); err != nil {
			return err
		}
		off += n
	}
	name := fmt.Sprintf("assignments of shards %d-%d", j.mine[0].idx, j.mine[len(j.mine)-1].idx)
	return ck.Register(name, bytesOf(buf))
}

func bytesOf[T any](s []T) []byte {
	if len(s) == 0 {
		return []byte{}
	}
	var z T
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(z)))
}
