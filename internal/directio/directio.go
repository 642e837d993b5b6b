// Package directio writes and reads large files sequentially around the
// page cache (O_DIRECT) where the file system allows it, and through it
// where it does not.
//
// Why: a sort's spill files and output are written once and read at most
// once. Through the page cache every byte is copied into a cache page
// the kernel must first find and map; on a virtual machine whose memory
// the host hands back when idle (free page reporting) that costs 5-12 µs
// per 4 KiB page, 1.4-3.1 s of CPU per GiB written, as much as the sort
// itself (bench/RESULTS.md, "TeraSort"). A direct write costs about a
// tenth of that CPU, and waits for the device instead.
//
// Direct transfers need an aligned buffer, offset and length (Align). A
// Writer writes whole aligned blocks directly and the last partial block
// through the cache (it clears O_DIRECT for it); a Reader reads aligned
// blocks and copies the requested range out. Where O_DIRECT is refused
// (tmpfs before Linux 6.6, other systems), both fall back to ordinary
// I/O with the same results.
package directio

import (
	"errors"
	"fmt"
	"io"
	"os"
	"unsafe"
)

// Align is the alignment of direct transfers: buffer address, file
// offset and length. 4096 covers every logical block size in use.
const Align = 4096

// Alloc returns a buffer of n bytes (rounded up to Align) whose first
// byte is Align-aligned.
func Alloc(n int) []byte {
	n = RoundUp(n)
	b := make([]byte, n+Align)
	skip := int(-uintptr(unsafe.Pointer(unsafe.SliceData(b))) & (Align - 1))
	return b[skip : skip+n : skip+n]
}

// RoundUp rounds n up to a multiple of Align.
func RoundUp(n int) int { return (n + Align - 1) &^ (Align - 1) }

// aligned reports whether b starts at an Align boundary.
func aligned(b []byte) bool {
	return len(b) == 0 || uintptr(unsafe.Pointer(unsafe.SliceData(b)))&(Align-1) == 0
}

// Writer writes a file sequentially from its start: whole aligned blocks
// directly, the rest through the cache at Finish. It does not buffer;
// WriteBlocks takes what it can and leaves the rest to the caller, and
// Buffer (below) is the io.Writer on top of it.
type Writer struct {
	f      *os.File
	direct bool
	off    int64
}

// NewWriter writes f, which must be empty and at offset 0, directly when
// its file system allows (direct false turns that off).
func NewWriter(f *os.File, direct bool) *Writer {
	return &Writer{f: f, direct: direct && setDirect(f, true) == nil}
}

// Direct reports whether the writer's blocks bypass the page cache (the
// tail Finish writes never does).
func (w *Writer) Direct() bool { return w.direct }

// Written is the number of bytes written so far.
func (w *Writer) Written() int64 { return w.off }

// WriteBlocks writes the longest prefix of p that is a whole number of
// Align blocks and returns its length; p must start at an Align boundary
// when the writer is direct (Alloc). A file system that refuses a direct
// write (EINVAL) makes the writer go on through the cache.
func (w *Writer) WriteBlocks(p []byte) (int, error) {
	n := len(p) &^ (Align - 1)
	if n == 0 {
		return 0, nil
	}
	if w.direct && !aligned(p) {
		return 0, fmt.Errorf("directio: write buffer not aligned to %d bytes (use Alloc)", Align)
	}
	k, err := w.f.Write(p[:n])
	if err != nil && w.direct && k == 0 && isInvalid(err) {
		// Accepted at open, refused at the write: some file systems do.
		if err = setDirect(w.f, false); err == nil {
			w.direct = false
			k, err = w.f.Write(p[:n])
		}
	}
	w.off += int64(k)
	if err == nil && k < n {
		err = io.ErrShortWrite
	}
	return k, err
}

