package terasort

import (
	"context"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"runtime"
	"sync"
)

// ScanConfig tunes ValidateFiles and SumFiles.
type ScanConfig struct {
	// Workers is the number of goroutines reading at once (≥ 1). Files
	// are cut into sections of SectionBytes, so one big file is scanned in
	// parallel too.
	Workers int
	// BlockBytes is each worker's read size (≥ RecordSize; rounded down to
	// whole records).
	BlockBytes int
	// SectionBytes is the unit of work (≥ BlockBytes; rounded down to whole
	// records): sections are checked independently and their boundaries
	// afterwards.
	SectionBytes int64
}

// DefaultScanConfig returns one worker per CPU, 4 MB reads and 64 MB
// sections.
func DefaultScanConfig() ScanConfig {
	return ScanConfig{Workers: runtime.GOMAXPROCS(0), BlockBytes: DefaultBlockBytes, SectionBytes: 16 * DefaultBlockBytes}
}

// Validate checks the fields and their relations; it never mutates c.
func (c ScanConfig) Validate() error {
	switch {
	case c.Workers < 1 || c.Workers > 1024:
		return configErr("Workers = %d: want 1 to 1024", c.Workers)
	case c.BlockBytes < RecordSize || c.BlockBytes > 1<<30:
		return configErr("BlockBytes = %d: want %d to %d", c.BlockBytes, RecordSize, 1<<30)
	case c.SectionBytes < int64(c.BlockBytes/RecordSize*RecordSize):
		return configErr("SectionBytes = %d is smaller than BlockBytes = %d: make it at least one block", c.SectionBytes, c.BlockBytes)
	}
	return nil
}

// FileReport is what ValidateFiles found in one file.
type FileReport struct {
	Path string
	Summary
	// FirstKey and LastKey are the keys of the file's first and last
	// records (zero when the file is empty).
	FirstKey, LastKey [KeySize]byte
	// Disorders counts records whose key is smaller than the previous
	// record's key in the same file.
	Disorders int64
	// Duplicates counts records whose key equals the previous record's
	// key in the same file.
	Duplicates int64
}

// Report is the result of ValidateFiles.
type Report struct {
	// Summary covers every record of every file.
	Summary
	Files []FileReport
	// Disorders counts disorders within files and across file boundaries
	// (the first record of a file against the last record of the nearest
	// non-empty file before it).
	Disorders int64
	// Duplicates counts records whose key equals the previous record's
	// key, within files and across file boundaries as Disorders: valsort's
	// "Duplicate keys".
	Duplicates int64
	// First is the first disorder in file and record order, nil if the
	// records are sorted. ValidateFiles returns it as its error too.
	First *OrderError
}

// ValidateFiles checks that the records of the files at paths, taken in
// that order, are sorted by key within and across files, and sums them.
// Before reading it checks every file's size: a file that is not a whole
// number of records gives a *FileError wrapping ErrSize (naming the file and
// the offset of the cut record) and no report. Disorder does not stop the
// scan: the report is complete, and the error returned with it is
// Report.First (an *OrderError wrapping ErrDisorder). ctx cancels the scan.
func ValidateFiles(ctx context.Context, paths []string, cfg ScanConfig) (*Report, error) {
	units, err := scanFiles(ctx, paths, cfg, true)
	if err != nil {
		return nil, err
	}
	rep := &Report{Files: make([]FileReport, len(paths))}
	for i, p := range paths {
		rep.Files[i].Path = p
	}
	var (
		havePrev  bool
		prevKey   [KeySize]byte
		prevPath  string
		prevFile  int
		prevIndex int64
	)
	note := func(e *OrderError) {
		rep.Disorders++
		if rep.First == nil {
			rep.First = e
		}
	}
	for _, u := range units {
		fr := &rep.Files[u.file]
		fr.Summary = fr.Summary.Add(u.sum)
		if u.sum.Records == 0 {
			continue
		}
		if fr.Records == u.sum.Records { // the file's first non-empty section
			fr.FirstKey = u.firstKey
		}
		fr.LastKey = u.lastKey
		if havePrev && CompareKeys(u.firstKey[:], prevKey[:]) < 0 {
			if prevFile == u.file {
				fr.Disorders++
			}
			note(&OrderError{Path: u.path, Index: u.lo, Key: u.firstKey,
				PrevPath: prevPath, PrevIndex: prevIndex, PrevKey: prevKey})
		} else if havePrev && CompareKeys(u.firstKey[:], prevKey[:]) == 0 {
			rep.Duplicates++
			if prevFile == u.file {
				fr.Duplicates++
			}
		}
		fr.Duplicates += u.dups
		rep.Duplicates += u.dups
		fr.Disorders += u.disorders
		if u.disorders > 0 {
			rep.Disorders += u.disorders - 1
			note(u.firstDisorder)
		}
		havePrev, prevKey, prevPath, prevFile, prevIndex = true, u.lastKey, u.path, u.file, u.lo+u.sum.Records-1
	}
	for _, f := range rep.Files {
		rep.Summary = rep.Summary.Add(f.Summary)
	}
	if rep.First != nil {
		rep.First.Count = rep.Disorders
		return rep, rep.First
	}
	return rep, nil
}

