package terasort

import (
	"os"
	"path/filepath"
	"testing"
)

// records returns records [0, n) of the data set (seed, f).
func records(n int, seed uint64, f Format) []byte {
	b := make([]byte, n*RecordSize)
	GenRecords(b, seed, 0, f)
	return b
}

// writeParts writes each chunk as dir/part-NNNNN and returns the paths.
func writeParts(t *testing.T, dir string, chunks ...[]byte) []string {
	t.Helper()
	var paths []string
	for i, c := range chunks {
		p := filepath.Join(dir, PartName(i))
		if err := os.WriteFile(p, c, 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	return paths
}

// swap exchanges records i and j of buf.
func swap(buf []byte, i, j int) {
	var tmp [RecordSize]byte
	copy(tmp[:], Record(buf, i))
	copy(Record(buf, i), Record(buf, j))
	copy(Record(buf, j), tmp[:])
}