// Finish writes tail (any length, the file's last bytes) through the cache.
// It does not close the file; no block may be written after it.
func (w *Writer) Finish(tail []byte) error {
	if len(tail) == 0 {
		return nil
	}
	if w.direct {
		// Direct keeps saying how the blocks went.
		if err := setDirect(w.f, false); err != nil {
			return err
		}
	}
	k, err := w.f.Write(tail)
	w.off += int64(k)
	if err == nil && k < len(tail) {
		err = io.ErrShortWrite
	}
	return err
}

// Buffer is an io.Writer that collects bytes in two aligned buffers and
// writes each full one in the background while it fills the other: the
// output of a sort, or a spill file. Sum, when set, sees every byte once,
// in order, before it is written: a checksum of the stream.
type Buffer struct {
	w      *Writer
	buf    []byte // aligned; len: bytes waiting
	next   []byte // the other buffer, being written or free
	summed int    // buf[:summed] was passed over to Sum already
	done   chan error
	err    error
	// Sum is called with the bytes of the stream, each once and in
	// order, at the latest when they are written or at SumNow. Bytes
	// that go by while it is nil are not seen.
	Sum func(p []byte)
}

// NewBuffer writes through w in blocks of size bytes (rounded up to Align).
func NewBuffer(w *Writer, size int) *Buffer {
	return NewBufferIn(w, Alloc(2*max(size, Align)))
}

// NewBufferIn writes through w using mem (from Alloc, length ignored, a
// multiple of 2*Align in capacity) as its two buffers, so that a caller
// writing file after file can keep one allocation. The caller leaves mem
// alone until Flush or Abandon returns.
func NewBufferIn(w *Writer, mem []byte) *Buffer {
	half := cap(mem) / 2 &^ (Align - 1)
	return &Buffer{w: w, buf: mem[:0:half], next: mem[half : half : 2*half]}
}

// Write appends p, writing every full buffer.
func (b *Buffer) Write(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	done := 0
	for done < len(p) {
		k := copy(b.buf[len(b.buf):cap(b.buf)], p[done:])
		b.buf = b.buf[:len(b.buf)+k]
		done += k
		if len(b.buf) == cap(b.buf) {
			if b.err = b.handOff(); b.err != nil {
				return done, b.err
			}
		}
	}
	return done, nil
}

// Append returns the next n bytes of the stream to fill in place, when
// they fit in the current buffer; nil when they do not (use Write).
func (b *Buffer) Append(n int) []byte {
	if b.err != nil || len(b.buf)+n > cap(b.buf) {
		return nil
	}
	b.buf = b.buf[:len(b.buf)+n]
	return b.buf[len(b.buf)-n:]
}

// SumNow passes the bytes buffered and not yet seen to Sum (or over them,
// when Sum is nil).
func (b *Buffer) SumNow() {
	if b.Sum != nil {
		b.Sum(b.buf[b.summed:])
	}
	b.summed = len(b.buf)
}

// handOff starts writing the full buffer in the background, once the
// previous write is done, and switches to the other.
func (b *Buffer) handOff() error {
	b.SumNow()
	if err := b.wait(); err != nil {
		return err
	}
	done, p := make(chan error, 1), b.buf
	b.done = done
	go func() {
		_, err := b.w.WriteBlocks(p)
		done <- err
	}()
	b.buf, b.next, b.summed = b.next[:0], b.buf, 0
	return nil
}

// wait waits for the write in flight and returns its error.
func (b *Buffer) wait() error {
	if b.done == nil {
		return nil
	}
	err := <-b.done
	b.done = nil
	return err
}

// Flush writes everything buffered: the whole blocks directly, the rest
// through the cache. Nothing may be written after it.
func (b *Buffer) Flush() error {
	if b.err != nil {
		b.wait()
		return b.err
	}
	b.SumNow()
	err := b.wait()
	if err == nil {
		var n int
		n, err = b.w.WriteBlocks(b.buf)
		if err == nil {
			err = b.w.Finish(b.buf[n:])
		}
	}
	b.buf = b.buf[:0]
	b.err = err
	if err == nil {
		b.err = errors.New("directio: write after Flush")
	}
	return err
}

