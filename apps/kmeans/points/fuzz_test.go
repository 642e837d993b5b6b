package points

import (
	"errors"
	"math"
	"path/filepath"
	"testing"

	"github.com/gaspigo/gaspigo/apps/kmeans/internal/kmtest"
)

// FuzzReadCSV: any file content gives either points (finite, the right
// count, and the same values on a second read of a sub-shard) or a
// *FileError; never a panic.
func FuzzReadCSV(f *testing.F) {
	for _, s := range []string{"1,2\n3,4\n", "1e308,-0\n\n", "nan\n", ",\n", "1,2,\r\n", "\xef\xbb\xbf5\n", "0x1p-3, 7 \n"} {
		f.Add([]byte(s), uint8(0), uint8(2))
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte, lo, span uint8) {
		path := filepath.Join(dir, "f.csv")
		writeFresh(t, path, data)
		l, h := int(lo%4), int(lo%4)+int(span%5)
		pts, d, err := ReadCSVShard(path, l, h, CSVLayout{})
		if err != nil {
			var fe *FileError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v is not a *FileError", err)
			}
			return
		}
		if h > l && (d < 1 || len(pts) != (h-l)*d) {
			t.Fatalf("[%d,%d): %d values for d = %d", l, h, len(pts), d)
		}
		for _, v := range pts {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				t.Fatalf("non-finite value %v accepted", v)
			}
		}
		if h > l+1 {
			sub, _, err := ReadCSVShard(path, l+1, h, CSVLayout{})
			if err != nil || kmtest.SameBits(sub, pts[d:]) != -1 {
				t.Fatalf("sub-shard differs: %v", err)
			}
		}
	})
}

// FuzzReadBinary: arbitrary bytes behind a valid magic never panic and never
// allocate beyond what the file holds.
func FuzzReadBinary(f *testing.F) {
	f.Add(binFile(2, 2, 1, 0, []float64{1, 2, 3, 4}), uint8(0), uint8(2))
	f.Add(binFile(1<<40, 3, 1, 0, nil), uint8(0), uint8(1))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte, lo, span uint8) {
		path := filepath.Join(dir, "f.bin")
		writeFresh(t, path, data)
		l, h := int(lo%4), int(lo%4)+int(span%5)
		pts, d, err := ReadBinaryShard(path, l, h)
		if err != nil {
			var fe *FileError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v is not a *FileError", err)
			}
			return
		}
		if len(pts) != (h-l)*d || 8*len(pts) > len(data) {
			t.Fatalf("%d values for d = %d from %d bytes", len(pts), d, len(data))
		}
	})
}
