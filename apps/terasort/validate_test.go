package terasort

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// sorted returns the records of recs in key order (stable).
func sorted(recs []byte) []byte {
	n := NumRecords(recs)
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return bytes.Compare(Key(Record(recs, a)), Key(Record(recs, b))) })
	out := make([]byte, 0, len(recs))
	for _, i := range idx {
		out = append(out, Record(recs, i)...)
	}
	return out
}

// smallScan cuts files into sections of 7 records read 3 at a time, so
// section and block boundaries fall everywhere.
func smallScan() ScanConfig {
	return ScanConfig{Workers: 3, BlockBytes: 3 * RecordSize, SectionBytes: 7 * RecordSize}
}

func scanConfigs() map[string]ScanConfig {
	return map[string]ScanConfig{"default": DefaultScanConfig(), "small": smallScan(), "one": {Workers: 1, BlockBytes: 100, SectionBytes: 100}}
}

// naiveDisorders counts records smaller than their predecessor in the
// concatenation.
func naiveDisorders(all []byte) int64 {
	var n int64
	for i := 1; i < NumRecords(all); i++ {
		if CompareKeys(Record(all, i), Record(all, i-1)) < 0 {
			n++
		}
	}
	return n
}

func TestValidateSorted(t *testing.T) {
	all := sorted(records(500, 5, FormatBinary))
	for name, cfg := range scanConfigs() {
		dir := t.TempDir()
		// parts of 0, 123, 0, 200, 177 records: empty parts are legal.
		cuts := []int{0, 0, 123, 123, 323, 500}
		var chunks [][]byte
		for i := 1; i < len(cuts); i++ {
			chunks = append(chunks, all[cuts[i-1]*RecordSize:cuts[i]*RecordSize])
		}
		writeParts(t, dir, chunks...)
		paths, err := ResolveInputs([]string{dir})
		if err != nil {
			t.Fatal(err)
		}
		rep, err := ValidateFiles(context.Background(), paths, cfg)
		if err != nil {
			t.Fatalf("%s: sorted input: %v", name, err)
		}
		if want := SumRecords(all); rep.Summary != want || rep.Disorders != 0 || rep.First != nil {
			t.Fatalf("%s: report %+v, want %v", name, rep.Summary, want)
		}
		for i, f := range rep.Files {
			if f.Summary != SumRecords(chunks[i]) {
				t.Fatalf("%s: file %d summary %v, want %v", name, i, f.Summary, SumRecords(chunks[i]))
			}
			if f.Records > 0 && (!bytes.Equal(f.FirstKey[:], Key(chunks[i])) || !bytes.Equal(f.LastKey[:], Key(Record(chunks[i], NumRecords(chunks[i])-1)))) {
				t.Fatalf("%s: file %d first/last keys wrong", name, i)
			}
		}
	}
}

// The checksum does not depend on order: the shuffled input and the sorted
// output sum alike, and SumFiles does not mind disorder.
func TestSumOrderIndependent(t *testing.T) {
	in := records(1000, 11, FormatASCII)
	dir1, dir2 := t.TempDir(), t.TempDir()
	p1 := writeParts(t, dir1, in[:400*RecordSize], in[400*RecordSize:])
	p2 := writeParts(t, dir2, sorted(in))
	for name, cfg := range scanConfigs() {
		s1, err1 := SumFiles(context.Background(), p1, cfg)
		s2, err2 := SumFiles(context.Background(), p2, cfg)
		if err1 != nil || err2 != nil || s1 != s2 || s1 != SumRecords(in) || s1.Records != 1000 {
			t.Fatalf("%s: sums %v (%v) and %v (%v), want %v", name, s1, err1, s2, err2, SumRecords(in))
		}
	}
}

