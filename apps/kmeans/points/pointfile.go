package points

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gaspigo/gaspigo/apps/kmeans/kernel"
)

// Format is a point file format.
type Format int

const (
	// FormatCSV is one point per line, comma-separated decimal floats.
	FormatCSV Format = iota + 1
	// FormatBinary is the header plus little-endian float64 layout
	// described in doc.go.
	FormatBinary
)

func (f Format) String() string {
	switch f {
	case FormatCSV:
		return "csv"
	case FormatBinary:
		return "binary"
	}
	return fmt.Sprintf("Format(%d)", int(f))
}

// ParseFormat accepts "csv" and "binary" (or "bin").
func ParseFormat(s string) (Format, error) {
	switch strings.ToLower(s) {
	case "csv":
		return FormatCSV, nil
	case "binary", "bin":
		return FormatBinary, nil
	}
	return 0, configErr("unknown point file format %q: use csv or binary", s)
}

// Binary layout (see doc.go).
const (
	// BinaryMagic starts every binary point file.
	BinaryMagic = "GGKMPTS\x00"
	// BinaryVersion is the only version written and accepted.
	BinaryVersion = 1
	// BinaryHeaderSize is the size of the header in bytes.
	BinaryHeaderSize = 32
)

// MaxLineBytes is the longest CSV line the readers accept.
const MaxLineBytes = 1 << 20

// Info describes a point file.
type Info struct {
	Format Format
	N      int // number of points
	D      int // dimension
}

// Inspect returns the format, number of points and dimension of a point
// file cheaply: for a binary file it reads and checks the header against the
// file size; for CSV it counts the non-blank lines and takes the dimension
// from the number of fields of the first one (the lines themselves are
// checked when a shard is read). The format is recognised by the binary
// magic, or by the .bin extension (IsBinaryPath), which makes a missing
// magic an ErrHeader; anything else is treated as CSV, laid out as l says.
// A CSV file whose first column is a row index (0, 1, 2, ... or 1, 2, 3,
// ... over its first points) or is named as one (an empty header field,
// "id", "index") is refused with ErrIndexColumn unless l says what that
// column is (Skip, KeepIndex): clustered as a coordinate it would
// outweigh every other one, silently.
func Inspect(path string, l CSVLayout) (Info, error) {
	f, err := os.Open(path)
	if err != nil {
		return Info{}, err
	}
	defer f.Close()
	head := make([]byte, BinaryHeaderSize)
	m, err := io.ReadFull(f, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return Info{}, &FileError{Path: path, Offset: 0, Err: err}
	}
	if IsBinaryPath(path) || (m >= len(BinaryMagic) && string(head[:len(BinaryMagic)]) == BinaryMagic) {
		n, d, err := checkBinaryHeader(path, f, head[:m])
		if err != nil {
			return Info{}, err
		}
		return Info{Format: FormatBinary, N: n, D: d}, nil
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return Info{}, &FileError{Path: path, Offset: 0, Err: err}
	}
	n := 0
	recs := newCSVRecords(f, l)
	var index indexWatch
	for {
		rec, line, err := recs.next()
		if err == io.EOF {
			break
		}
		if err == nil && n == 0 {
			// The first line, header or point, says which separator it has.
			if err = separatorHint(recs.head, l); err != nil {
				line = recs.header
			} else {
				err = separatorHint(rec, l)
			}
		}
		if err != nil {
			fe := err.(*FileError)
			fe.Path = path
			if fe.Line == 0 {
				fe.Line = line
			}
			return Info{}, fe
		}
		index.add(rec[0], line)
		n++
	}
	if n == 0 {
		return Info{}, &FileError{Path: path, Offset: -1, Err: ErrNoPoints, Detail: "the file is empty, or holds only blank lines or a header"}
	}
	d, _ := recs.dimension()
	if !l.KeepIndex && l.Skip == 0 {
		if err := indexColumn(recs.head, recs.header, &index, d); err != nil {
			fe := err.(*FileError)
			fe.Path = path
			return Info{}, fe
		}
	}
	return Info{Format: FormatCSV, N: n, D: d}, nil
}

// ReadShard reads points [lo, hi) of a point file of either format (see
// Inspect) and returns them row-major with the dimension.
func ReadShard(path string, lo, hi int, l CSVLayout) ([]float64, int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	magic := make([]byte, len(BinaryMagic))
	m, _ := io.ReadFull(f, magic)
	f.Close()
	if IsBinaryPath(path) || (m == len(magic) && string(magic) == BinaryMagic) {
		return ReadBinaryShard(path, lo, hi)
	}
	return ReadCSVShard(path, lo, hi, l)
}

// IsBinaryPath reports whether path names a binary point file by its
// extension (.bin, any case): such a file must start with BinaryMagic.
func IsBinaryPath(path string) bool {
	return strings.EqualFold(filepath.Ext(path), ".bin")
}