// SumFiles returns the record count and checksum of the files at paths,
// which may be in any order (the checksum does not depend on order). Size
// and I/O problems are reported as in ValidateFiles.
func SumFiles(ctx context.Context, paths []string, cfg ScanConfig) (Summary, error) {
	units, err := scanFiles(ctx, paths, cfg, false)
	if err != nil {
		return Summary{}, err
	}
	var s Summary
	for _, u := range units {
		s = s.Add(u.sum)
	}
	return s, nil
}

// unit is one section of one file and what scanning it found.
type unit struct {
	file   int // index into paths
	path   string
	lo, hi int64 // record range within the file

	sum               Summary
	firstKey, lastKey [KeySize]byte
	disorders         int64
	firstDisorder     *OrderError
	dups              int64 // records whose key equals the previous one's
}

// scanFiles checks every file's size, cuts the files into sections and
// scans them on cfg.Workers goroutines (all joined before it returns). It
// returns the sections in file and offset order.
func scanFiles(ctx context.Context, paths []string, cfg ScanConfig, order bool) ([]*unit, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("%w: no files to read", ErrNoInput)
	}
	per := max(cfg.SectionBytes/RecordSize, 1)
	var units []*unit
	for i, p := range paths {
		n, err := CheckFileSize(p)
		if err != nil {
			return nil, err
		}
		if n == 0 {
			units = append(units, &unit{file: i, path: p})
		}
		for lo := int64(0); lo < n; lo += per {
			units = append(units, &unit{file: i, path: p, lo: lo, hi: min(lo+per, n)})
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan *unit)
	var (
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
	)
	for range min(cfg.Workers, len(units)) {
		wg.Go(func() {
			rd := NewReader(nil, "", cfg.BlockBytes)
			for u := range next {
				if err := scanUnit(ctx, rd, u, order); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
					cancel()
					return
				}
			}
		})
	}
feed:
	for _, u := range units {
		select {
		case next <- u:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if firstErr == nil {
		firstErr = ctx.Err()
	}
	if firstErr != nil {
		return nil, firstErr
	}
	return units, nil
}

func scanUnit(ctx context.Context, rd *Reader, u *unit, order bool) error {
	if u.hi == u.lo {
		return nil
	}
	f, err := os.Open(u.path)
	if err != nil {
		return &FileError{Path: u.path, Offset: -1, Err: err}
	}
	defer f.Close()
	base := u.lo * RecordSize
	size := (u.hi - u.lo) * RecordSize
	rd.resetAt(io.NewSectionReader(f, base, size), u.path, base)
	idx := u.lo
	var sum uint64
	var prev []byte // key of the record before the current block's first
	var prevKey [KeySize]byte
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		blk, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		if idx == u.lo {
			copy(u.firstKey[:], blk)
		}
		for off := 0; off < len(blk); off += RecordSize {
			rec := blk[off : off+RecordSize]
			sum += uint64(crc32.ChecksumIEEE(rec))
			if order && prev != nil {
				switch c := CompareKeys(rec, prev); {
				case c == 0:
					u.dups++
				case c < 0:
					u.disorders++
					if u.firstDisorder == nil {
						e := &OrderError{Path: u.path, Index: idx, PrevPath: u.path, PrevIndex: idx - 1}
						copy(e.Key[:], rec)
						copy(e.PrevKey[:], prev)
						u.firstDisorder = e
					}
				}
			}
			prev = rec
			idx++
		}
		copy(prevKey[:], prev) // the block is reused by the next Next
		prev = prevKey[:]
	}
	if got := idx - u.lo; got != u.hi-u.lo {
		return &FileError{Path: u.path, Offset: idx * RecordSize, Err: ErrSize,
			Detail: fmt.Sprintf("file shrank while reading: expected %d records in this section, read %d", u.hi-u.lo, got)}
	}
	u.lastKey = prevKey
	u.sum = Summary{Records: u.hi - u.lo, Checksum: sum}
	return nil
}
