package kmeans

import (
	"errors"
	"fmt"
	"strconv"
)

var (
	// ErrConfig is returned by Config.Validate, NewKernel, Lloyd and
	// GenConfig.Validate/Generate when a setting is out of range or two
	// settings contradict each other, by NewJob for a K above the number
	// of points, by CheckInjects and NewJob for an
	// injection that names no rank or host of the job, and by
	// Job.Resumed for a MaxIter below the checkpoint's iteration. The
	// wrapping error names the values.
	ErrConfig = errors.New("kmeans: invalid configuration")
	// ErrShape is returned by NewKernel, Kernel.Step, Lloyd, Reference, the
	// writers and the helpers when a slice length does not match the stated
	// n, d or k (for example len(points) is not a multiple of d).
	ErrShape = errors.New("kmeans: slice length does not match the shape")
	// ErrNotFinite is returned when a coordinate is NaN or ±Inf: by the
	// readers (inside a *FileError), by NewKernel and Kernel.Step (together
	// with ErrShape), and by the writers, which refuse to write such values.
	// K-means on such values has no meaning.
	ErrNotFinite = errors.New("kmeans: value is NaN or infinite")
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
	// ErrRange is returned by the shard readers and Generate when [lo, hi)
	// is inverted or reaches past the end of the data set (and, as
	// ErrNoPoints, for a file that holds no points).
	ErrRange = errors.New("kmeans: shard range outside the data set")
	// ErrNoPoints is returned inside a *FileError by Inspect and the
	// readers for a file that holds no points (empty, blank lines, only a
	// header). It is an ErrRange too (errors.Is), as it was.
	ErrNoPoints error = noPoints{}
	// ErrCount is returned inside a *FileError by ReadCentroidsCSV when the
	// file does not hold exactly k centroids, and by InitIndices when k > n.
	ErrCount = errors.New("kmeans: wrong number of centroids")
	// ErrLineTooLong is returned inside a *FileError by the CSV readers and
	// Inspect for a line longer than MaxLineBytes.
	ErrLineTooLong = errors.New("kmeans: line too long")
	// ErrClosed is returned by Kernel.Step after Kernel.Close.
	ErrClosed = errors.New("kmeans: kernel closed")
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
	return fmt.Errorf("%w: "+format, append([]any{ErrShape}, args...)...)
}

func configErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...)
}

// noPoints is ErrNoPoints: its own words ("no points", not the shard
// range's), and ErrRange for the callers that test for that.
type noPoints struct{}

func (noPoints) Error() string        { return "kmeans: no points" }
func (noPoints) Is(target error) bool { return target == ErrRange }
