package kvshuffle

// Physical sort of a received block. The pairs of a sealed block lie in
// arrival order; sorting only its index would leave the spill (or the
// final merge) to gather them from random places of the block, one cache
// and TLB miss at a time, which dominates the merger's work. sortBlock
// moves them instead, in two cache-friendly copies: a scatter by the
// first key byte into 256 buckets (reads sequential, 256 write streams),
// then, bucket by bucket (a bucket is small enough to stay in cache), a
// radix sort of the bucket's index and a gather into the final buffer
// (writes sequential). The block's data and index are then in key order,
// and a merge reads them front to back.

// blockSorter holds the merger's scratch for sortBlock: the bucketed copy
// and a spare block for the result (both of RunSize bytes), and indexes.
type blockSorter struct {
	bucketed []byte
	spare    []byte
	e1, e2   []ent
	tmp      []ent
	sink     byte // touch's result, kept so that its reads are not dropped
}

// minPhysSort is the fewest pairs for which a block is moved rather than
// only its index sorted (a variable for the tests, whose blocks are small).
var minPhysSort = 1024

// sortBlock sorts data and its index es (in data order, covering data
// contiguously, bytewise order) into a new buffer and index, which it
// returns; data and es are left untouched, and the caller hands them back
// with recycle once nothing reads them.
func (bs *blockSorter) sortBlock(data []byte, es []ent, capacity int) ([]byte, []ent) {
	n := len(es)
	if cap(bs.bucketed) < len(data) {
		bs.bucketed = make([]byte, max(capacity, len(data)))
	}
	if cap(bs.spare) < len(data) {
		bs.spare = make([]byte, max(capacity, len(data)))
	}
	if cap(bs.e1) < n {
		bs.e1 = make([]ent, n)
	}
	if cap(bs.e2) < n {
		bs.e2 = make([]ent, n)
	}
	src, e1 := bs.bucketed[:len(data)], bs.e1[:n]
	var bytesIn, entsIn [256]int
	prev := uint32(0)
	for _, e := range es {
		b := byte(e.pre >> 56)
		bytesIn[b] += int(e.end - prev)
		entsIn[b]++
		prev = e.end
	}
	var off, idx [257]int
	for b := range 256 {
		off[b+1] = off[b] + bytesIn[b]
		idx[b+1] = idx[b] + entsIn[b]
	}
	o, x := off, idx
	prev = 0
	for _, e := range es {
		b := byte(e.pre >> 56)
		at := o[b]
		size := int(e.end - prev)
		copy(src[at:at+size], data[prev:e.end])
		shift := uint32(at) - prev
		e1[x[b]] = ent{pre: e.pre, kstart: e.kstart + shift, kend: e.kend + shift, end: e.end + shift}
		o[b] += size
		x[b]++
		prev = e.end
	}
	out, e2 := bs.spare[:len(data)], bs.e2[:n]
	for b := range 256 {
		lo, hi := idx[b], idx[b+1]
		if lo == hi {
			continue
		}
		bucket := e1[lo:hi]
		// The gather below reads the bucket's pairs in key order, that is
		// at random: read it front to back first (the hardware prefetches
		// a sequential read), so that those reads hit the cache instead
		// of waiting on memory one pair at a time.
		bs.touch(src[off[b]:off[b+1]])
		radixSortEnts(src, bucket, &bs.tmp)
		at := uint32(off[b])
		for k, e := range bucket {
			start := e.kstart - uint32(uvarintLen(uint64(e.kend-e.kstart))) - uint32(uvarintLen(uint64(e.end-e.kend)))
			copy(out[at:], src[start:e.end])
			shift := at - start
			e2[lo+k] = ent{pre: e.pre, kstart: e.kstart + shift, kend: e.kend + shift, end: e.end + shift}
			at += e.end - start
		}
	}
	bs.spare, bs.e2 = nil, nil
	return out, e2
}

// touch reads one byte of every cache line of b.
func (bs *blockSorter) touch(b []byte) {
	var x byte
	for i := 0; i < len(b); i += 64 {
		x ^= b[i]
	}
	bs.sink ^= x
}

// recycle gives sortBlock the buffers of a block it sorted before, for
// its next result.
func (bs *blockSorter) recycle(data []byte, es []ent) {
	if bs.spare == nil || cap(data) > cap(bs.spare) {
		bs.spare = data[:0]
	}
	if bs.e2 == nil || cap(es) > cap(bs.e2) {
		bs.e2 = es[:0]
	}
}
