package ckpt

import (
	"encoding/binary"
	"runtime"
	"slices"
	"sync"
	"unique"
	"weak"
)

// Place returns, for every rank, the ranks that hold its mirrors, given
// each rank's host label (hosts[r]; "" everywhere when unknown).
//
// The ring is host-interleaved: hosts are ordered by their lowest rank,
// and the ring takes the first rank of every host, then the second of
// every host, and so on. On one host, or when ranks are dealt round-robin
// over hosts, this is the plain ring 0, 1, ..., n-1. Holders(r) are the
// next k ranks after r on that ring whose host differs from r's; when
// fewer than k such ranks exist, the rest are the next ranks of r's own
// host. So on one host Holders(r) = r+1, ..., r+k (mod n), and on several
// hosts losing every rank of one host loses no snapshot as long as
// other hosts exist.
//
// Interleaving matters: with ranks in blocks per host (0-3 on A, 4-7 on
// B), "next rank on another host" on the plain ring would send the
// mirrors of 0, 1, 2 and 3 all to rank 4. On the interleaved ring each
// rank holds k snapshots when hosts are balanced.
//
// k is capped at n-1. The result is deterministic: every rank computes
// the same table from the same labels.
func Place(hosts []string, k int) [][]int {
	n := len(hosts)
	k = min(k, n-1)
	out := make([][]int, n)
	if k <= 0 {
		for r := range out {
			out[r] = []int{}
		}
		return out
	}
	if !slices.ContainsFunc(hosts, func(h string) bool { return h != hosts[0] }) {
		// One host: the plain ring, r+1, ..., r+k (mod n), without the
		// search for ranks on other hosts (O(n) per rank when none exists).
		for r := range out {
			hs := make([]int, k)
			for j := range hs {
				hs[j] = (r + 1 + j) % n
			}
			out[r] = hs
		}
		return out
	}
	ring := interleave(hosts)
	pos := make([]int, n)
	for i, r := range ring {
		pos[r] = i
	}
	for r := range out {
		hs := make([]int, 0, k)
		for j := 1; j < n && len(hs) < k; j++ {
			if c := ring[(pos[r]+j)%n]; hosts[c] != hosts[r] {
				hs = append(hs, c)
			}
		}
		for j := 1; j < n && len(hs) < k; j++ {
			if c := ring[(pos[r]+j)%n]; hosts[c] == hosts[r] {
				hs = append(hs, c)
			}
		}
		out[r] = hs
	}
	return out
}

// interleave returns the host-interleaved ring order of the ranks.
func interleave(hosts []string) []int {
	var order []string
	byHost := make(map[string][]int)
	for r, h := range hosts {
		if _, ok := byHost[h]; !ok {
			order = append(order, h)
		}
		byHost[h] = append(byHost[h], r)
	}
	ring := make([]int, 0, len(hosts))
	for i := 0; len(ring) < len(hosts); i++ {
		for _, h := range order {
			if rs := byHost[h]; i < len(rs) {
				ring = append(ring, rs[i])
			}
		}
	}
	return ring
}

// layout is a placement plus where each snapshot sits at its holders:
// holder h keeps, for each source in sources[h] (ascending), a pair of
// slots at position index(source).
//
// A layout is read-only once built, and shared: the checkpointers of one
// process that derive a layout from the same hosts, mirrors and live
// ranks get one copy (sharedLayout), so a simulation of N ranks holds
// O(N × Mirrors) for the layout, not that per rank. Nothing writes
// holders or sources after newLayout; Holders hands out a copy.
type layout struct {
	holders [][]int
	sources [][]int
	key     unique.Handle[string] // its interned inputs, when shared
}

// layouts maps the interned inputs of a layout to the layout built from
// them, while it lives (a cleanup removes the entry when it is collected).
var layouts sync.Map // unique.Handle[string] -> weak.Pointer[layout]

// sharedLayout is newLayout(hosts, k, live), built once per content for
// the whole process while it is in use. The inputs are interned (package
// unique), so a hit is equal inputs, not a hash that happens to match.
func sharedLayout(hosts []string, k int, live []int) *layout {
	key := unique.Make(layoutInputs(hosts, k, live))
	if w, ok := layouts.Load(key); ok {
		if l := w.(weak.Pointer[layout]).Value(); l != nil {
			return l
		}
	}
	l := newLayout(hosts, k, live)
	l.key = key
	w := weak.Make(l)
	if prev, loaded := layouts.LoadOrStore(key, w); loaded {
		if pl := prev.(weak.Pointer[layout]).Value(); pl != nil {
			return pl
		}
		layouts.Store(key, w)
	}
	runtime.AddCleanup(l, func(e layoutEntry) { layouts.CompareAndDelete(e.key, e.w) }, layoutEntry{key, w})
	return l
}

type layoutEntry struct {
	key unique.Handle[string]
	w   weak.Pointer[layout]
}

// layoutInputs encodes what a layout is derived from.
func layoutInputs(hosts []string, k int, live []int) string {
	b := make([]byte, 0, 16+4*len(live)+8*len(hosts))
	b = binary.AppendUvarint(b, uint64(k))
	b = binary.AppendUvarint(b, uint64(len(live)))
	for _, r := range live {
		b = binary.AppendUvarint(b, uint64(r))
	}
	b = binary.AppendUvarint(b, uint64(len(hosts)))
	for _, h := range hosts {
		b = binary.AppendUvarint(b, uint64(len(h)))
		b = append(b, h...)
	}
	return string(b)
}

// newLayout places the snapshots of the ranks in live (ascending) on each
// other, as Place does for the host labels of those ranks alone: in a job
// that shrank, a vacant rank neither has nor holds a copy (its holders and
// sources are empty). With every rank live it is Place(hosts, k).
func newLayout(hosts []string, k int, live []int) *layout {
	n := len(hosts)
	l := &layout{holders: make([][]int, n), sources: make([][]int, n)}
	sub := make([]string, len(live))
	for i, r := range live {
		sub[i] = hosts[r]
	}
	for i, hs := range Place(sub, k) {
		rs := make([]int, len(hs))
		for x, h := range hs {
			rs[x] = live[h]
		}
		l.holders[live[i]] = rs
	}
	for r, hs := range l.holders {
		for _, h := range hs {
			l.sources[h] = append(l.sources[h], r)
		}
	}
	for h := range l.sources {
		slices.Sort(l.sources[h])
	}
	return l
}

// capacity is the number of slot pairs holder h needs.
func (l *layout) capacity(h int) int { return len(l.sources[h]) }

// position is the index of src's slot pair at holder h, or -1.
func (l *layout) position(h, src int) int {
	i, ok := slices.BinarySearch(l.sources[h], src)
	if !ok {
		return -1
	}
	return i
}