// ReadCSVShard reads points [lo, hi) (counting the records after the
// header, if any, from 0) of a CSV point file (the format of the package
// doc). The dimension is the number of values of the first non-blank
// record, the header's if the file has one; every point read must have
// that many finite values. Errors are *FileError values naming the line.
func ReadCSVShard(path string, lo, hi int, l CSVLayout) ([]float64, int, error) {
	if lo < 0 || hi < lo {
		return nil, 0, rangeErr(lo, hi, -1)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	recs := newCSVRecords(f, l)
	var out []float64
	d, idx := 0, 0
	for idx < hi {
		rec, line, err := recs.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			fe := err.(*FileError)
			fe.Path = path
			return nil, 0, fe
		}
		if d == 0 {
			d, _ = recs.dimension()
			if d > kernel.MaxDim {
				return nil, 0, &FileError{Path: path, Line: line, Offset: -1, Err: ErrColumns,
					Detail: fmt.Sprintf("%d values, at most %d are supported", d, kernel.MaxDim)}
			}
			if hi > lo {
				// A capacity hint only, bounded: the slice grows with
				// what the file really holds.
				out = make([]float64, 0, min(hi-lo, max(1, (1<<20)/d))*d)
			}
		}
		if idx >= lo {
			out, err = parseRecord(out, rec, d)
			if err != nil {
				fe := err.(*FileError)
				fe.Path, fe.Line = path, line
				if errors.Is(fe.Err, ErrColumns) {
					_, why := recs.dimension()
					fe.Detail += " (" + why + ")"
				}
				return nil, 0, fe
			}
		}
		idx++
	}
	if idx < hi {
		if idx == 0 {
			return nil, 0, &FileError{Path: path, Offset: -1, Err: ErrNoPoints, Detail: "the file is empty, or holds only blank lines or a header"}
		}
		return nil, 0, &FileError{Path: path, Offset: -1, Err: kernel.ErrRange,
			Detail: fmt.Sprintf("asked for points [%d, %d) but the file holds %d", lo, hi, idx)}
	}
	return out, d, nil
}

// checkBinaryHeader validates a binary header (head holds the first bytes
// of the file, up to BinaryHeaderSize) against the size of f.
func checkBinaryHeader(path string, f *os.File, head []byte) (n, d int, err error) {
	bad := func(off int64, e error, format string, args ...any) (int, int, error) {
		return 0, 0, &FileError{Path: path, Offset: off, Err: e, Detail: fmt.Sprintf(format, args...)}
	}
	if !bytes.HasPrefix(head, []byte(BinaryMagic)) {
		hint := ""
		if IsBinaryPath(path) {
			hint = ": a .bin file is read as the binary point format (see apps/kmeans/points/doc.go); give a CSV file another name, such as points.csv"
		}
		return bad(0, ErrHeader, "magic is %q, want %q%s", head[:min(len(head), len(BinaryMagic))], BinaryMagic, hint)
	}
	if len(head) < BinaryHeaderSize {
		return bad(int64(len(head)), ErrHeader, "the file is %d bytes, shorter than the %d-byte header", len(head), BinaryHeaderSize)
	}
	if v := binary.LittleEndian.Uint32(head[8:]); v != BinaryVersion {
		return bad(8, ErrHeader, "version %d, this program reads version %d", v, BinaryVersion)
	}
	if r := binary.LittleEndian.Uint32(head[12:]); r != 0 {
		return bad(12, ErrHeader, "reserved field is %#x, want 0", r)
	}
	un := binary.LittleEndian.Uint64(head[16:])
	ud := binary.LittleEndian.Uint64(head[24:])
	if ud < 1 || ud > kernel.MaxDim {
		return bad(24, ErrHeader, "dimension %d, want 1..%d", ud, kernel.MaxDim)
	}
	if un == 0 {
		return bad(16, kernel.ErrRange, "the header says the file holds no points")
	}
	if un > uint64(math.MaxInt64-BinaryHeaderSize)/(ud*8) {
		return bad(16, ErrHeader, "%d points of dimension %d cannot fit in a file", un, ud)
	}
	want := int64(BinaryHeaderSize) + int64(un)*int64(ud)*8
	st, err := f.Stat()
	if err != nil {
		return 0, 0, &FileError{Path: path, Offset: -1, Err: err}
	}
	if st.Size() != want {
		what := "truncated"
		if st.Size() > want {
			what = "trailing bytes"
		}
		return bad(st.Size(), ErrSize, "header says %d points of dimension %d, which is %d bytes, but the file has %d (%s)",
			un, ud, want, st.Size(), what)
	}
	return int(un), int(ud), nil
}

