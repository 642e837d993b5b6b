package kvshuffle

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"

	"github.com/gaspigo/gaspigo/internal/directio"
)

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
	// direct: written around the page cache, so read around it too (a
	// file restored from a checkpoint is read through the cache).
	direct bool
}

func (f *spillFile) dataLen() int64 { return f.size - spillHead - spillTail }

// spillWriter writes one spill file through a directio.Buffer: two
// aligned buffers, each written in the background once full while the
// other fills, around the page cache unless the shuffle's PageCache is
// set. Pairs are framed in place in the buffer where they fit. The
// buffer's Sum keeps the checksum of the framed pairs.
type spillWriter struct {
	f     *os.File
	dw    *directio.Writer
	b     *directio.Buffer
	crc   uint32
	pairs uint64
	n     int64
	hdr   [2 * binary.MaxVarintLen64]byte
}

// createSpill creates a spill file in dir; buf (from spillBuffer) holds
// the two write buffers, which the writer uses until finish or abort.
func createSpill(dir string, buf []byte, pageCache bool) (*spillWriter, error) {
	f, err := os.CreateTemp(dir, "run-*.kvs")
	if err != nil {
		return nil, err
	}
	dw := directio.NewWriter(f, !pageCache)
	w := &spillWriter{f: f, dw: dw, b: directio.NewBufferIn(dw, buf)}
	w.b.Write([]byte(spillMagic))
	w.b.SumNow() // the magic is not part of the checksum
	w.b.Sum = func(p []byte) { w.crc = crc32.Update(w.crc, castagnoli, p) }
	return w, nil
}

// spillBuffer returns memory for the spill writer's two buffers of size
// bytes each: buf if it is that already.
func spillBuffer(buf []byte, size int) []byte {
	size = directio.RoundUp(max(size, 2*directio.Align))
	if cap(buf) < 2*size {
		return directio.Alloc(2 * size)
	}
	return buf
}

// put appends framed pairs as they are; the caller counts them.
func (w *spillWriter) put(p []byte) error {
	_, err := w.b.Write(p)
	return err
}

func (w *spillWriter) write(k, v []byte) error {
	size := PairSize(len(k), len(v))
	w.pairs++
	w.n += int64(size)
	if dst := w.b.Append(size); dst != nil {
		h := binary.PutUvarint(dst, uint64(len(k)))
		h += binary.PutUvarint(dst[h:], uint64(len(v)))
		h += copy(dst[h:], k)
		copy(dst[h:], v)
		return nil
	}
	h := binary.PutUvarint(w.hdr[:], uint64(len(k)))
	h += binary.PutUvarint(w.hdr[h:], uint64(len(v)))
	for _, b := range [][]byte{w.hdr[:h], k, v} {
		if err := w.put(b); err != nil {
			return err
		}
	}
	return nil
}

func (w *spillWriter) finish() (*spillFile, error) {
	w.b.SumNow()
	w.b.Sum = nil
	var tail [spillTail]byte
	binary.LittleEndian.PutUint64(tail[0:], w.pairs)
	binary.LittleEndian.PutUint32(tail[8:], w.crc)
	copy(tail[12:], spillTrailer)
	err := w.put(tail[:])
	if err == nil {
		err = w.b.Flush()
	}
	if err != nil {
		w.abort()
		return nil, err
	}
	if err := w.f.Close(); err != nil {
		os.Remove(w.f.Name())
		return nil, err
	}
	return &spillFile{path: w.f.Name(), size: spillHead + w.n + spillTail, pairs: w.pairs, crc: w.crc, direct: w.dw.Direct()}, nil
}

func (w *spillWriter) abort() {
	w.b.Abandon()
	w.f.Close()
	os.Remove(w.f.Name())
}

// fileSource streams a spill file's pairs: it reads the file in blocks of
// its buffer's size and decodes the pairs in place (the key and value it
// returns alias the buffer), checksumming each block as it is read.
type fileSource struct {
	sf      *spillFile
	f       *os.File
	rd      *directio.Reader
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
	end := spillHead + sf.dataLen()
	rd := directio.NewReader(f, spillHead, end, ioBuf, sf.direct)
	return &fileSource{sf: sf, f: f, rd: rd, off: spillHead, end: end, buf: make([]byte, ioBuf), maxPair: maxPair}, nil
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
		k, err := io.ReadFull(s.rd, s.buf[s.w:s.w+n])
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
	return b[:kl:kl], b[kl:n:n], KeyPrefix(b[:kl]), true, nil
}

func (s *fileSource) close() error {
	s.rd.Close()
	return s.f.Close()
}

// mergeTo drains m into a spill file in dir, checking ctx now and then.
func mergeTo(ctx context.Context, m *mergeIter, dir string, buf []byte, pageCache bool) (*spillFile, error) {
	w, err := createSpill(dir, buf, pageCache)
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
