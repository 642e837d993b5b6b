package kmeans

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/gaspigo/gaspigo/apps/kmeans/internal/kmtest"
	"github.com/gaspigo/gaspigo/apps/kmeans/kernel"
	"github.com/gaspigo/gaspigo/apps/kmeans/points"
)

// quotedWithHeader is the CSV of pts (dimension d) as spreadsheets and
// data-frame libraries write it: a header line, every value quoted, some
// with blanks inside the quotes, CRLF line ends.
func quotedWithHeader(pts []float64, d int) []byte {
	var b bytes.Buffer
	for j := range d {
		if j > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"x %d"`, j)
	}
	b.WriteString("\r\n")
	for i, v := range pts {
		s := strconv.FormatFloat(v, 'g', -1, 64)
		if i%3 == 0 {
			s = " " + s + " "
		}
		b.WriteString(`"` + s + `"`)
		if i%d == d-1 {
			b.WriteString("\r\n")
		} else {
			b.WriteByte(',')
		}
	}
	return b.Bytes()
}

// pandasCSV is the CSV of pts as a data frame's to_csv writes it by
// default: a header whose first field (the index's) is empty, and the row
// number first on every line; sep between the values.
func pandasCSV(pts []float64, d int, sep string) []byte {
	var b bytes.Buffer
	for j := range d {
		fmt.Fprintf(&b, "%sx%d", sep, j)
	}
	b.WriteString("\n")
	for i := 0; i < len(pts)/d; i++ {
		b.WriteString(strconv.Itoa(i))
		for _, v := range pts[i*d : (i+1)*d] {
			b.WriteString(sep + strconv.FormatFloat(v, 'g', -1, 64))
		}
		b.WriteString("\n")
	}
	return b.Bytes()
}

// A CSV with a header line and quoted numbers gives the same job, to the
// centroids' checksum line, as the plain file of the same points; so does
// a data frame's file, with its index column skipped and its separator
// given, and refused without.
func TestCSVHeaderQuotedSameCentroids(t *testing.T) {
	opt := resumeOptions()
	d := opt.Gen.D
	pts := make([]float64, opt.Gen.N*d)
	if err := kernel.Generate(opt.Gen, 0, opt.Gen.N, pts); err != nil {
		t.Fatal(err)
	}
	var plain bytes.Buffer
	if err := points.WriteCSV(&plain, pts, d); err != nil {
		t.Fatal(err)
	}
	files := map[string]struct {
		data   []byte
		layout points.CSVLayout
	}{
		"plain.csv":       {plain.Bytes(), points.CSVLayout{}},
		"quoted.csv":      {quotedWithHeader(pts, d), points.CSVLayout{}},
		"pandas.csv":      {pandasCSV(pts, d, ","), points.CSVLayout{Skip: 1}},
		"pandas-semi.csv": {pandasCSV(pts, d, ";"), points.CSVLayout{Skip: 1, Sep: ';'}},
		"pandas-tab.csv":  {pandasCSV(pts, d, "\t"), points.CSVLayout{Skip: 1, Sep: '\t'}},
	}
	lines := map[string]string{}
	for name, f := range files {
		path := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(path, f.data, 0o644); err != nil {
			t.Fatal(err)
		}
		if f.layout != (points.CSVLayout{}) {
			if _, err := points.Inspect(path, points.CSVLayout{}); err == nil {
				t.Fatalf("%s: Inspect without a layout accepted it", name)
			}
		}
		info, err := points.Inspect(path, f.layout)
		if err != nil || info != (points.Info{Format: points.FormatCSV, N: opt.Gen.N, D: d}) {
			t.Fatalf("%s: Inspect = %+v, %v", name, info, err)
		}
		got, _, err := points.ReadShard(path, 0, info.N, f.layout)
		if err != nil || kmtest.SameBits(got, pts) != -1 || len(got) != len(pts) {
			t.Fatalf("%s: the points read differ from those written (%v)", name, err)
		}
		o := opt
		o.Input, o.CSV = path, f.layout
		res := plainRun(t, o)
		lines[name] = fmt.Sprintf("centroids sha256=%s sse=%s iterations=%d",
			kernel.Checksum(res.Centroids), strconv.FormatFloat(res.SSE, 'g', -1, 64), res.Iterations)
	}
	for name := range files {
		if lines[name] != lines["plain.csv"] {
			t.Fatalf("%s: %s\nplain file: %s", name, lines[name], lines["plain.csv"])
		}
	}
}
