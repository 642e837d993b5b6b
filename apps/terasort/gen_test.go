package terasort

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

func TestGenDeterministic(t *testing.T) {
	for _, f := range []Format{FormatASCII, FormatBinary} {
		a, b := records(1000, 42, f), records(1000, 42, f)
		if !bytes.Equal(a, b) {
			t.Fatalf("%v: same seed gave different records", f)
		}
		c := records(1000, 43, f)
		same := 0
		for i := range 1000 {
			if bytes.Equal(Key(Record(a, i)), Key(Record(c, i))) {
				same++
			}
		}
		if same > 0 {
			t.Fatalf("%v: seeds 42 and 43 share %d of 1000 keys", f, same)
		}
	}
}

// Record i depends only on (seed, i): any cut of the range gives the same
// bytes, and GenRecord agrees with GenRecords.
func TestGenIndependentOfCuts(t *testing.T) {
	for _, f := range []Format{FormatASCII, FormatBinary} {
		whole := records(997, 7, f)
		for _, cut := range []int{1, 3, 100, 500, 996} {
			part := make([]byte, (997-cut)*RecordSize)
			GenRecords(part, 7, uint64(cut), f)
			if !bytes.Equal(part, whole[cut*RecordSize:]) {
				t.Fatalf("%v: records from %d differ when generated on their own", f, cut)
			}
		}
		one := make([]byte, RecordSize)
		GenRecord(one, 7, 555, f)
		if !bytes.Equal(one, Record(whole, 555)) {
			t.Fatalf("%v: GenRecord(555) differs from GenRecords", f)
		}
	}
}

func TestGenLayoutASCII(t *testing.T) {
	const n = 20000
	b := records(n, 1, FormatASCII)
	first := map[byte]bool{}
	for i := range n {
		r := Record(b, i)
		for j, c := range r[:98] {
			if c < ' ' || c > '~' {
				t.Fatalf("record %d byte %d = %#x: not printable", i, j, c)
			}
		}
		first[r[0]] = true
		if string(r[10:12]) != "  " || string(r[44:46]) != "  " || string(r[98:]) != "\r\n" {
			t.Fatalf("record %d: separators wrong: %q", i, r)
		}
		if got, want := string(r[12:44]), fmt.Sprintf("%032X", i); got != want {
			t.Fatalf("record %d: row id %q, want %q", i, got, want)
		}
		for g := 46; g < 98; g += 4 {
			c := r[g]
			if !isHex(c) || r[g+1] != c || r[g+2] != c || r[g+3] != c {
				t.Fatalf("record %d: filler group at %d is %q", i, g, r[g:g+4])
			}
		}
	}
	if len(first) != 95 {
		t.Fatalf("first key byte took %d of the 95 printable values in %d records", len(first), n)
	}
}

func TestGenLayoutBinary(t *testing.T) {
	const n = 5000
	b := records(n, 1, FormatBinary)
	seen := map[byte]bool{}
	for i := range n {
		r := Record(b, i)
		seen[r[0]] = true
		if !bytes.Equal(r[10:12], []byte{0x00, 0x11}) || !bytes.Equal(r[44:48], []byte{0x88, 0x99, 0xAA, 0xBB}) ||
			!bytes.Equal(r[96:], []byte{0xCC, 0xDD, 0xEE, 0xFF}) {
			t.Fatalf("record %d: break bytes wrong: % x", i, r)
		}
		if got, want := string(r[12:44]), fmt.Sprintf("%032X", i); got != want {
			t.Fatalf("record %d: row id %q, want %q", i, got, want)
		}
		for g := 48; g < 96; g += 4 {
			c := r[g]
			if !isHex(c) || r[g+1] != c || r[g+2] != c || r[g+3] != c {
				t.Fatalf("record %d: filler group at %d is %q", i, g, r[g:g+4])
			}
		}
	}
	if len(seen) != 256 {
		t.Fatalf("first key byte took %d of 256 values in %d records", len(seen), n)
	}
}

func isHex(c byte) bool { return c >= '0' && c <= '9' || c >= 'A' && c <= 'F' }

func TestPartRange(t *testing.T) {
	for _, tc := range []struct {
		total int64
		parts int
	}{{0, 1}, {0, 5}, {1, 5}, {10, 3}, {11, 3}, {12, 3}, {1000003, 7}, {5, 5}} {
		var next int64
		for p := range tc.parts {
			lo, hi := PartRange(tc.total, tc.parts, p)
			if lo != next || hi < lo || hi-lo > tc.total/int64(tc.parts)+1 || hi-lo < tc.total/int64(tc.parts) {
				t.Fatalf("PartRange(%d, %d, %d) = [%d, %d), previous part ended at %d", tc.total, tc.parts, p, lo, hi, next)
			}
			next = hi
		}
		if next != tc.total {
			t.Fatalf("PartRange(%d, %d, ·) covers %d records", tc.total, tc.parts, next)
		}
	}
}

