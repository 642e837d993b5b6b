package terasort

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

type partFile struct {
	path string
	num  int
}

// partFiles lists the regular files named part-NNNNN (5 or more digits, no
// suffix) in dir, in part order.
func partFiles(dir string) ([]partFile, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("terasort: %w", err)
	}
	var out []partFile
	for _, e := range ents {
		name := e.Name()
		num, ok := parsePartName(name)
		if !ok || e.IsDir() {
			continue
		}
		out = append(out, partFile{path: filepath.Join(dir, name), num: num})
	}
	slices.SortFunc(out, func(a, b partFile) int { return a.num - b.num })
	return out, nil
}

func parsePartName(name string) (int, bool) {
	digits, ok := strings.CutPrefix(name, "part-")
	if !ok || len(digits) < 5 || len(digits) > 9 {
		return 0, false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.Atoi(digits)
	return n, err == nil
}

// ListParts returns the paths of dir's part files part-00000, part-00001,
// ... in part order. Other files (such as leftover part-NNNNN.tmp files) are
// ignored. It returns ErrNoInput when there is no part file, or when the
// numbers do not run 0, 1, 2, ... without a gap (a part is missing).
func ListParts(dir string) ([]string, error) {
	pf, err := partFiles(dir)
	if err != nil {
		return nil, err
	}
	if len(pf) == 0 {
		return nil, fmt.Errorf("%w: %s holds no part-NNNNN files", ErrNoInput, dir)
	}
	paths := make([]string, len(pf))
	for i, p := range pf {
		if p.num != i {
			return nil, fmt.Errorf("%w: %s has %s but no %s: a part is missing", ErrNoInput, dir, filepath.Base(p.path), PartName(i))
		}
		paths[i] = p.path
	}
	return paths, nil
}

// ResolveInputs turns command-line arguments into the list of files to
// read, in order: a directory stands for its input files (InputFiles:
// files of any name but _SUCCESS, dot files and .crc files), a file for
// itself. It returns ErrNoInput for an empty list.
func ResolveInputs(args []string) ([]string, error) {
	if len(args) == 0 {
		return nil, fmt.Errorf("%w: name a directory of part files or one or more files", ErrNoInput)
	}
	var out []string
	for _, a := range args {
		st, err := os.Stat(a)
		if err != nil {
			return nil, fmt.Errorf("terasort: %w", err)
		}
		if st.IsDir() {
			parts, err := InputFiles(a)
			if err != nil {
				return nil, err
			}
			out = append(out, parts...)
			continue
		}
		out = append(out, a)
	}
	return out, nil
}

// CheckFileSize returns the number of records in the file at path, or a
// *FileError wrapping ErrSize (with the offset of the cut record) if its
// size is not a multiple of RecordSize.
func CheckFileSize(path string) (int64, error) {
	st, err := os.Stat(path)
	if err != nil {
		return 0, &FileError{Path: path, Offset: -1, Err: err}
	}
	if !st.Mode().IsRegular() {
		return 0, &FileError{Path: path, Offset: -1, Err: fs.ErrInvalid, Detail: "not a regular file"}
	}
	return sizeRecords(path, st.Size())
}

func sizeRecords(path string, size int64) (int64, error) {
	if rem := size % RecordSize; rem != 0 {
		at := size - rem
		return 0, &FileError{Path: path, Offset: at, Err: ErrSize,
			Detail: fmt.Sprintf("size %d is not a multiple of %d: the last record (record %d) has only %d bytes; the file is truncated or has trailing bytes",
				size, RecordSize, at/RecordSize, rem)}
	}
	return size / RecordSize, nil
}

// LoadFiles reads the files at paths, in order, into one buffer (with
// transparent huge pages if huge is set, see AllocBuffer). Every file must
// be a whole number of records. The caller owns the buffer and closes it.
func LoadFiles(paths []string, huge bool) (*Buffer, error) {
	var total int64
	for _, p := range paths {
		n, err := CheckFileSize(p)
		if err != nil {
			return nil, err
		}
		total += n * RecordSize
	}
	if total > int64(maxInt) {
		return nil, sizeErr("%d bytes of input do not fit in memory on this platform", total)
	}
	buf, err := AllocBuffer(int(total), huge)
	if err != nil {
		return nil, err
	}
	b := buf.Bytes()
	at := 0
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			buf.Close()
			return nil, &FileError{Path: p, Offset: -1, Err: err}
		}
		st, err := f.Stat()
		if err == nil && at+int(st.Size()) > len(b) {
			err = errors.New("file grew while loading")
		}
		var n int
		if err == nil {
			n, err = io.ReadFull(f, b[at:at+int(st.Size())])
		}
		f.Close()
		if err != nil {
			buf.Close()
			return nil, &FileError{Path: p, Offset: int64(n), Err: err}
		}
		at += n
	}
	if at != len(b) {
		buf.Close()
		return nil, sizeErr("input files changed size while loading: read %d bytes, expected %d", at, len(b))
	}
	return buf, nil
}

const maxInt = int(^uint(0) >> 1)

// createPrivate creates or truncates path for writing, readable by its
// owner only: the files this package writes hold the user's records.
func createPrivate(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
}

// WriteFile writes recs to path (created or truncated). It does not fsync:
// the data may still be only in the page cache when WriteFile returns.
func WriteFile(path string, recs []byte) error {
	if len(recs)%RecordSize != 0 {
		return sizeErr("WriteFile: %d bytes is not a multiple of %d", len(recs), RecordSize)
	}
	f, err := createPrivate(path)
	if err != nil {
		return fmt.Errorf("terasort: %w", err)
	}
	if _, err := f.Write(recs); err != nil {
		f.Close()
		return fmt.Errorf("terasort: write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("terasort: close %s: %w", path, err)
	}
	return nil
}
