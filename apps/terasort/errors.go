package terasort

import (
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
)

var (
	// ErrConfig is returned by the Validate methods of GenConfig, ScanConfig
	// and SortConfig, by Generate, GenerateFile, ValidateFiles, SumFiles,
	// NewSorter and SortInMemory, SplitInputs (part out of range) and
	// ReadShards (negative start) when a setting is out of range or two
	// settings contradict each other, by SortInMemory and Sorter.Sort when
	// the buffers overlap, by AllocBuffer for a negative size, and by
	// ParseFormat for an unknown name. The wrapping error names the values.
	ErrConfig = errors.New("terasort: invalid configuration")
	// ErrSize is returned inside a *FileError by Reader.Next,
	// ValidateFiles, SumFiles, CheckFileSize, LoadFiles, SampleFiles and
	// SplitInputs when
	// a file is not a whole number of 100-byte records (truncated, or
	// trailing bytes), and directly by SortInMemory, Sorter.Sort and
	// WriteFile for a slice whose length is not a multiple of RecordSize or
	// whose destination has the wrong length.
	ErrSize = errors.New("terasort: not a whole number of 100-byte records")
	// ErrDisorder is returned inside an *OrderError by ValidateFiles when a
	// record's key is smaller than the key before it, within a file or
	// across consecutive files.
	ErrDisorder = errors.New("terasort: records out of order")
	// ErrMismatch is returned by Expect.Check when the record count or the
	// checksum differs from the expected value.
	ErrMismatch = errors.New("terasort: result does not match the expected value")
	// ErrNoInput is returned by ListParts and ResolveInputs when a directory
	// holds no part-NNNNN files or no input was named, by ListParts when the
	// part numbers have a gap (a part is missing), and by ValidateFiles and
	// SumFiles for an empty list of paths.
	ErrNoInput = errors.New("terasort: no input files")
	// ErrExists is returned by Generate and GenerateFile when the output
	// already exists (part files in the directory, or the single file).
	// Remove it first (terasort gen --force does).
	ErrExists = errors.New("terasort: output already exists")
	// ErrOutputDir is returned by PlanOutput when terasort sort must not
	// write into the output directory: it is, contains or lies inside the
	// input directory, it is not empty (and replacing was not asked for),
	// or it holds files a previous sort did not write.
	ErrOutputDir = errors.New("terasort: unusable output directory")
	// ErrIncomplete is returned by ReadSuccess when a directory is not the
	// complete output of terasort sort (no marker, a listed part missing
	// or of another size, a part the marker does not list), and by
	// WriteSuccess when the parts do not hold the sorted records.
	ErrIncomplete = errors.New("terasort: not a complete sort output")
	// ErrSplitters is returned by NewPartitioner when the splitters are not
	// in non-decreasing key order.
	ErrSplitters = errors.New("terasort: splitters are not sorted")
	// ErrTooLarge is returned by SortInMemory and Sorter.Sort for more than
	// MaxSortRecords records (the record index in a sort entry is 40 bits).
	ErrTooLarge = errors.New("terasort: too many records for one in-memory sort")
)

// FileError says where in which file reading went wrong. Offset is the byte
// offset the problem starts at (-1 if not applicable). It wraps ErrSize, a
// context error, or an I/O error from the os package.
type FileError struct {
	Path   string
	Offset int64
	Err    error
	Detail string // what exactly was wrong, e.g. "file ends 37 bytes into record 12"
}

func (e *FileError) Error() string {
	loc := e.Path
	if e.Offset >= 0 {
		loc += " at byte offset " + strconv.FormatInt(e.Offset, 10)
	}
	msg := fmt.Sprintf("%s: %v", loc, e.Err)
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

func (e *FileError) Unwrap() error { return e.Err }

// OrderError reports the first record found out of order. Path and Index
// (0-based record index within that file) name the record whose key is
// smaller than the previous one; PrevPath and PrevIndex name the previous
// record (another file when the disorder is across a file boundary). Count
// is the number of disorders found in all (validation goes on after the
// first, so that the count and checksum still cover every record).
type OrderError struct {
	Path      string
	Index     int64
	Key       [KeySize]byte
	PrevPath  string
	PrevIndex int64
	PrevKey   [KeySize]byte
	Count     int64
}

func (e *OrderError) Error() string {
	where := fmt.Sprintf("%s record %d (byte offset %d)", e.Path, e.Index, e.Index*RecordSize)
	prev := fmt.Sprintf("record %d", e.PrevIndex)
	if e.PrevPath != e.Path {
		prev = fmt.Sprintf("the last record of %s (record %d)", e.PrevPath, e.PrevIndex)
	}
	return fmt.Sprintf("%v: %s: key %s is smaller than key %s of %s; %d disorder(s) in all",
		ErrDisorder, where, hex.EncodeToString(e.Key[:]), hex.EncodeToString(e.PrevKey[:]), prev, e.Count)
}

func (e *OrderError) Unwrap() error { return ErrDisorder }

func configErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...)
}

func sizeErr(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrSize}, args...)...)
}
