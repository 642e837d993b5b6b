package wordcount

import (
	"bytes"
	"fmt"
	"io"
	"os"
)

// Input is the job's text: a file, or Lines generated lines (Line(i)).
type Input struct {
	File  string
	Lines int64
	Line  func(i int64) []byte
}

// Share is one rank's part of the input: Count lines, line i by Line.
type Share struct {
	Count int64
	Line  func(i int64) []byte
}

// Share loads rank's share of n: generated lines [Lines*rank/n,
// Lines*(rank+1)/n), or the lines of the file whose first byte lies in
// [size*rank/n, size*(rank+1)/n) (read into memory).
func (in Input) Share(rank, n int) (Share, error) {
	if in.File == "" {
		lo, hi := in.Lines*int64(rank)/int64(n), in.Lines*int64(rank+1)/int64(n)
		return Share{Count: hi - lo, Line: func(i int64) []byte { return in.Line(lo + i) }}, nil
	}
	f, err := os.Open(in.File)
	if err != nil {
		return Share{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return Share{}, err
	}
	size := st.Size()
	start, end := size*int64(rank)/int64(n), size*int64(rank+1)/int64(n)
	if start > 0 {
		if start, err = afterNewline(f, start-1, size); err != nil {
			return Share{}, err
		}
	}
	if end < size && end > 0 {
		if end, err = afterNewline(f, end-1, size); err != nil {
			return Share{}, err
		}
	}
	if start >= end {
		return Share{Line: func(int64) []byte { return nil }}, nil
	}
	data := make([]byte, end-start)
	if _, err := f.ReadAt(data, start); err != nil {
		return Share{}, fmt.Errorf("read %s: %w", in.File, err)
	}
	lines := Lines(data)
	return Share{Count: int64(len(lines)), Line: func(i int64) []byte { return lines[i] }}, nil
}

// afterNewline returns the position after the first '\n' at or after
// from, or size.
func afterNewline(f *os.File, from, size int64) (int64, error) {
	buf := make([]byte, 64<<10)
	for from < size {
		n, err := f.ReadAt(buf, from)
		if i := bytes.IndexByte(buf[:n], '\n'); i >= 0 {
			return from + int64(i) + 1, nil
		}
		from += int64(n)
		if err != nil && err != io.EOF {
			return 0, err
		}
		if n == 0 {
			break
		}
	}
	return size, nil
}

// Reference counts the whole input in one process.
func (in Input) Reference() (Result, error) {
	if in.File == "" {
		return Reference(in.Lines, in.Line), nil
	}
	text, err := os.ReadFile(in.File)
	if err != nil {
		return Result{}, err
	}
	lines := Lines(text)
	return Reference(int64(len(lines)), func(i int64) []byte { return lines[i] }), nil
}