// ReadBinaryShard reads points [lo, hi) of a binary point file. The header
// is checked against the file size before anything is allocated; every
// value must be finite. Errors are *FileError values naming the offset.
func ReadBinaryShard(path string, lo, hi int) ([]float64, int, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	head := make([]byte, BinaryHeaderSize)
	m, err := io.ReadFull(f, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, 0, &FileError{Path: path, Offset: 0, Err: err}
	}
	n, d, err := checkBinaryHeader(path, f, head[:m])
	if err != nil {
		return nil, 0, err
	}
	if lo < 0 || hi < lo || hi > n {
		return nil, 0, &FileError{Path: path, Offset: -1, Err: kernel.ErrRange,
			Detail: fmt.Sprintf("asked for points [%d, %d) but the file holds %d", lo, hi, n)}
	}
	off := int64(BinaryHeaderSize) + int64(lo)*int64(d)*8
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return nil, 0, &FileError{Path: path, Offset: off, Err: err}
	}
	out := make([]float64, (hi-lo)*d)
	buf := make([]byte, min(len(out)*8, 256<<10))
	for i := 0; i < len(out); {
		chunk := buf[:min(len(buf), (len(out)-i)*8)]
		if _, err := io.ReadFull(f, chunk); err != nil {
			return nil, 0, &FileError{Path: path, Offset: off + int64(i)*8, Err: err, Detail: "reading point data"}
		}
		for j := 0; j < len(chunk); j += 8 {
			v := math.Float64frombits(binary.LittleEndian.Uint64(chunk[j:]))
			if math.IsNaN(v) || math.IsInf(v, 0) {
				g := lo*d + i
				return nil, 0, &FileError{Path: path, Offset: off + int64(i)*8, Err: kernel.ErrNotFinite,
					Detail: fmt.Sprintf("point %d dimension %d is %v", g/d, g%d, v)}
			}
			out[i] = v
			i++
		}
	}
	return out, d, nil
}

func checkFinite(points []float64, d int) error {
	for i, v := range points {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("%w: point %d dimension %d is %v", kernel.ErrNotFinite, i/d, i%d, v)
		}
	}
	return nil
}

// WriteCSV writes points (row-major, dimension d) as CSV, one point per
// line, values formatted with strconv 'g' -1 so they read back exactly.
// It refuses non-finite values (so the file is always readable).
func WriteCSV(w io.Writer, points []float64, d int) error {
	if d < 1 || len(points)%d != 0 {
		return shapeErr("WriteCSV: len(points) = %d is not a multiple of d = %d", len(points), d)
	}
	if err := checkFinite(points, d); err != nil {
		return err
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	line := make([]byte, 0, 24*d+1)
	for i := 0; i < len(points); i += d {
		line = line[:0]
		for t, v := range points[i : i+d] {
			if t > 0 {
				line = append(line, ',')
			}
			line = strconv.AppendFloat(line, v, 'g', -1, 64)
		}
		line = append(line, '\n')
		if _, err := bw.Write(line); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// WriteBinaryHeader writes the header of a binary point file holding n
// points of dimension d. The caller then writes exactly n*d values with
// WriteBinaryPoints (in one or many calls).
func WriteBinaryHeader(w io.Writer, n, d int) error {
	if n < 1 || d < 1 || d > kernel.MaxDim {
		return shapeErr("WriteBinaryHeader: n = %d, d = %d; want n ≥ 1 and 1 ≤ d ≤ %d", n, d, kernel.MaxDim)
	}
	h := make([]byte, BinaryHeaderSize)
	copy(h, BinaryMagic)
	binary.LittleEndian.PutUint32(h[8:], BinaryVersion)
	binary.LittleEndian.PutUint64(h[16:], uint64(n))
	binary.LittleEndian.PutUint64(h[24:], uint64(d))
	_, err := w.Write(h)
	return err
}

// WriteBinaryPoints writes values as little-endian float64. It refuses
// non-finite values.
func WriteBinaryPoints(w io.Writer, values []float64) error {
	if err := checkFinite(values, 1); err != nil {
		return err
	}
	buf := make([]byte, min(len(values)*8, 256<<10))
	for i := 0; i < len(values); {
		m := min(len(buf)/8, len(values)-i)
		for j := 0; j < m; j++ {
			binary.LittleEndian.PutUint64(buf[8*j:], math.Float64bits(values[i+j]))
		}
		if _, err := w.Write(buf[:8*m]); err != nil {
			return err
		}
		i += m
	}
	return nil
}

// WriteBinary writes a complete binary point file.
func WriteBinary(w io.Writer, points []float64, d int) error {
	if d < 1 || len(points)%d != 0 || len(points) == 0 {
		return shapeErr("WriteBinary: len(points) = %d is not a positive multiple of d = %d", len(points), d)
	}
	if err := checkFinite(points, d); err != nil {
		return err
	}
	if err := WriteBinaryHeader(w, len(points)/d, d); err != nil {
		return err
	}
	return WriteBinaryPoints(w, points)
}

// WriteFile creates (or truncates) path, readable by its owner only, and
// writes points in format f.
func WriteFile(path string, f Format, points []float64, d int) (err error) {
	var write func(io.Writer, []float64, int) error
	switch f {
	case FormatCSV:
		write = WriteCSV
	case FormatBinary:
		write = WriteBinary
	default:
		return configErr("WriteFile: unknown format %v", f)
	}
	file, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := file.Close(); err == nil {
			err = cerr
		}
	}()
	return write(file, points, d)
}
