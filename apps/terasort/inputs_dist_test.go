package terasort

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestDistSortArbitraryNames: the distributed sort takes a directory of
// gensort-format files (100-byte records, 10-byte keys) with any names,
// skipping what Hadoop skips (_SUCCESS, dot files, .crc files: here they
// hold bytes that are not whole records, so reading one would fail the
// job), and terasort validate reports the output as valsort does:
// records, checksum and duplicate keys (50 records are copied into a
// second file, so 50 keys repeat).
func TestDistSortArbitraryNames(t *testing.T) {
	_, terasort := bins.Build(t)
	gen, sum := genInput(t, 20000, 3)
	in := filepath.Join(t.TempDir(), "gensort data")
	if err := os.Mkdir(in, 0o700); err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{"gensort-b0.dat", "input 2", "Z.records"} {
		if err := os.Rename(filepath.Join(gen, PartName(i)), filepath.Join(in, name)); err != nil {
			t.Fatal(err)
		}
	}
	first, err := os.ReadFile(filepath.Join(in, "input 2"))
	if err != nil {
		t.Fatal(err)
	}
	dups := first[:50*RecordSize]
	if err := os.WriteFile(filepath.Join(in, "more.bin"), dups, 0o600); err != nil {
		t.Fatal(err)
	}
	want := sum.Add(SumRecords(dups))
	for _, junk := range []string{"_SUCCESS", ".input 2.crc", "gensort-b0.dat.crc", ".DS_Store"} {
		os.WriteFile(filepath.Join(in, junk), []byte("not records"), 0o600)
	}
	out := filepath.Join(t.TempDir(), "out")
	code, log := job(t, 3, 0, "--in", in, "--out", out)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, log)
	}
	checkSorted(t, out, 3, want, log)
	ctx, cancel := context.WithTimeout(context.Background(), jobTimeout)
	defer cancel()
	b, err := exec.CommandContext(ctx, terasort, "validate", out).Output()
	if err != nil {
		t.Fatalf("terasort validate %s: %v\n%s", out, err, b)
	}
	wantOut := fmt.Sprintf("Records: %d\nChecksum: %x\nDuplicate keys: 50\nSUCCESS - all records are in order\n%v\n", want.Records, want.Checksum, want)
	if string(b) != wantOut {
		t.Fatalf("terasort validate printed\n%s\nwant\n%s", b, wantOut)
	}
	if strings.Contains(log, "not records") {
		t.Fatalf("a skipped file was read:\n%s", log)
	}
}
