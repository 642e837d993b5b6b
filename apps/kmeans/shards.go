package kmeans

import (
	"context"
	"fmt"
	"slices"

	"github.com/gaspigo/gaspigo/apps/kmeans/kernel"
	"github.com/gaspigo/gaspigo/pgas"
)

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

// putPartial lays p out as the iteration's reduction vector: sums, counts,
// SSE, changed points.
func putPartial(b []float64, p *kernel.Partial) {
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
// which the views rule out: it is an error, not a reason to recover. The
// vector ends with the checkpoint votes (see vote), summed: votes.
func (j *Job) reduceShards(ctx context.Context, vote float64) (votes float64, err error) {
	w := len(j.buf)
	slot := w + 1
	n := j.nsh
	if len(j.slots) != n*slot+1 {
		j.slots = make([]float64, n*slot+1) // and the checkpoint votes, summed
	}
	clear(j.slots)
	j.slots[n*slot] = vote
	put := func(s int, p *kernel.Partial) {
		j.slots[s*slot] = 1
		putPartial(j.slots[s*slot+1:(s+1)*slot], p)
	}
	for _, sh := range j.mine {
		put(sh.idx, sh.part)
	}
	err = pgas.AllreduceFunc(ctx, j.rt, nil, j.slots, func(dst, src []float64) {
		dst[n*slot] += src[n*slot]
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
		return 0, err
	}
	for s := 0; s < n; s++ {
		if f := j.slots[s*slot]; f != 1 {
			who := map[bool]string{true: "no rank", false: "more than one rank"}[f == 0]
			return 0, fmt.Errorf("kmeans: %s computed shard %d in iteration %d, want exactly one: the ranks disagree on who owns it", who, s, j.iter+1)
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
	return j.slots[n*slot], nil
}