func TestValidateDisorderWithinFile(t *testing.T) {
	all := sorted(records(300, 2, FormatBinary))
	for _, pos := range []int{1, 6, 7, 8, 14, 150} { // 7 and 14 sit on section boundaries in smallScan
		for name, cfg := range scanConfigs() {
			bad := bytes.Clone(all)
			swap(bad, 100+pos-1, 100+pos) // in part 1, records pos-1 and pos
			paths := writeParts(t, t.TempDir(), bad[:100*RecordSize], bad[100*RecordSize:])
			rep, err := ValidateFiles(context.Background(), paths, cfg)
			var oe *OrderError
			if !errors.As(err, &oe) || !errors.Is(err, ErrDisorder) {
				t.Fatalf("%s pos=%d: error %v, want an *OrderError", name, pos, err)
			}
			if oe.Path != paths[1] || oe.Index != int64(pos) || oe.PrevIndex != int64(pos-1) || oe.PrevPath != paths[1] {
				t.Fatalf("%s pos=%d: disorder reported at %s record %d (prev %s %d)", name, pos, oe.Path, oe.Index, oe.PrevPath, oe.PrevIndex)
			}
			if want := naiveDisorders(bad); rep.Disorders != want || oe.Count != want || rep.Files[1].Disorders != want {
				t.Fatalf("%s pos=%d: %d disorders reported, want %d", name, pos, rep.Disorders, want)
			}
			if rep.Summary != SumRecords(all) {
				t.Fatalf("%s: summary %v after disorder, want %v", name, rep.Summary, SumRecords(all))
			}
			if msg := err.Error(); !strings.Contains(msg, paths[1]) || !strings.Contains(msg, "record "+strconv.Itoa(pos)) {
				t.Fatalf("message %q does not name the file and record", msg)
			}
		}
	}
}

func TestValidateDisorderAcrossFiles(t *testing.T) {
	all := sorted(records(300, 4, FormatASCII))
	for name, cfg := range scanConfigs() {
		// part 0 = records 100..199, part 1 (empty), part 2 = 0..99 then 200..299.
		p2 := append(bytes.Clone(all[:100*RecordSize]), all[200*RecordSize:]...)
		paths := writeParts(t, t.TempDir(), all[100*RecordSize:200*RecordSize], nil, p2)
		rep, err := ValidateFiles(context.Background(), paths, cfg)
		var oe *OrderError
		if !errors.As(err, &oe) {
			t.Fatalf("%s: error %v, want an *OrderError", name, err)
		}
		if oe.Path != paths[2] || oe.Index != 0 || oe.PrevPath != paths[0] || oe.PrevIndex != 99 {
			t.Fatalf("%s: reported %s record %d after %s record %d", name, oe.Path, oe.Index, oe.PrevPath, oe.PrevIndex)
		}
		// record 100 of part 2 (all[200]) is not smaller than all[99]: one disorder in all.
		if rep.Disorders != 1 || rep.Files[2].Disorders != 0 {
			t.Fatalf("%s: %d disorders (file 2: %d), want 1 across files only", name, rep.Disorders, rep.Files[2].Disorders)
		}
		if !strings.Contains(err.Error(), "last record of "+paths[0]) {
			t.Fatalf("message %q does not name the previous file", err)
		}
	}
}

func TestValidateManyDisorders(t *testing.T) {
	in := records(2000, 8, FormatBinary) // unsorted
	paths := writeParts(t, t.TempDir(), in[:777*RecordSize], in[777*RecordSize:])
	want := naiveDisorders(in)
	for name, cfg := range scanConfigs() {
		rep, err := ValidateFiles(context.Background(), paths, cfg)
		var oe *OrderError
		if !errors.As(err, &oe) || rep.Disorders != want || oe.Path != paths[0] || rep.Summary != SumRecords(in) {
			t.Fatalf("%s: %d disorders (%v), want %d", name, rep.Disorders, err, want)
		}
	}
}

