package terasort

import (
	"errors"
	"fmt"
	"io"
)

// DefaultBlockBytes is the block size Reader uses when asked for a size
// below one record: 40,000 records (4 MB), large enough that per-call costs
// vanish and small enough to stay in L2/L3-friendly chunks per worker.
const DefaultBlockBytes = 40000 * RecordSize

// maxZeroReads bounds how many (0, nil) reads in a row Reader accepts before
// it gives up with io.ErrNoProgress, as bufio does.
const maxZeroReads = 100

// Reader reads whole 100-byte records from an io.Reader in large blocks,
// with no allocation per record or per block. A stream whose length is not
// a multiple of 100 ends in a *FileError wrapping ErrSize that names the
// stream and the offset of the cut record.
//
// A Reader is not safe for concurrent use. The block Next returns is valid
// only until the next call to Next or Reset.
type Reader struct {
	r    io.Reader
	name string
	buf  []byte
	off  int64 // stream offset of buf[0]
	ret  int   // bytes of buf returned by the last Next
	keep int   // bytes of a partial record after buf[:ret]
	err  error // sticky: io.EOF or the error to return
}

// NewReader returns a Reader over r. name is used in errors (a file path,
// usually). blockBytes is rounded down to a multiple of RecordSize; values
// below RecordSize select DefaultBlockBytes.
func NewReader(r io.Reader, name string, blockBytes int) *Reader {
	if blockBytes < RecordSize {
		blockBytes = DefaultBlockBytes
	}
	rd := &Reader{buf: make([]byte, blockBytes/RecordSize*RecordSize)}
	rd.Reset(r, name)
	return rd
}

// Reset makes the Reader read from r, reusing its buffer.
func (rd *Reader) Reset(r io.Reader, name string) { rd.resetAt(r, name, 0) }

// resetAt is Reset for a stream that starts at byte base of the named file
// (a section), so that offsets in errors are file offsets.
func (rd *Reader) resetAt(r io.Reader, name string, base int64) {
	rd.r, rd.name = r, name
	rd.off, rd.ret, rd.keep, rd.err = base, 0, 0, nil
}

// Offset returns the stream offset of the first record not yet returned by
// Next.
func (rd *Reader) Offset() int64 { return rd.off + int64(rd.ret) }

// Next returns the next block of whole records: a non-empty slice whose
// length is a multiple of RecordSize. At the end of a well-formed stream it
// returns (nil, io.EOF). If the stream ends inside a record, the whole
// records before it are returned first, then a *FileError wrapping ErrSize
// with the offset where the partial record starts. A read error is returned
// as a *FileError wrapping it. Errors are sticky.
func (rd *Reader) Next() ([]byte, error) {
	if rd.err != nil {
		return nil, rd.err
	}
	if rd.ret > 0 {
		copy(rd.buf, rd.buf[rd.ret:rd.ret+rd.keep])
		rd.off += int64(rd.ret)
		rd.ret = 0
	}
	n := rd.keep
	var rerr error
	for zeros := 0; n < len(rd.buf); {
		k, err := rd.r.Read(rd.buf[n:])
		if k < 0 || k > len(rd.buf)-n {
			rerr = fmt.Errorf("reader returned an invalid count %d", k)
			break
		}
		n += k
		if err != nil {
			rerr = err
			break
		}
		if k > 0 {
			zeros = 0
		} else if zeros++; zeros >= maxZeroReads {
			rerr = io.ErrNoProgress
			break
		}
	}
	whole := n / RecordSize * RecordSize
	rd.keep = n - whole
	switch {
	case rerr == nil:
	case errors.Is(rerr, io.EOF):
		if rd.keep > 0 {
			at := rd.off + int64(whole)
			rd.err = &FileError{Path: rd.name, Offset: at, Err: ErrSize,
				Detail: fmt.Sprintf("data ends %d bytes into record %d (size %d is not a multiple of %d): the file is truncated or has trailing bytes",
					rd.keep, at/RecordSize, at+int64(rd.keep), RecordSize)}
		} else {
			rd.err = io.EOF
		}
	default:
		rd.err = &FileError{Path: rd.name, Offset: rd.off + int64(n), Err: rerr}
		return nil, rd.err
	}
	if whole == 0 {
		return nil, rd.err
	}
	rd.ret = whole
	return rd.buf[:whole], nil
}
