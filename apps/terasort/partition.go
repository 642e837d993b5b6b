package terasort

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/gaspigo/gaspigo/kvshuffle"
)

// Splitters picks parts-1 splitters for range partitioning from a sample of
// keys: it sorts a copy of the sample (bytes.Compare order) and takes the
// keys at ranks j*len(sample)/parts for j = 1..parts-1. The result is
// non-decreasing and holds copies (it does not alias sample). With a sample
// of distinct keys, partition j of the sample itself receives exactly the
// keys of rank [j*n/parts, (j+1)*n/parts); with duplicates, or more parts
// than distinct keys, some splitters repeat and the partitions between
// them are empty. parts ≤ 1, or an empty sample, gives no splitters (every
// key goes to partition 0). The sample's keys may have any length; TeraSort
// keys are KeySize bytes.
func Splitters(sample [][]byte, parts int) [][]byte {
	n := len(sample)
	if parts <= 1 || n == 0 {
		return nil
	}
	s := slices.Clone(sample)
	slices.SortFunc(s, bytes.Compare)
	out := make([][]byte, parts-1)
	for j := 1; j < parts; j++ {
		out[j-1] = bytes.Clone(s[int(int64(j)*int64(n)/int64(parts))])
	}
	return out
}

// Partitioner maps keys to partitions by binary search over sorted
// splitters: a key goes to the number of splitters that are ≤ it, so keys
// equal to a splitter go to the partition on its right, and partition p
// holds the keys in [splitters[p-1], splitters[p]). Every key of partition
// p sorts at or before every key of partition p+1, which makes the
// concatenation of sorted partitions globally sorted. A Partitioner is
// immutable and safe for concurrent use.
type Partitioner struct {
	splitters [][]byte
	pre       []uint64 // kvshuffle.KeyPrefix of each splitter
}

// NewPartitioner returns a Partitioner over copies of splitters (from
// Splitters, or agreed between ranks), which must be in non-decreasing
// bytes.Compare order (ErrSplitters otherwise). It has len(splitters)+1
// partitions.
func NewPartitioner(splitters [][]byte) (*Partitioner, error) {
	for i := 1; i < len(splitters); i++ {
		if bytes.Compare(splitters[i-1], splitters[i]) > 0 {
			return nil, fmt.Errorf("%w: splitter %d (%x) sorts after splitter %d (%x)", ErrSplitters, i-1, splitters[i-1], i, splitters[i])
		}
	}
	cp := make([][]byte, len(splitters))
	pre := make([]uint64, len(splitters))
	for i, s := range splitters {
		cp[i] = bytes.Clone(s)
		pre[i] = kvshuffle.KeyPrefix(s)
	}
	return &Partitioner{splitters: cp, pre: pre}, nil
}

// Parts returns the number of partitions, len(splitters)+1.
func (p *Partitioner) Parts() int { return len(p.splitters) + 1 }

// Splitters returns a copy of the splitters.
func (p *Partitioner) Splitters() [][]byte {
	out := make([][]byte, len(p.splitters))
	for i, s := range p.splitters {
		out[i] = bytes.Clone(s)
	}
	return out
}

// Partition returns the partition of key, in [0, Parts()).
func (p *Partitioner) Partition(key []byte) int {
	// The first splitter above key, by binary search: on the 8-byte
	// prefixes, and on the whole keys where those are equal.
	kp := kvshuffle.KeyPrefix(key)
	lo, hi := 0, len(p.splitters)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		var above bool
		if sp := p.pre[m]; sp != kp {
			above = sp > kp
		} else {
			above = bytes.Compare(p.splitters[m], key) > 0
		}
		if above {
			hi = m
		} else {
			lo = m + 1
		}
	}
	return lo
}

// SampleKeys returns copies of the keys of up to n records of recs, evenly
// spaced (records i*len/n), in input order. It takes every record if n is
// at least their number.
func SampleKeys(recs []byte, n int) [][]byte {
	total := len(recs) / RecordSize
	if n <= 0 || total == 0 {
		return nil
	}
	n = min(n, total)
	out := make([][]byte, n)
	for j := range n {
		i := int(int64(j) * int64(total) / int64(n))
		out[j] = bytes.Clone(recs[i*RecordSize : i*RecordSize+KeySize])
	}
	return out
}

// SampleFiles returns copies of the keys of about n records spread evenly
// over the files at paths (each file contributes in proportion to its
// record count), reading only those records. Every file must be a whole
// number of records (*FileError wrapping ErrSize otherwise).
func SampleFiles(paths []string, n int) ([][]byte, error) {
	counts := make([]int64, len(paths))
	var total int64
	for i, p := range paths {
		c, err := CheckFileSize(p)
		if err != nil {
			return nil, err
		}
		counts[i] = c
		total += c
	}
	if n <= 0 || total == 0 {
		return nil, nil
	}
	want := min(int64(n), total)
	var out [][]byte
	var before int64 // records in the files before this one
	for i, p := range paths {
		// Global picks j*total/want that fall inside this file.
		first := (before*want + total - 1) / total // smallest j with j*total/want ≥ before
		if err := sampleFile(p, counts[i], before, total, want, first, &out); err != nil {
			return nil, err
		}
		before += counts[i]
	}
	return out, nil
}

func sampleFile(path string, count, before, total, want, j int64, out *[][]byte) error {
	if count == 0 {
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		return &FileError{Path: path, Offset: -1, Err: err}
	}
	defer f.Close()
	var key [KeySize]byte
	for ; j < want; j++ {
		g := j * total / want
		if g >= before+count {
			break
		}
		if g < before {
			continue
		}
		off := (g - before) * RecordSize
		if _, err := f.ReadAt(key[:], off); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return &FileError{Path: path, Offset: off, Err: err, Detail: "file shrank while sampling"}
		}
		*out = append(*out, bytes.Clone(key[:]))
	}
	return nil
}