func TestValidateBadSizes(t *testing.T) {
	good := sorted(records(50, 1, FormatASCII))
	for _, size := range []int{1, 99, 101, 2550, 4999} {
		dir := t.TempDir()
		paths := writeParts(t, dir, good, good[:size])
		whole := size / RecordSize * RecordSize
		for _, scan := range []func() error{
			func() error { _, err := ValidateFiles(context.Background(), paths, DefaultScanConfig()); return err },
			func() error { _, err := SumFiles(context.Background(), paths, smallScan()); return err },
			func() error { _, err := LoadFiles(paths, false); return err },
			func() error { _, err := SampleFiles(paths, 10); return err },
		} {
			err := scan()
			var fe *FileError
			if !errors.As(err, &fe) || !errors.Is(err, ErrSize) || fe.Path != paths[1] || fe.Offset != int64(whole) {
				t.Fatalf("size %d: error %v, want ErrSize for %s at offset %d", size, err, paths[1], whole)
			}
			if msg := err.Error(); !strings.Contains(msg, paths[1]) || !strings.Contains(msg, "offset "+strconv.Itoa(whole)) {
				t.Fatalf("message %q does not name file and offset", msg)
			}
		}
	}
}

func TestExpect(t *testing.T) {
	got := Summary{Records: 10, Checksum: 0xabc}
	for _, tc := range []struct {
		e  Expect
		ok bool
	}{
		{Expect{}, true},
		{Expect{Records: 10, CheckRecords: true, Checksum: 0xabc, CheckChecksum: true}, true},
		{Expect{Records: 11, CheckRecords: true}, false},
		{Expect{Checksum: 0xabd, CheckChecksum: true}, false},
		{Expect{Records: 11, Checksum: 0xabd}, true}, // not asked to check
	} {
		err := tc.e.Check(got)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrMismatch)) {
			t.Errorf("%+v: %v", tc.e, err)
		}
	}
	if s := got.String(); s != "records=10 checksum=0000000000000abc" {
		t.Fatalf("String() = %q", s)
	}
	if p, err := ParseSummary(got.String()); err != nil || p != got {
		t.Fatalf("ParseSummary round trip: %v %v", p, err)
	}
	for _, bad := range []string{"", "0x", "12345678901234567", "xyz"} {
		if _, err := ParseChecksum(bad); err == nil {
			t.Errorf("ParseChecksum(%q) accepted", bad)
		}
	}
}

func TestListParts(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"part-00000", "part-00001", "part-00002.tmp", "_SUCCESS", "part-00002"} {
		os.WriteFile(filepath.Join(dir, name), nil, 0o644)
	}
	paths, err := ListParts(dir)
	if err != nil || len(paths) != 3 || filepath.Base(paths[2]) != "part-00002" {
		t.Fatalf("ListParts = %v, %v", paths, err)
	}
	os.Remove(filepath.Join(dir, "part-00001"))
	if _, err := ListParts(dir); !errors.Is(err, ErrNoInput) || !strings.Contains(err.Error(), "part-00001") {
		t.Fatalf("gap: %v", err)
	}
	if _, err := ListParts(t.TempDir()); !errors.Is(err, ErrNoInput) {
		t.Fatalf("empty dir: %v", err)
	}
	if _, err := ResolveInputs(nil); !errors.Is(err, ErrNoInput) {
		t.Fatalf("no args: %v", err)
	}
	if _, err := ValidateFiles(context.Background(), nil, DefaultScanConfig()); !errors.Is(err, ErrNoInput) {
		t.Fatalf("no files: %v", err)
	}
}

func TestScanCancelled(t *testing.T) {
	paths := writeParts(t, t.TempDir(), records(100, 1, FormatASCII))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := ValidateFiles(ctx, paths, DefaultScanConfig()); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
}

func TestScanConfigValidate(t *testing.T) {
	for _, c := range []ScanConfig{
		{Workers: 0, BlockBytes: 100, SectionBytes: 100},
		{Workers: 1, BlockBytes: 99, SectionBytes: 100},
		{Workers: 1, BlockBytes: 1000, SectionBytes: 900},
	} {
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("%+v: %v", c, err)
		}
	}
}
