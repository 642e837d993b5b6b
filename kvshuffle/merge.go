package kvshuffle

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
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

// keyPrefix is the first 8 bytes of k, big-endian, zero-padded. For
// bytewise order, prefix(a) < prefix(b) implies a < b, so most comparisons
// are one integer comparison.
func keyPrefix(k []byte) uint64 {
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
		es = append(es, ent{pre: keyPrefix(k), kstart: uint32(ks), kend: uint32(ks + len(k)), end: uint32(base + off + n)})
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
	charge int64 // bytes charged against the budget for data (a block: its capacity)
	pooled bool  // data and ents go back to the pool when the chunk is freed
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
	return k, v, keyPrefix(k), true, nil
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

// Spill files. A spill file is one sorted run:
//
//	0        magic "KVSPILL1"
//	8        framed pairs (the run framing)
//	size-16  pairs uint64, CRC-32C of the framed pairs uint32, "KVSE"
//
// all little-endian. Readers check the magic, the trailer, the framing of
// every pair, the pair count and the checksum.

const (
	spillMagic   = "KVSPILL1"
	spillTrailer = "KVSE"
	spillHead    = 8
	spillTail    = 16
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// spillFile is a spill file on disk.
type spillFile struct {
	path  string
	size  int64 // whole file
	pairs uint64
	crc   uint32
	live  bool // part of the A task's current data
}

func (f *spillFile) dataLen() int64 { return f.size - spillHead - spillTail }

// spillWriter writes one spill file through one large buffer: pairs are
// appended to it, and each full buffer is checksummed and written with a
// single write (a pair larger than the buffer goes straight to the file).
type spillWriter struct {
	f       *os.File
	buf     []byte // len: bytes waiting; cap: the I/O size
	crcFrom int    // buf[:crcFrom] is not part of the checksum (the magic)
	crc     uint32
	pairs   uint64
	n       int64
	hdr     [2 * binary.MaxVarintLen64]byte
}

// createSpill creates a spill file in dir; buf (length ignored) is the
// write buffer, which the writer uses until finish or abort.
func createSpill(dir string, buf []byte) (*spillWriter, error) {
	f, err := os.CreateTemp(dir, "run-*.kvs")
	if err != nil {
		return nil, err
	}
	w := &spillWriter{f: f, buf: append(buf[:0], spillMagic...), crcFrom: spillHead}
	return w, nil
}

func (w *spillWriter) flush() error {
	w.crc = crc32.Update(w.crc, castagnoli, w.buf[w.crcFrom:])
	_, err := w.f.Write(w.buf)
	w.buf, w.crcFrom = w.buf[:0], 0
	return err
}

func (w *spillWriter) write(k, v []byte) error {
	size := PairSize(len(k), len(v))
	if len(w.buf)+size > cap(w.buf) {
		if err := w.flush(); err != nil {
			return err
		}
	}
	w.pairs++
	w.n += int64(size)
	if size <= cap(w.buf) {
		w.buf = binary.AppendUvarint(w.buf, uint64(len(k)))
		w.buf = binary.AppendUvarint(w.buf, uint64(len(v)))
		w.buf = append(w.buf, k...)
		w.buf = append(w.buf, v...)
		return nil
	}
	h := binary.PutUvarint(w.hdr[:], uint64(len(k)))
	h += binary.PutUvarint(w.hdr[h:], uint64(len(v)))
	for _, b := range [][]byte{w.hdr[:h], k, v} {
		w.crc = crc32.Update(w.crc, castagnoli, b)
		if _, err := w.f.Write(b); err != nil {
			return err
		}
	}
	return nil
}

func (w *spillWriter) finish() (*spillFile, error) {
	if len(w.buf)+spillTail > cap(w.buf) {
		if err := w.flush(); err != nil {
			w.abort()
			return nil, err
		}
	}
	w.crc = crc32.Update(w.crc, castagnoli, w.buf[w.crcFrom:])
	w.crcFrom = len(w.buf)
	w.buf = binary.LittleEndian.AppendUint64(w.buf, w.pairs)
	w.buf = binary.LittleEndian.AppendUint32(w.buf, w.crc)
	w.buf = append(w.buf, spillTrailer...)
	if _, err := w.f.Write(w.buf); err != nil {
		w.abort()
		return nil, err
	}
	if err := w.f.Close(); err != nil {
		os.Remove(w.f.Name())
		return nil, err
	}
	return &spillFile{path: w.f.Name(), size: spillHead + w.n + spillTail, pairs: w.pairs, crc: w.crc}, nil
}

func (w *spillWriter) abort() {
	w.f.Close()
	os.Remove(w.f.Name())
}

// fileSource streams a spill file's pairs: it reads the file in blocks of
// its buffer's size and decodes the pairs in place (the key and value it
// returns alias the buffer), checksumming each block as it is read.
type fileSource struct {
	sf      *spillFile
	f       *os.File
	off     int64 // file offset of the next read
	end     int64 // file offset where the framed pairs end
	buf     []byte
	r, w    int // buf[r:w] is read and not decoded yet
	crc     uint32
	pairs   uint64
	maxPair int
}

// checkSpill verifies a spill file's size, magic and trailer against what
// the shuffle recorded when it wrote the file.
func checkSpill(sf *spillFile) (*os.File, error) {
	f, err := os.Open(sf.path)
	if err != nil {
		return nil, err
	}
	fail := func(off int64, format string, args ...any) (*os.File, error) {
		f.Close()
		return nil, corrupt("spill file "+sf.path, off, format, args...)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if fi.Size() != sf.size || sf.size < spillHead+spillTail {
		return fail(0, "%d bytes, the shuffle wrote %d", fi.Size(), sf.size)
	}
	var head [spillHead]byte
	var tail [spillTail]byte
	if _, err := f.ReadAt(head[:], 0); err != nil {
		f.Close()
		return nil, err
	}
	if _, err := f.ReadAt(tail[:], sf.size-spillTail); err != nil {
		f.Close()
		return nil, err
	}
	switch {
	case string(head[:]) != spillMagic:
		return fail(0, "bad magic %q", head[:])
	case string(tail[12:]) != spillTrailer:
		return fail(sf.size-4, "bad trailer magic %q", tail[12:])
	case binary.LittleEndian.Uint64(tail[0:]) != sf.pairs:
		return fail(sf.size-spillTail, "trailer counts %d pairs, the shuffle wrote %d", binary.LittleEndian.Uint64(tail[0:]), sf.pairs)
	case binary.LittleEndian.Uint32(tail[8:]) != sf.crc:
		return fail(sf.size-8, "trailer checksum %08x, the shuffle wrote %08x", binary.LittleEndian.Uint32(tail[8:]), sf.crc)
	}
	return f, nil
}

func openSpill(sf *spillFile, ioBuf, maxPair int) (*fileSource, error) {
	f, err := checkSpill(sf)
	if err != nil {
		return nil, err
	}
	return &fileSource{sf: sf, f: f, off: spillHead, end: spillHead + sf.dataLen(), buf: make([]byte, ioBuf), maxPair: maxPair}, nil
}

func (s *fileSource) bad(format string, args ...any) error {
	return corrupt("spill file "+s.sf.path, s.off-int64(s.w-s.r), format, args...)
}

// fill makes buf[r:w] hold at least need bytes, or everything left.
func (s *fileSource) fill(need int) error {
	if s.w-s.r >= need || s.off == s.end {
		return nil
	}
	if s.r > 0 {
		s.w = copy(s.buf, s.buf[s.r:s.w])
		s.r = 0
	}
	if need > len(s.buf) {
		nb := make([]byte, need)
		copy(nb, s.buf[:s.w])
		s.buf = nb
	}
	for s.w < need && s.off < s.end {
		n := int(min(int64(len(s.buf)-s.w), s.end-s.off))
		k, err := s.f.ReadAt(s.buf[s.w:s.w+n], s.off)
		s.crc = crc32.Update(s.crc, castagnoli, s.buf[s.w:s.w+k])
		s.w += k
		s.off += int64(k)
		if k < n {
			if err == nil || errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return s.bad("read: %v", err)
		}
	}
	return nil
}

// readLen decodes one length varint at buf[r:w].
func (s *fileSource) readLen() (uint64, error) {
	x, n := binary.Uvarint(s.buf[s.r:s.w])
	switch {
	case n == 0:
		return 0, s.bad("pair cut short")
	case n < 0:
		return 0, s.bad("length varint overflows 64 bits")
	case n != uvarintLen(x):
		return 0, s.bad("length varint not in shortest form (%d bytes for %d)", n, x)
	}
	s.r += n
	return x, nil
}

func (s *fileSource) next() ([]byte, []byte, uint64, bool, error) {
	if s.r == s.w && s.off == s.end {
		if s.pairs != s.sf.pairs {
			return nil, nil, 0, false, s.bad("%d pairs, trailer says %d", s.pairs, s.sf.pairs)
		}
		if s.crc != s.sf.crc {
			return nil, nil, 0, false, s.bad("checksum %08x, trailer says %08x", s.crc, s.sf.crc)
		}
		return nil, nil, 0, false, nil
	}
	if err := s.fill(2 * binary.MaxVarintLen64); err != nil {
		return nil, nil, 0, false, err
	}
	start := s.r
	kl, err := s.readLen()
	if err != nil {
		return nil, nil, 0, false, err
	}
	vl, err := s.readLen()
	if err != nil {
		return nil, nil, 0, false, err
	}
	left := int64(s.w-s.r) + (s.end - s.off)
	if kl > uint64(s.maxPair) || vl > uint64(s.maxPair) || int64(kl+vl) > left {
		return nil, nil, 0, false, s.bad("pair claims %d+%d bytes, %d left", kl, vl, left)
	}
	n := int(kl + vl)
	if s.w-s.r < n {
		hdr := s.r - start
		s.r = start // keep the lengths in the window while it moves
		if err := s.fill(hdr + n); err != nil {
			return nil, nil, 0, false, err
		}
		s.r += hdr
	}
	b := s.buf[s.r : s.r+n]
	s.r += n
	s.pairs++
	return b[:kl:kl], b[kl:n:n], keyPrefix(b[:kl]), true, nil
}

func (s *fileSource) close() error { return s.f.Close() }

// mergeTo drains m into a spill file in dir, checking ctx now and then.
func mergeTo(ctx context.Context, m *mergeIter, dir string, buf []byte) (*spillFile, error) {
	w, err := createSpill(dir, buf)
	if err != nil {
		return nil, err
	}
	for m.next() {
		if err := w.write(m.key, m.val); err != nil {
			w.abort()
			return nil, err
		}
		if m.n&4095 == 0 && ctx.Err() != nil {
			w.abort()
			return nil, ctx.Err()
		}
	}
	if m.err != nil {
		w.abort()
		return nil, m.err
	}
	sf, err := w.finish()
	if err != nil {
		return nil, fmt.Errorf("spill file: %w", err)
	}
	return sf, nil
}

// mergeToMemory drains m into a new run of capacity size.
func mergeToMemory(m *mergeIter, size int64) (*memRun, error) {
	out := make([]byte, 0, size)
	for m.next() {
		out = AppendPair(out, m.key, m.val)
	}
	if m.err != nil {
		return nil, m.err
	}
	return &memRun{data: out, pairs: m.n}, nil
}
