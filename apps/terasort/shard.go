package terasort

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
)

// Shard is a byte range of one input file holding whole records: the
// records [Off/RecordSize, (Off+Len)/RecordSize) of the file at Path.
type Shard struct {
	Path string
	Off  int64 // first byte, a multiple of RecordSize
	Len  int64 // bytes, a multiple of RecordSize
}

// Records returns the number of records in the shard.
func (s Shard) Records() int64 { return s.Len / RecordSize }

// SplitInputs splits the records of the files at paths, taken in order as
// one sequence, into parts contiguous ranges of record indexes
// (PartRange: the first total%parts ranges get one record more) and
// returns the shards of range p: the byte ranges, on record boundaries, of
// the files it covers, in input order. The number of files need not match
// parts: a file may be split between ranges, and a range may span files.
// It also returns the total number of records. Every file must be a whole
// number of records (*FileError wrapping ErrSize, naming the file and the
// offset of the cut record, otherwise).
func SplitInputs(paths []string, parts, p int) ([]Shard, int64, error) {
	if parts < 1 || p < 0 || p >= parts {
		return nil, 0, configErr("SplitInputs: part %d of %d: want 0 <= part < parts", p, parts)
	}
	counts := make([]int64, len(paths))
	var total int64
	for i, path := range paths {
		n, err := CheckFileSize(path)
		if err != nil {
			return nil, 0, err
		}
		counts[i] = n
		total += n
	}
	lo, hi := PartRange(total, parts, p)
	var out []Shard
	var before int64 // records in the files before path i
	for i, path := range paths {
		a, b := max(lo, before), min(hi, before+counts[i])
		if a < b {
			out = append(out, Shard{Path: path, Off: (a - before) * RecordSize, Len: (b - a) * RecordSize})
		}
		before += counts[i]
	}
	return out, total, nil
}

// ShardRecords returns the total number of records in shards.
func ShardRecords(shards []Shard) int64 {
	var n int64
	for _, s := range shards {
		n += s.Records()
	}
	return n
}

// SampleCluster is how many consecutive records SampleShards reads at
// each of its positions: one read of a cluster instead of one per key.
const SampleCluster = 16

// SampleShards returns copies of the keys of up to n records spread evenly
// over the records of shards (counting the shards' records as one
// sequence) in clusters of SampleCluster consecutive records: cluster j
// of m = ceil(n/SampleCluster) starts at record j*total/m and is cut at
// the end of its shard. It reads only the clusters, one read each.
func SampleShards(shards []Shard, n int) ([][]byte, error) {
	total := ShardRecords(shards)
	if n <= 0 || total == 0 {
		return nil, nil
	}
	want := min(int64(n), total)
	m := (want + SampleCluster - 1) / SampleCluster
	out := make([][]byte, 0, want)
	var before int64
	buf := make([]byte, SampleCluster*RecordSize)
	for _, s := range shards {
		cnt := s.Records()
		if cnt == 0 {
			continue
		}
		f, err := os.Open(s.Path)
		if err != nil {
			return nil, &FileError{Path: s.Path, Offset: -1, Err: err}
		}
		for j := (before*m + total - 1) / total; j < m && int64(len(out)) < want; j++ {
			g := j * total / m
			if g >= before+cnt {
				break
			}
			k := min(int64(SampleCluster), before+cnt-g, want-int64(len(out)))
			off := s.Off + (g-before)*RecordSize
			if _, err := f.ReadAt(buf[:k*RecordSize], off); err != nil {
				f.Close()
				if err == io.EOF {
					err = io.ErrUnexpectedEOF
				}
				return nil, &FileError{Path: s.Path, Offset: off, Err: err, Detail: "file shrank while sampling"}
			}
			for r := range k {
				out = append(out, bytes.Clone(buf[r*RecordSize:r*RecordSize+KeySize]))
			}
		}
		f.Close()
		before += cnt
	}
	return out, nil
}

// ReadShards calls fn with blocks of whole records of shards, in order,
// starting at record from (counting the shards' records as one sequence;
// from = 0 reads everything). first is the index, in that sequence, of the
// block's first record. The block is valid only during the call. A file
// that is cut or shrank yields a *FileError naming it and the offset; an
// error from fn is returned as is. A cancelled ctx stops it between
// blocks. blockBytes is the read size (see NewReader).
func ReadShards(ctx context.Context, shards []Shard, from int64, blockBytes int, fn func(blk []byte, first int64) error) error {
	if from < 0 {
		return configErr("ReadShards: from %d: want >= 0", from)
	}
	rd := NewReader(nil, "", blockBytes)
	var before int64
	for _, s := range shards {
		cnt := s.Records()
		if from >= before+cnt {
			before += cnt
			continue
		}
		skip := max(from-before, 0)
		f, err := os.Open(s.Path)
		if err != nil {
			return &FileError{Path: s.Path, Offset: -1, Err: err}
		}
		start := s.Off + skip*RecordSize
		want := s.Len - skip*RecordSize
		rd.resetAt(io.NewSectionReader(f, start, want), s.Path, start)
		next := before + skip
		for {
			if err := ctx.Err(); err != nil {
				f.Close()
				return err
			}
			blk, err := rd.Next()
			if len(blk) > 0 {
				if ferr := fn(blk, next); ferr != nil {
					f.Close()
					return ferr
				}
				next += int64(len(blk) / RecordSize)
			}
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				f.Close()
				return err
			}
		}
		f.Close()
		if got := next - before; got != cnt {
			return &FileError{Path: s.Path, Offset: s.Off + got*RecordSize, Err: io.ErrUnexpectedEOF,
				Detail: fmt.Sprintf("file shrank while reading: expected %d records from offset %d", cnt, s.Off)}
		}
		before += cnt
	}
	return nil
}
