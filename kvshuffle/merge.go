package kvshuffle

import (
	"bytes"
	"encoding/binary"
	"slices"
)

// ent indexes one framed pair inside a byte slice: its key is
// data[kstart:kend], its value data[kend:end], and pre is the key's
// prefix (keyPrefix).
type ent struct {
	pre               uint64
	kstart, kend, end uint32
}

// entSize is what one ent costs against the memory budget.
const entSize = 24

func (e ent) key(data []byte) []byte   { return data[e.kstart:e.kend:e.kend] }
func (e ent) value(data []byte) []byte { return data[e.kend:e.end:e.end] }

// KeyPrefix is the first 8 bytes of k, big-endian, zero-padded. For
// bytewise order, KeyPrefix(a) < KeyPrefix(b) implies a < b, so most
// comparisons are one integer comparison (the shuffle's sort and merge,
// and a range partitioner's search).
func KeyPrefix(k []byte) uint64 {
	if len(k) >= 8 {
		return binary.BigEndian.Uint64(k)
	}
	var p uint64
	for i, c := range k {
		p |= uint64(c) << (56 - 8*i)
	}
	return p
}

// order compares keys: with Config.Compare, or bytewise with the prefix
// fast path when Compare is nil.
type order struct {
	cmp      func(a, b []byte) int
	bytewise bool
}

func (o order) compare(a, b []byte) int {
	if o.bytewise {
		return bytes.Compare(a, b)
	}
	return o.cmp(a, b)
}

// sortEnts sorts es by key; *tmp is scratch space, grown as needed and
// kept by the caller for the next sort.
func (o order) sortEnts(data []byte, es []ent, tmp *[]ent) {
	if o.bytewise {
		radixSortEnts(data, es, tmp)
		return
	}
	slices.SortFunc(es, func(x, y ent) int { return o.cmp(x.key(data), y.key(data)) })
}

// radixSortEnts sorts es in bytewise key order: a least-significant-digit
// radix sort of the 8-byte key prefixes, a byte a pass (passes whose byte
// is the same in every entry are skipped), then each run of equal
// prefixes by the whole key. No comparison, no data-dependent branch in
// the passes; the records themselves never move.
func radixSortEnts(data []byte, es []ent, tmp *[]ent) {
	if len(es) < 64 {
		slices.SortFunc(es, func(x, y ent) int { return cmpEnt(data, x, y) })
		return
	}
	if cap(*tmp) < len(es) {
		*tmp = make([]ent, len(es))
	}
	var counts [8][256]int
	for _, e := range es {
		p := e.pre
		for b := range 8 {
			counts[b][byte(p>>(8*b))]++
		}
	}
	src, dst := es, (*tmp)[:len(es)]
	for b := range 8 {
		c := &counts[b]
		if c[byte(es[0].pre>>(8*b))] == len(es) {
			continue
		}
		sum := 0
		for i, n := range c {
			c[i] = sum
			sum += n
		}
		shift := 8 * b
		for _, e := range src {
			d := byte(e.pre >> shift)
			dst[c[d]] = e
			c[d]++
		}
		src, dst = dst, src
	}
	if &src[0] != &es[0] {
		copy(es, src)
	}
	for i := 0; i < len(es); {
		j := i + 1
		for j < len(es) && es[j].pre == es[i].pre {
			j++
		}
		if j-i > 1 {
			slices.SortFunc(es[i:j], func(x, y ent) int { return bytes.Compare(x.key(data), y.key(data)) })
		}
		i = j
	}
}

func cmpEnt(data []byte, x, y ent) int {
	if x.pre != y.pre {
		if x.pre < y.pre {
			return -1
		}
		return 1
	}
	return bytes.Compare(x.key(data), y.key(data))
}

// indexRun decodes b (a run of whole pairs) and appends an ent per pair,
// with offsets relative to b plus base.
func indexRun(b []byte, es []ent, base int, what string) ([]ent, error) {
	for off := 0; off < len(b); {
		k, v, n, err := decodePairAt(b, off, what)
		if err != nil {
			return es, err
		}
		ks := base + off + n - len(v) - len(k)
		es = append(es, ent{pre: KeyPrefix(k), kstart: uint32(ks), kend: uint32(ks + len(k)), end: uint32(base + off + n)})
		off += n
	}
	return es, nil
}

