package terasort

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Rule: a directory's input files are its regular files of any name, but
// not _SUCCESS (nor any _ file), dot files, .crc files or a sort's
// leftover part-NNNNN.tmp; part files first in part order, then the others
// by name; with part files only, a gap is an error as in ListParts.
func TestInputFiles(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"zeta.dat", "part-00001", "_SUCCESS", ".hidden", "alpha.crc", ".alpha.crc",
		"part-00000", "gensort out 1", "part-00003.tmp", "_logs"} {
		os.WriteFile(filepath.Join(dir, name), nil, 0o600)
	}
	os.Mkdir(filepath.Join(dir, "subdir"), 0o700)
	paths, err := InputFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range paths {
		names = append(names, filepath.Base(p))
	}
	if got, want := strings.Join(names, "|"), "part-00000|part-00001|gensort out 1|zeta.dat"; got != want {
		t.Fatalf("InputFiles = %s, want %s", got, want)
	}
	only := t.TempDir()
	for _, name := range []string{"part-00000", "part-00002", "_SUCCESS"} {
		os.WriteFile(filepath.Join(only, name), nil, 0o600)
	}
	if _, err := InputFiles(only); !errors.Is(err, ErrNoInput) || !strings.Contains(err.Error(), "part-00001") {
		t.Fatalf("part files with a gap: %v", err)
	}
	if _, err := InputFiles(t.TempDir()); !errors.Is(err, ErrNoInput) {
		t.Fatalf("empty directory: %v", err)
	}
}

// Rule: ValidateFiles counts duplicate keys (a key equal to the previous
// record's) inside sections, across sections and across files, as
// valsort does.
func TestValidateDuplicates(t *testing.T) {
	dir := t.TempDir()
	rec := func(key byte) []byte {
		r := make([]byte, RecordSize)
		for i := range KeySize {
			r[i] = key
		}
		return r
	}
	file := func(name string, keys ...byte) string {
		var b []byte
		for _, k := range keys {
			b = append(b, rec(k)...)
		}
		p := filepath.Join(dir, name)
		os.WriteFile(p, b, 0o600)
		return p
	}
	a := file("a", 1, 2, 2, 3, 3, 3) // 3 duplicates
	b := file("b", 3, 4, 5, 5)       // 1 across the boundary, 1 inside
	cfg := DefaultScanConfig()
	cfg.SectionBytes = 2 * RecordSize // sections of 2 records: duplicates across sections too
	cfg.BlockBytes = RecordSize
	rep, err := ValidateFiles(context.Background(), []string{a, b}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Duplicates != 5 || rep.Files[0].Duplicates != 3 || rep.Files[1].Duplicates != 1 || rep.Records != 10 {
		t.Fatalf("duplicates %d (files %d, %d), records %d; want 5 (3, 1), 10", rep.Duplicates, rep.Files[0].Duplicates, rep.Files[1].Duplicates, rep.Records)
	}
}