// Parts generated in parallel (any worker count), and the single file,
// hold exactly the records of the sequential generator, and the returned
// summary is theirs.
func TestGenerateFilesMatchSequential(t *testing.T) {
	const n = 12345
	want := records(n, 9, FormatBinary)
	wantSum := SumRecords(want)
	for _, workers := range []int{1, 3} {
		for _, parts := range []int{1, 4, 7} {
			dir := t.TempDir()
			cfg := DefaultGenConfig()
			cfg.Records, cfg.Parts, cfg.Seed, cfg.Format, cfg.Workers, cfg.BlockRecords = n, parts, 9, FormatBinary, workers, 1000
			sum, err := Generate(context.Background(), dir, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if sum != wantSum {
				t.Fatalf("workers=%d parts=%d: summary %v, want %v", workers, parts, sum, wantSum)
			}
			paths, err := ListParts(dir)
			if err != nil || len(paths) != parts {
				t.Fatalf("ListParts: %v %v", paths, err)
			}
			var all []byte
			for p, path := range paths {
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				lo, hi := PartRange(n, parts, p)
				if int64(len(b)) != (hi-lo)*RecordSize {
					t.Fatalf("part %d has %d bytes, want %d", p, len(b), (hi-lo)*RecordSize)
				}
				all = append(all, b...)
			}
			if !bytes.Equal(all, want) {
				t.Fatalf("workers=%d parts=%d: part files differ from the sequential records", workers, parts)
			}
		}
		path := filepath.Join(t.TempDir(), "single")
		cfg := DefaultGenConfig()
		cfg.Records, cfg.Seed, cfg.Format, cfg.Workers, cfg.BlockRecords = n, 9, FormatBinary, workers, 100
		sum, err := GenerateFile(context.Background(), path, cfg)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := os.ReadFile(path)
		if sum != wantSum || !bytes.Equal(got, want) {
			t.Fatalf("workers=%d: single file differs (summary %v, want %v)", workers, sum, wantSum)
		}
	}
}

func TestGenerateRefusesExisting(t *testing.T) {
	dir := t.TempDir()
	cfg := DefaultGenConfig()
	cfg.Records, cfg.Parts = 10, 2
	if _, err := Generate(context.Background(), dir, cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := Generate(context.Background(), dir, cfg); !errors.Is(err, ErrExists) {
		t.Fatalf("second Generate into %s: %v, want ErrExists", dir, err)
	}
	f := filepath.Join(dir, "one")
	if _, err := GenerateFile(context.Background(), f, cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := GenerateFile(context.Background(), f, cfg); !errors.Is(err, ErrExists) {
		t.Fatalf("second GenerateFile: %v, want ErrExists", err)
	}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if filepath.Ext(e.Name()) == ".tmp" {
			t.Fatalf("left %s behind", e.Name())
		}
	}
}

func TestGenerateCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	dir := t.TempDir()
	cfg := DefaultGenConfig()
	cfg.Records, cfg.Parts = 1000, 3
	if _, err := Generate(ctx, dir, cfg); !errors.Is(err, context.Canceled) {
		t.Fatalf("Generate with a cancelled context: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("cancelled Generate left %d files", len(ents))
	}
}

func TestGenConfigValidate(t *testing.T) {
	ok := DefaultGenConfig()
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := []func(*GenConfig){
		func(c *GenConfig) { c.Records = -1 },
		func(c *GenConfig) { c.Parts = 0 },
		func(c *GenConfig) { c.Parts = MaxParts + 1 },
		func(c *GenConfig) { c.Format = 7 },
		func(c *GenConfig) { c.Workers = 0 },
		func(c *GenConfig) { c.BlockRecords = 0 },
	}
	for i, mut := range bad {
		c := ok
		mut(&c)
		if err := c.Validate(); !errors.Is(err, ErrConfig) {
			t.Errorf("case %d: Validate = %v, want ErrConfig", i, err)
		}
	}
	if _, err := ParseFormat("ebcdic"); !errors.Is(err, ErrConfig) {
		t.Fatalf("ParseFormat(ebcdic) = %v", err)
	}
	if f, err := ParseFormat("BINARY"); err != nil || f != FormatBinary {
		t.Fatalf("ParseFormat(BINARY) = %v, %v", f, err)
	}
}

func TestPartName(t *testing.T) {
	if got := PartName(42); got != "part-00042" {
		t.Fatalf("PartName(42) = %q", got)
	}
	for _, bad := range []string{"part-0001", "part-00001.tmp", "part-0000x", "xpart-00001", "part-"} {
		if _, ok := parsePartName(bad); ok {
			t.Errorf("parsePartName(%q) accepted", bad)
		}
	}
	if n, ok := parsePartName("part-" + strconv.Itoa(123456)); !ok || n != 123456 {
		t.Errorf("parsePartName(part-123456) = %d, %v", n, ok)
	}
}