// chunk is received pairs with their index: a block of the A task's pool
// that the drain fills with the payloads of many frames (the common case),
// or one large pair reassembled from pieces, or a run of a restored state.
// Once sealed, the merger sorts the index in place; the data never moves.
type chunk struct {
	data   []byte
	ents   []ent
	sorted bool
	// inOrder: data holds the pairs themselves in key order, contiguous
	// (sortBlock moved them), not only a sorted index.
	inOrder bool
	charge  int64 // bytes charged against the budget for data (a block: its capacity)
	pooled  bool  // data and ents go back to the pool when the chunk is freed
}

// batch is received chunks not yet merged into a run or spilled.
type batch struct {
	chunks []*chunk
	bytes  int64 // data bytes
	pairs  int64
	charge int64 // the chunks' charges
}

func (b *batch) cost() int64 { return b.charge + entSize*b.pairs }

// memRun is a sorted run held in memory.
type memRun struct {
	data  []byte
	pairs int64
}

// source yields pairs in key order, with the key's prefix (keyPrefix).
// key and value stay valid until the next call to next on the same
// source.
type source interface {
	next() (key, value []byte, pre uint64, ok bool, err error)
	close() error
}

type chunkSource struct {
	c *chunk
	i int
}

func (s *chunkSource) next() ([]byte, []byte, uint64, bool, error) {
	if s.i >= len(s.c.ents) {
		return nil, nil, 0, false, nil
	}
	e := s.c.ents[s.i]
	s.i++
	return e.key(s.c.data), e.value(s.c.data), e.pre, true, nil
}

func (s *chunkSource) close() error { return nil }

type runSource struct {
	data []byte
	off  int
}

func (s *runSource) next() ([]byte, []byte, uint64, bool, error) {
	if s.off >= len(s.data) {
		return nil, nil, 0, false, nil
	}
	k, v, n, err := decodePairAt(s.data, s.off, "memory run")
	if err != nil {
		return nil, nil, 0, false, err
	}
	s.off += n
	return k, v, KeyPrefix(k), true, nil
}

func (s *runSource) close() error { return nil }

// cursor is a source with its current pair, in the merge heap.
type cursor struct {
	src  source
	pre  uint64
	key  []byte
	val  []byte
	rank int // position among the sources, to break ties stably
}

// mergeIter is a k-way merge over sources with a binary heap.
type mergeIter struct {
	ord  order
	h    []*cursor
	last *cursor // popped by the previous next, to advance and push back
	srcs []source
	key  []byte
	val  []byte
	err  error
	n    int64
}

func newMerge(ord order, srcs []source) *mergeIter {
	m := &mergeIter{ord: ord, srcs: srcs}
	for i, s := range srcs {
		c := &cursor{src: s, rank: i}
		if m.advance(c) {
			m.h = append(m.h, c)
		}
	}
	for i := len(m.h)/2 - 1; i >= 0; i-- {
		m.down(i)
	}
	return m
}

func (m *mergeIter) less(a, b *cursor) bool {
	var c int
	if m.ord.bytewise {
		if a.pre != b.pre {
			return a.pre < b.pre
		}
		c = bytes.Compare(a.key, b.key)
	} else {
		c = m.ord.cmp(a.key, b.key)
	}
	if c != 0 {
		return c < 0
	}
	return a.rank < b.rank
}

func (m *mergeIter) down(i int) {
	n := len(m.h)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		j := l
		if r := l + 1; r < n && m.less(m.h[r], m.h[l]) {
			j = r
		}
		if !m.less(m.h[j], m.h[i]) {
			return
		}
		m.h[i], m.h[j] = m.h[j], m.h[i]
		i = j
	}
}

// advance loads c's next pair; false at its end or on error.
func (m *mergeIter) advance(c *cursor) bool {
	k, v, pre, ok, err := c.src.next()
	if err != nil {
		if m.err == nil {
			m.err = err
		}
		return false
	}
	c.key, c.val, c.pre = k, v, pre
	return ok
}

// next moves to the smallest remaining pair; false at the end or on
// error (see err).
func (m *mergeIter) next() bool {
	if m.err != nil {
		return false
	}
	if c := m.last; c != nil {
		m.last = nil
		if m.advance(c) {
			m.h[0] = c
			m.down(0)
		} else {
			n := len(m.h) - 1
			m.h[0] = m.h[n]
			m.h = m.h[:n]
			if n > 0 {
				m.down(0)
			}
		}
		if m.err != nil {
			return false
		}
	}
	if len(m.h) == 0 {
		return false
	}
	c := m.h[0]
	m.last = c
	m.key, m.val = c.key, c.val
	m.n++
	return true
}

func (m *mergeIter) close() error {
	var first error
	for _, s := range m.srcs {
		if err := s.close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}
