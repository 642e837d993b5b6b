package points

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/gaspigo/gaspigo/apps/kmeans/kernel"
)

// The errors of the point files. They also wrap the shared sentinels of
// package kernel: kernel.ErrNotFinite (a NaN or infinite value, read or
// to be written), kernel.ErrRange (a shard outside the file),
// kernel.ErrCount (a centroid file without k centroids), kernel.ErrShape
// (slices that do not match n, d or k) and kernel.ErrConfig (a bad
// layout or format name).
var (
	// ErrSyntax is returned inside a *FileError by the CSV readers when a
	// field is not a decimal floating-point number.
	ErrSyntax = errors.New("kmeans: not a number")
	// ErrColumns is returned inside a *FileError by the CSV readers when a
	// line does not have the expected number of values.
	ErrColumns = errors.New("kmeans: wrong number of columns")
	// ErrIndexColumn is returned inside a *FileError by Inspect when the
	// first column of a CSV file is a row index, or is named as one, and
	// the layout does not say what it is (CSVLayout.Skip, KeepIndex).
	ErrIndexColumn = errors.New("kmeans: the first column is an index")
	// ErrHeader is returned inside a *FileError by ReadBinaryShard and
	// Inspect when the binary header is not one this package writes (bad
	// magic, unknown version, zero or absurd dimension).
	ErrHeader = errors.New("kmeans: bad binary header")
	// ErrSize is returned inside a *FileError by ReadBinaryShard and Inspect
	// when the file size disagrees with the header (truncated or trailing
	// bytes).
	ErrSize = errors.New("kmeans: file size does not match the header")
	// ErrNoPoints is returned inside a *FileError by Inspect and the
	// readers for a file that holds no points (empty, blank lines, only a
	// header). It is a kernel.ErrRange too (errors.Is), as it was.
	ErrNoPoints error = noPoints{}
	// ErrLineTooLong is returned inside a *FileError by the CSV readers and
	// Inspect for a line longer than MaxLineBytes.
	ErrLineTooLong = errors.New("kmeans: line too long")
)

// FileError says where in which file reading went wrong. Line is 1-based and
// set for CSV input; Offset is the byte offset and set for binary input (-1
// when not applicable). It wraps one of the sentinels above or an I/O error.
type FileError struct {
	Path   string
	Line   int   // 1-based line number, 0 if not applicable
	Offset int64 // byte offset, -1 if not applicable
	Err    error
	Detail string // what exactly was wrong, e.g. `got 3 values, want 10`
}

func (e *FileError) Error() string {
	loc := e.Path
	if e.Line > 0 {
		loc += ":" + strconv.Itoa(e.Line)
	} else if e.Offset >= 0 {
		loc += " at byte offset " + strconv.FormatInt(e.Offset, 10)
	}
	msg := fmt.Sprintf("%s: %v", loc, e.Err)
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

func (e *FileError) Unwrap() error { return e.Err }

func shapeErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{kernel.ErrShape}, args...)...)
}

func configErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{kernel.ErrConfig}, args...)...)
}

func rangeErr(lo, hi, n int) error {
	return fmt.Errorf("%w: [%d, %d) is not inside [0, %d)", kernel.ErrRange, lo, hi, n)
}

// noPoints is ErrNoPoints: its own words ("no points", not the shard
// range's), and kernel.ErrRange for the callers that test for that.
type noPoints struct{}

func (noPoints) Error() string        { return "kmeans: no points" }
func (noPoints) Is(target error) bool { return target == kernel.ErrRange }
