package points

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"

	"github.com/gaspigo/gaspigo/apps/kmeans/kernel"
)

// ReadCentroidsCSV reads initial centroids (--init) from a CSV file (the
// format of point files, header and quoting included): exactly k records
// of d finite values each, in cluster order. Errors are
// *FileError values naming the line and what was wrong.
func ReadCentroidsCSV(path string, k, d int) ([]float64, error) {
	if k < 1 || d < 1 || d > kernel.MaxDim || k > math.MaxInt32 {
		return nil, shapeErr("ReadCentroidsCSV: k = %d, d = %d; want 1 ≤ k ≤ %d and 1 ≤ d ≤ %d", k, d, math.MaxInt32, kernel.MaxDim)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	recs := newCSVRecords(f, CSVLayout{})
	out := make([]float64, 0, min(k, max(1, (1<<20)/d))*d) // a bounded hint
	got := 0
	for {
		rec, line, err := recs.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			fe := err.(*FileError)
			fe.Path = path
			return nil, fe
		}
		if got == k {
			return nil, &FileError{Path: path, Line: line, Offset: -1, Err: kernel.ErrCount,
				Detail: fmt.Sprintf("more than k = %d centroids; give one line per cluster", k)}
		}
		out, err = parseRecord(out, rec, d)
		if err != nil {
			fe := err.(*FileError)
			fe.Path, fe.Line = path, line
			if errors.Is(fe.Err, ErrColumns) {
				fe.Detail += " (d is the dimension of the points)"
			}
			return nil, fe
		}
		got++
	}
	if got != k {
		after := ""
		if recs.header != 0 {
			after = fmt.Sprintf(" after the header on line %d", recs.header)
		}
		return nil, &FileError{Path: path, Offset: -1, Err: kernel.ErrCount,
			Detail: fmt.Sprintf("the file holds %d centroids%s, want k = %d", got, after, k)}
	}
	return out, nil
}

// WriteCentroidsCSV writes k centroids of dimension d, one per line in
// cluster order, formatted with strconv 'g' -1 (exact round trip).
func WriteCentroidsCSV(w io.Writer, centroids []float64, k, d int) error {
	if k < 1 || d < 1 || len(centroids) != k*d {
		return shapeErr("WriteCentroidsCSV: len(centroids) = %d, want k*d = %d*%d", len(centroids), k, d)
	}
	return WriteCSV(w, centroids, d)
}
