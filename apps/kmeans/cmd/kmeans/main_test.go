package main

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestStampWriter(t *testing.T) {
	var b bytes.Buffer
	w := &stampWriter{w: &b}
	in := "iter 1 a\niter 2 b\n"
	n, err := w.Write([]byte(in))
	if err != nil || n != len(in) {
		t.Fatalf("Write = %d, %v; want %d, nil", n, err, len(in))
	}
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("got %q, want two lines", b.String())
	}
	for i, l := range lines {
		stamp, rest, ok := strings.Cut(l, " ")
		if !ok {
			t.Fatalf("line %q has no stamp", l)
		}
		if _, err := time.Parse(time.RFC3339Nano, stamp); err != nil {
			t.Fatalf("line %q: stamp: %v", l, err)
		}
		if want := []string{"iter 1 a", "iter 2 b"}[i]; rest != want {
			t.Fatalf("line %d: %q after the stamp, want %q", i, rest, want)
		}
	}
}

func TestParseFlags(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		bad  string // a fragment of the error; "" for success
	}{
		{[]string{"--generate", "1000"}, ""},
		{[]string{"--generate", "1000", "--timestamps", "--inject", "kill:leader,iter=3"}, ""},
		{[]string{"--generate", "1000", "--inject", "kill:rank=1,iter=3,phase=commit"}, ""},
		{[]string{}, "give --input FILE or --generate N"},
		{[]string{"--generate", "1000", "--ckpt-every", "0", "--inject", "kill:rank=1,iter=3"}, "needs checkpoints"},
		{[]string{"--generate", "1000", "--max-iter", "5", "--inject", "kill:rank=1,iter=6"}, "never fires"},
		{[]string{"--generate", "1000", "--inject", "kill:rank=1"}, "iter is missing"},
		{[]string{"--generate", "1000", "--inject", "kill:rank=1,iter=0,phase=commit"}, ""},
		{[]string{"--generate", "1000", "--inject", "kill:rank=1,iter=0"}, "iter=0 names the commit of the starting checkpoint"},
		{[]string{"--generate", "1000", "--inject", "kill:mirror-of=1,iter=0,phase=commit"}, "iter=0 names the commit of the starting checkpoint"},
		{[]string{"--generate", "1000", "--inject", "kill:rank=1,iter=-1"}, "iter \"-1\": want a whole number >= 0"},
		{[]string{"--generate", "1000", "--inject", "kill:rank=1,leader,iter=2"}, "exactly one target"},
		{[]string{"--generate", "1000", "--mirrors", "0"}, "--mirrors 0"},
		{[]string{"--generate", "1000", "--shrink", "--inject", "kill:rank=1,iter=3"}, ""},
		{[]string{"--generate", "1000", "--shrink", "--ckpt-dir", "/tmp/x"}, "--shrink with --ckpt-dir"},
		{[]string{"--generate", "1000", "--inject", "kill:rank=-1,iter=2"}, "ranks count from 0"},
		{[]string{"--generate", "1000", "--inject", "kill:mirror-of=-2,iter=2"}, "ranks count from 0"},
		{[]string{"--generate", "1000", "--output", filepath.Join(dir, "c.csv")}, ""},
		{[]string{"--generate", "1000", "--output", filepath.Join(dir, "missing", "c.csv")}, "missing: no such file or directory; create it first"},
		{[]string{"--generate", "1000", "--output", filepath.Join(file, "c.csv")}, "is not a directory"},
		{[]string{"--generate", "1000", "--output", dir}, "is a directory; give a file name"},
		{[]string{"--generate", "1000", "--algo", "yinyang", "--shards", "12"}, ""},
		{[]string{"--generate", "1000", "--algo", "elkan"}, `unknown algorithm "elkan"`},
		{[]string{"--generate", "1000", "--algo", "auto", "--bounds-memory", "512m"}, ""},
		{[]string{"--generate", "1000", "--bounds-memory", "0"}, ""},
		{[]string{"--generate", "1000", "--bounds-memory", "2 GB"}, "--bounds-memory \"2 GB\": want a size in bytes"},
		{[]string{"--generate", "1000", "--bounds-memory", "-1"}, "want a size in bytes"},
		{[]string{"--generate", "1000", "--bounds-memory", "99999999999T"}, "want a size in bytes"},
		{[]string{"--generate", "1000", "--shards", "-1"}, "--shards -1"},
		{[]string{"--generate", "1000", "--seeding", "kmeans++"}, ""},
		{[]string{"--generate", "1000", "--seeding", "kmeans||"}, `unknown seeding "kmeans||"`},
		{[]string{"--input", file, "--skip-columns", "1", "--sep", ";"}, ""},
		{[]string{"--input", file, "--sep", "tab"}, ""},
		{[]string{"--input", file, "--sep", ";;"}, `--sep ";;": give one character`},
		{[]string{"--input", file, "--sep", `"`}, "cannot separate values"},
		{[]string{"--input", file, "--skip-columns", "-1"}, "--skip-columns -1: want 0 or more"},
		{[]string{"--generate", "1000", "--skip-columns", "1"}, "for a CSV --input"},
	} {
		f, err := parse(c.args, io.Discard)
		switch {
		case c.bad == "" && err != nil:
			t.Errorf("parse(%q): %v", c.args, err)
		case c.bad != "" && (err == nil || !strings.Contains(err.Error(), c.bad)):
			t.Errorf("parse(%q) = %v, want an error containing %q", c.args, err, c.bad)
		case c.bad == "" && f == nil:
			t.Errorf("parse(%q): nil flags", c.args)
		}
		if err == nil && f.opt.Shrink != slices.Contains(c.args, "--shrink") {
			t.Errorf("parse(%q): Options.Shrink = %v", c.args, f.opt.Shrink)
		}
		if err == nil && f.opt.CSV.KeepIndex != slices.Contains(c.args, "--skip-columns") {
			t.Errorf("parse(%q): the index check is %v", c.args, !f.opt.CSV.KeepIndex)
		}
	}
}

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "4096": 4096, "3K": 3 << 10, "512m": 512 << 20, "2G": 2 << 30, " 1T ": 1 << 40} {
		if got, err := parseBytes(in); err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "G", "1.5G", "1GB", "-3", "8E"} {
		if got, err := parseBytes(in); err == nil {
			t.Errorf("parseBytes(%q) = %d, want an error", in, got)
		}
	}
}

// The centroids file is readable by its owner only, even when it was there
// before with a wider mode.
func TestWriteCentroidsOwnerOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.csv")
	if err := os.WriteFile(path, []byte("old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeCentroids(path, []float64{1, 2, 3, 4}, 2); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if m := fi.Mode().Perm(); m != 0o600 {
		t.Fatalf("--output file mode %v, want -rw-------", m)
	}
}