// Abandon waits for the write in flight and drops what is buffered: the
// file is given up. Nothing may be written after it.
func (b *Buffer) Abandon() {
	b.wait()
	b.buf = b.buf[:0]
	b.err = errors.New("directio: write after Abandon")
}

// Reader reads the range [off, end) of a file sequentially, in aligned
// blocks of its buffers' size, directly when the file system allows; it
// reads the next block in the background while the caller consumes one.
type Reader struct {
	f      *os.File
	direct bool
	buf    []byte // aligned: the block being consumed
	spare  []byte // aligned: the block being read ahead, or free
	bufOff int64  // file offset of buf[0]
	r, w   int    // buf[r:w] is read and not yet returned
	skip   int    // bytes of the first block before the range (direct)
	next   int64  // file offset of the next block to read (aligned when direct)
	end    int64
	ahead  chan readResult // the read ahead in flight, nil for none
	err    error           // sticky
}

type readResult struct {
	k   int
	err error
}

// NewReader reads f from off to end through buffers of size bytes
// (rounded up to Align), directly when direct is set and the file system
// allows it. It changes f's O_DIRECT flag; f must not be shared, and Close
// must be called before f is closed.
func NewReader(f *os.File, off, end int64, size int, direct bool) *Reader {
	size = max(size, Align)
	r := &Reader{f: f, buf: Alloc(size), spare: Alloc(size), end: end}
	r.direct = direct && setDirect(f, true) == nil
	if r.direct {
		r.next = off &^ (Align - 1)
		r.skip = int(off - r.next)
	} else {
		r.next = off
	}
	return r
}

// Read copies the next bytes of the range into p; io.EOF at its end.
func (r *Reader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if r.r >= r.w {
		if r.err != nil {
			return 0, r.err
		}
		if r.err = r.fill(); r.err != nil {
			return 0, r.err
		}
	}
	n := copy(p, r.buf[r.r:r.w])
	r.r += n
	return n, nil
}

// Close waits for the read ahead in flight, if any.
func (r *Reader) Close() {
	if r.ahead != nil {
		<-r.ahead
		r.ahead = nil
	}
}

// readAt reads the block at off into b: as much as the range wants, or a
// whole buffer when direct (which rounds up to a block).
func (r *Reader) readAt(b []byte, off int64) (int, error) {
	want := len(b)
	if !r.direct {
		want = int(min(int64(want), r.end-off))
	}
	k, err := r.f.ReadAt(b[:want], off)
	if err != nil && r.direct && k == 0 && isInvalid(err) {
		if err = setDirect(r.f, false); err == nil {
			r.direct = false
			want = int(min(int64(len(b)), r.end-off))
			k, err = r.f.ReadAt(b[:want], off)
		}
	}
	if errors.Is(err, io.EOF) {
		err = nil
	}
	if err == nil && k < want && off+int64(k) < r.end {
		err = io.ErrUnexpectedEOF
	}
	return k, err
}

// fill makes buf the next block of the range: the one read ahead, or one
// read now; then starts reading the block after it.
func (r *Reader) fill() error {
	skip := r.skip
	r.skip = 0
	if r.next+int64(skip) >= r.end {
		return io.EOF
	}
	var res readResult
	if r.ahead != nil {
		res = <-r.ahead
		r.ahead = nil
		r.buf, r.spare = r.spare, r.buf
	} else {
		res.k, res.err = r.readAt(r.buf, r.next)
	}
	r.bufOff = r.next
	r.next += int64(res.k)
	// Past end (a direct read rounds up to a block) is not ours.
	valid := int(min(int64(res.k), r.end-r.bufOff))
	if res.err != nil {
		return res.err
	}
	if valid <= skip {
		return io.ErrUnexpectedEOF
	}
	r.r, r.w = skip, valid
	if r.next < r.end {
		ahead, b, off := make(chan readResult, 1), r.spare, r.next
		r.ahead = ahead
		go func() {
			k, err := r.readAt(b, off)
			ahead <- readResult{k, err}
		}()
	}
	return nil
}
