package terasort

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestSplitInputsCoversEverything: for file counts that do not match the
// part count, the parts' shards, read in part order, are the input's
// records in order, each exactly once, and part sizes follow PartRange.
func TestSplitInputsCoversEverything(t *testing.T) {
	all := records(1003, 3, FormatASCII)
	// Files of 0, 1, 500, 2 and 500 records.
	cuts := []int{0, 0, 1, 501, 503, 1003}
	var chunks [][]byte
	for i := 1; i < len(cuts); i++ {
		chunks = append(chunks, all[cuts[i-1]*RecordSize:cuts[i]*RecordSize])
	}
	paths := writeParts(t, t.TempDir(), chunks...)
	for _, parts := range []int{1, 2, 3, 4, 7} {
		var got []byte
		for p := range parts {
			shards, total, err := SplitInputs(paths, parts, p)
			if err != nil {
				t.Fatal(err)
			}
			if total != 1003 {
				t.Fatalf("total %d, want 1003", total)
			}
			lo, hi := PartRange(total, parts, p)
			if n := ShardRecords(shards); n != hi-lo {
				t.Fatalf("parts=%d p=%d: %d records, want %d", parts, p, n, hi-lo)
			}
			var mine []byte
			err = ReadShards(context.Background(), shards, 0, 3*RecordSize, func(blk []byte, first int64) error {
				if first != int64(len(mine)/RecordSize) {
					t.Fatalf("block at record %d, want %d", first, len(mine)/RecordSize)
				}
				mine = append(mine, blk...)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, mine...)
		}
		if !bytes.Equal(got, all) {
			t.Fatalf("parts=%d: shards do not reproduce the input", parts)
		}
	}
}

// TestReadShardsFrom: resuming at record k yields records k.. only.
func TestReadShardsFrom(t *testing.T) {
	all := records(250, 5, FormatBinary)
	paths := writeParts(t, t.TempDir(), all[:100*RecordSize], all[100*RecordSize:])
	shards, _, err := SplitInputs(paths, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, from := range []int64{0, 1, 99, 100, 101, 249, 250, 300} {
		var got []byte
		err := ReadShards(context.Background(), shards, from, 0, func(blk []byte, first int64) error {
			if first != from+int64(len(got)/RecordSize) {
				t.Fatalf("from %d: block at %d", from, first)
			}
			got = append(got, blk...)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		want := all[min(from, 250)*RecordSize:]
		if !bytes.Equal(got, want) {
			t.Fatalf("from %d: got %d bytes, want %d", from, len(got), len(want))
		}
	}
	if err := ReadShards(context.Background(), shards, -1, 0, nil); !errors.Is(err, ErrConfig) {
		t.Fatalf("from -1: %v, want ErrConfig", err)
	}
}

// TestSplitInputsTruncated: a cut file is named with the cut's offset.
func TestSplitInputsTruncated(t *testing.T) {
	dir := t.TempDir()
	all := records(10, 1, FormatASCII)
	paths := writeParts(t, dir, all[:5*RecordSize], all[5*RecordSize:len(all)-7])
	_, _, err := SplitInputs(paths, 2, 0)
	var fe *FileError
	if !errors.As(err, &fe) || !errors.Is(err, ErrSize) || fe.Path != paths[1] || fe.Offset != 4*RecordSize {
		t.Fatalf("got %v, want a *FileError for %s at offset %d wrapping ErrSize", err, paths[1], 4*RecordSize)
	}
	if _, _, err := SplitInputs(paths, 2, 2); !errors.Is(err, ErrConfig) {
		t.Fatalf("part 2 of 2: %v, want ErrConfig", err)
	}
	// A file that shrinks after the split is reported by ReadShards.
	good := writeParts(t, t.TempDir(), all)
	shards, _, err := SplitInputs(good, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(good[0], 3*RecordSize); err != nil {
		t.Fatal(err)
	}
	err = ReadShards(context.Background(), shards, 0, 0, func([]byte, int64) error { return nil })
	if !errors.As(err, &fe) || fe.Path != good[0] || fe.Offset != 3*RecordSize {
		t.Fatalf("shrunk file: %v, want a *FileError at offset %d", err, 3*RecordSize)
	}
}

// TestSampleShards: the sample is the keys of evenly spaced records of the
// shards, and never more than there are.
func TestSampleShards(t *testing.T) {
	all := records(400, 9, FormatASCII)
	dir := t.TempDir()
	paths := writeParts(t, dir, all[:150*RecordSize], all[150*RecordSize:])
	shards, _, err := SplitInputs(paths, 2, 1) // records 200..399, in file 1
	if err != nil {
		t.Fatal(err)
	}
	s, err := SampleShards(shards, 40)
	if err != nil {
		t.Fatal(err)
	}
	if len(s) != 40 {
		t.Fatalf("%d keys, want 40", len(s))
	}
	// Clusters of 16, 16 and 8 records at records 200, 266 and 333.
	for j, k := range s {
		at := 200 + (j/SampleCluster)*200/3 + j%SampleCluster
		if want := Key(Record(all, at)); !bytes.Equal(k, want) {
			t.Fatalf("key %d = %q, want record %d's %q", j, k, at, want)
		}
	}
	s, err = SampleShards(shards, 1000)
	if err != nil || len(s) != 200 {
		t.Fatalf("oversampling: %d keys, %v; want all 200", len(s), err)
	}
	empty, _, _ := SplitInputs([]string{filepath.Join(dir, PartName(0))}, 1000, 999)
	if s, err := SampleShards(empty, 5); err != nil || s != nil {
		t.Fatalf("empty shards: %v, %v", s, err)
	}
}
