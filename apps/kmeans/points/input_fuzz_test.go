package points

import (
	"bytes"
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/gaspigo/gaspigo/apps/kmeans/internal/kmtest"
)

// FuzzReadCentroidsCSV: an initial-centroids file (--init). Any content
// gives either exactly k finite centroids of dimension d, which write back
// (WriteCentroidsCSV) to a file that reads to the same bits, or a
// *FileError; never a panic.
func FuzzReadCentroidsCSV(f *testing.F) {
	for _, s := range []string{"1,2\n3,4\n", "1,2\n\n3,4", "1,2\n", "1,2\n3,4\n5,6\n", "1e400,0\n1,1\n", "nan,1\n2,2\n", "1,2,3\n4,5,6\n", "\xef\xbb\xbf-0, 7 \r\n8,9\n"} {
		f.Add([]byte(s), uint8(2), uint8(2))
	}
	f.Add([]byte("5\n"), uint8(1), uint8(1))
	dir := f.TempDir()
	path := filepath.Join(dir, "init.csv")
	back := filepath.Join(dir, "again.csv")
	f.Fuzz(func(t *testing.T, data []byte, kSel, dSel uint8) {
		k, d := 1+int(kSel%4), 1+int(dSel%4)
		writeFresh(t, path, data)
		c, err := ReadCentroidsCSV(path, k, d)
		if err != nil {
			var fe *FileError
			if !errors.As(err, &fe) || fe.Path != path {
				t.Fatalf("error %v is not a *FileError for %s", err, path)
			}
			return
		}
		if len(c) != k*d {
			t.Fatalf("%d values for k = %d, d = %d", len(c), k, d)
		}
		for _, v := range c {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				t.Fatalf("non-finite value %v accepted", v)
			}
		}
		var b bytes.Buffer
		if err := WriteCentroidsCSV(&b, c, k, d); err != nil {
			t.Fatalf("accepted centroids do not write: %v", err)
		}
		writeFresh(t, back, b.Bytes())
		again, err := ReadCentroidsCSV(back, k, d)
		if err != nil || kmtest.SameBits(again, c) != -1 {
			t.Fatalf("centroids written back read differently: %v", err)
		}
	})
}

// FuzzInspect: Inspect is what every rank runs first on the input file
// (format, point count, dimension), and the shard readers must agree with
// it. Any content gives a *FileError or an Info with at least one point of
// dimension at least 1; then reading all Info.N points either succeeds with
// N*D values or fails with a *FileError, and reading one point more always
// fails (with a *FileError).
func FuzzInspect(f *testing.F) {
	for _, s := range []string{"1,2\n3,4\n", "1,2\n\n  \n3\n", "\n\n", "x\n", ",,,\n", "1\r\n2\r\n"} {
		f.Add([]byte(s))
	}
	f.Add(binFile(2, 2, 1, 0, []float64{1, 2, 3, 4}))
	f.Add(binFile(3, 1, 1, 0, []float64{1, 2}))
	f.Add(binFile(1, 1, 1, 0, []float64{math.Inf(1)}))
	f.Add([]byte(BinaryMagic))
	dir := f.TempDir()
	path := filepath.Join(dir, "points")
	f.Fuzz(func(t *testing.T, data []byte) {
		writeFresh(t, path, data)
		isFileError := func(err error) bool {
			var fe *FileError
			return errors.As(err, &fe) && fe.Path == path
		}
		info, err := Inspect(path, CSVLayout{})
		if err != nil {
			if !isFileError(err) {
				t.Fatalf("Inspect: %v is not a *FileError for %s", err, path)
			}
			return
		}
		if info.N < 1 || info.D < 1 {
			t.Fatalf("Inspect accepted %+v", info)
		}
		pts, d, err := ReadShard(path, 0, info.N, CSVLayout{})
		switch {
		case err != nil && !isFileError(err):
			t.Fatalf("ReadShard of all %d points: %v is not a *FileError", info.N, err)
		case err == nil && (d != info.D || len(pts) != info.N*info.D):
			t.Fatalf("ReadShard of all points: %d values of dimension %d; Inspect says %+v", len(pts), d, info)
		}
		if _, _, err := ReadShard(path, 0, info.N+1, CSVLayout{}); err == nil {
			t.Fatalf("read %d points from a file Inspect says holds %d", info.N+1, info.N)
		} else if !isFileError(err) {
			t.Fatalf("ReadShard past the end: %v is not a *FileError", err)
		}
	})
}

// writeFresh writes data to a new file at path, removing the old one
// first: rewriting a file in place through truncation makes some file
// systems (ext4's auto_da_alloc) flush it on close, which would cut a fuzz
// target to a few hundred runs a second and stall its minimisation.
func writeFresh(tb testing.TB, path string, data []byte) {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		tb.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		tb.Fatal(err)
	}
}
