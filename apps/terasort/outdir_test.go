package terasort

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// sortedParts writes a complete sort output of n records in parts part
// files to a new directory (sorted by SortInMemory, cut into parts) and
// returns the directory and the summary.
func sortedParts(t *testing.T, n int64, parts int) (string, Summary) {
	t.Helper()
	cfg := DefaultGenConfig()
	cfg.Records, cfg.Seed = n, 5
	src := filepath.Join(t.TempDir(), "in.dat")
	sum, err := GenerateFile(context.Background(), src, cfg)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]byte, len(data))
	if err := SortInMemory(out, data, DefaultSortConfig()); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "out")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	for p := range parts {
		lo, hi := PartRange(n, parts, p)
		if err := WriteFile(filepath.Join(dir, PartName(p)), out[lo*RecordSize:hi*RecordSize]); err != nil {
			t.Fatal(err)
		}
	}
	return dir, sum
}

func TestSuccessMarker(t *testing.T) {
	dir, sum := sortedParts(t, 1000, 3)
	if _, _, err := ReadSuccess(dir); !errors.Is(err, ErrIncomplete) || !strings.Contains(err.Error(), "no _SUCCESS marker") {
		t.Fatalf("ReadSuccess without a marker: %v", err)
	}
	if err := WriteSuccess(dir, 4, sum); !errors.Is(err, ErrIncomplete) || !strings.Contains(err.Error(), "3 part files, the sort wrote 4") {
		t.Fatalf("WriteSuccess with a part missing: %v", err)
	}
	if err := WriteSuccess(dir, 3, Summary{Records: 999, Checksum: sum.Checksum}); !errors.Is(err, ErrIncomplete) {
		t.Fatalf("WriteSuccess with the wrong count: %v", err)
	}
	if err := WriteSuccess(dir, 3, sum); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, SuccessName)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("marker: %v, %v; want mode 0600", fi, err)
	}
	m, paths, err := ReadSuccess(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := m.Summary(); got != sum || len(paths) != 3 || filepath.Base(paths[2]) != PartName(2) {
		t.Fatalf("marker %+v, paths %v; want %v in 3 parts", m, paths, sum)
	}
	rep, err := ValidateFiles(context.Background(), paths, DefaultScanConfig())
	if err != nil || rep.Summary != sum {
		t.Fatalf("validate the listed parts: %v, %v", rep, err)
	}

	// A stale part next to the listed ones, a listed part cut short, a
	// listed part gone: each refused, naming the part.
	stale := filepath.Join(dir, PartName(3))
	if err := os.WriteFile(stale, make([]byte, RecordSize), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ReadSuccess(dir); !errors.Is(err, ErrIncomplete) || !strings.Contains(err.Error(), "holds part-00003, which its _SUCCESS marker does not list") {
		t.Fatalf("stale part: %v", err)
	}
	os.Remove(stale)
	p1 := filepath.Join(dir, PartName(1))
	b, _ := os.ReadFile(p1)
	if err := os.WriteFile(p1, b[:len(b)-RecordSize], 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ReadSuccess(dir); !errors.Is(err, ErrIncomplete) || !strings.Contains(err.Error(), "part-00001 has 332 records, its _SUCCESS marker says 333") {
		t.Fatalf("short part: %v", err)
	}
	os.Remove(p1)
	if _, _, err := ReadSuccess(dir); !errors.Is(err, ErrIncomplete) || !strings.Contains(err.Error(), "lists part-00001") {
		t.Fatalf("missing part: %v", err)
	}
}

func TestPlanOutput(t *testing.T) {
	in := t.TempDir()
	if err := os.WriteFile(filepath.Join(in, PartName(0)), make([]byte, RecordSize), 0o600); err != nil {
		t.Fatal(err)
	}
	complete, _ := sortedParts(t, 300, 2)
	WriteSuccess(complete, 2, mustSum(t, complete))
	for _, c := range []struct {
		name    string
		out     string
		setup   func(dir string)
		replace bool
		bad     string   // a fragment of the error; "" for success
		remove  []string // base names, in order
	}{
		{name: "missing", out: filepath.Join(t.TempDir(), "new")},
		{name: "empty", out: t.TempDir()},
		{name: "the input", out: in, bad: "is the input directory"},
		{name: "inside the input", out: filepath.Join(in, "sorted"), bad: "is inside the input directory"},
		{name: "contains the input", out: filepath.Dir(in), bad: "contains the input"},
		{name: "the input through a symlink", out: filepath.Join(t.TempDir(), "link"), setup: func(d string) { os.Symlink(in, d) }, bad: "is the input directory"},
		{name: "a previous sort", out: complete, bad: "is not empty (it holds _SUCCESS, part-00000, part-00001): give a new or empty directory, or --replace"},
		{name: "a previous sort, replaced", out: complete, replace: true,
			setup: func(d string) {
				os.WriteFile(filepath.Join(d, "part-00007.tmp"), nil, 0o600)
				os.Mkdir(filepath.Join(d, "kvshuffle-r1-123"), 0o700)
			},
			remove: []string{SuccessName, "kvshuffle-r1-123", PartName(0), PartName(1), "part-00007.tmp"}},
		{name: "foreign file, replace", out: t.TempDir(), replace: true, setup: func(d string) { os.WriteFile(filepath.Join(d, "notes.txt"), nil, 0o600) },
			bad: "holds notes.txt, which terasort sort does not write"},
		{name: "unmarked part, replace", out: t.TempDir(), replace: true, setup: func(d string) { os.WriteFile(filepath.Join(d, PartName(0)), nil, 0o600) },
			bad: "holds part-00000, which no _SUCCESS marker lists"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.setup != nil {
				c.setup(c.out)
			}
			remove, err := PlanOutput(c.out, in, c.replace)
			if c.bad != "" {
				if !errors.Is(err, ErrOutputDir) || !strings.Contains(err.Error(), c.bad) {
					t.Fatalf("PlanOutput(%s) = %v, want an error containing %q", c.out, err, c.bad)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, p := range remove {
				names = append(names, filepath.Base(p))
			}
			if !slices.Equal(names, c.remove) {
				t.Fatalf("remove %v, want %v", names, c.remove)
			}
			if err := RemoveOutput(remove); err != nil {
				t.Fatal(err)
			}
			if ents, _ := os.ReadDir(c.out); len(ents) != 0 {
				t.Fatalf("%d entries left after the removal", len(ents))
			}
		})
	}
	// One input file: a directory next to it is fine, the file itself not.
	file := filepath.Join(in, PartName(0))
	if _, err := PlanOutput(filepath.Join(in, "sorted"), file, false); err != nil {
		t.Fatalf("--out next to a single input file: %v", err)
	}
	if _, err := PlanOutput(file, file, false); !errors.Is(err, ErrOutputDir) || !strings.Contains(err.Error(), "is the input file") {
		t.Fatalf("--out the input file: %v", err)
	}
}

func mustSum(t *testing.T, dir string) Summary {
	t.Helper()
	paths, err := ListParts(dir)
	if err != nil {
		t.Fatal(err)
	}
	s, err := SumFiles(context.Background(), paths, DefaultScanConfig())
	if err != nil {
		t.Fatal(err)
	}
	return s
}
