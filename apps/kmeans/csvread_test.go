package kmeans

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// quotedWithHeader is the CSV of points (dimension d) as spreadsheets and
// data-frame libraries write it: a header line, every value quoted, some
// with blanks inside the quotes, CRLF line ends.
func quotedWithHeader(points []float64, d int) []byte {
	var b bytes.Buffer
	for j := range d {
		if j > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"x %d"`, j)
	}
	b.WriteString("\r\n")
	for i, v := range points {
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

// A CSV with a header line and quoted numbers gives the same job, to the
// centroids' checksum line, as the plain file of the same points.
func TestCSVHeaderQuotedSameCentroids(t *testing.T) {
	opt := resumeOptions()
	d := opt.Gen.D
	pts := make([]float64, opt.Gen.N*d)
	if err := Generate(opt.Gen, 0, opt.Gen.N, pts); err != nil {
		t.Fatal(err)
	}
	var plain bytes.Buffer
	if err := WriteCSV(&plain, pts, d); err != nil {
		t.Fatal(err)
	}
	lines := map[string]string{}
	for name, data := range map[string][]byte{"plain.csv": plain.Bytes(), "quoted.csv": quotedWithHeader(pts, d)} {
		path := writeTemp(t, name, data)
		info, err := Inspect(path)
		if err != nil || info != (Info{Format: FormatCSV, N: opt.Gen.N, D: d}) {
			t.Fatalf("%s: Inspect = %+v, %v", name, info, err)
		}
		got, _, err := ReadShard(path, 0, info.N)
		if err != nil || sameBits(got, pts) != -1 || len(got) != len(pts) {
			t.Fatalf("%s: the points read differ from those written (%v)", name, err)
		}
		o := opt
		o.Input = path
		res := plainRun(t, o)
		lines[name] = fmt.Sprintf("centroids sha256=%s sse=%s iterations=%d",
			Checksum(res.Centroids), strconv.FormatFloat(res.SSE, 'g', -1, 64), res.Iterations)
	}
	if lines["plain.csv"] != lines["quoted.csv"] {
		t.Fatalf("with a header and quotes: %s\nplain file:          %s", lines["quoted.csv"], lines["plain.csv"])
	}
}

func TestCSVHeaderAndQuoting(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, src string
		want      []float64 // all points; nil: err
		d         int
		err       error
		msg       string
	}{
		{"header", "x,y\n1,2\n3,4\n", []float64{1, 2, 3, 4}, 2, nil, ""},
		{"header after blank lines, BOM", "\xef\xbb\xbf\n  \nx,y\n1,2\n", []float64{1, 2}, 2, nil, ""},
		{"header with an empty name", "id,,z\n1,2,3\n", []float64{1, 2, 3}, 3, nil, ""},
		{"quoted", `"1","2.5e1"` + "\n" + ` "-3" ,4` + "\n", nil, 0, ErrSyntax, ":2:"},
		{"quoted, blanks inside", "\" 1 \",\"2\"\r\n\"3\",4\r\n", []float64{1, 2, 3, 4}, 2, nil, ""},
		{"quoted header", `"a ""b""","c, d"` + "\n1,2\n", []float64{1, 2}, 2, nil, ""},
		{"a value over two lines", "\"1\n\",2\n3,4\n", []float64{1, 2, 3, 4}, 2, nil, ""},
		{"numbers with a gap are no header", "1,,3\n", nil, 0, ErrSyntax, "column 2 is empty"},
		{"a point with a typo is no header", "1.0,abc\n2,3\n", nil, 0, ErrSyntax, "abc"},
		{"header wider than the points", "a,b,c\n1,2\n", nil, 0, ErrColumns, "the header, on line 1, sets the dimension"},
		{"header only", "a,b\n", nil, 0, ErrRange, "no points"},
		{"bare quote", "1,2\n3,4\"\n", nil, 0, ErrSyntax, ":2:"},
		{"unterminated quote", "1,2\n\"3,4\n", nil, 0, ErrSyntax, ":"},
		{"a second header is a bad point", "x,y\nx,y\n", nil, 0, ErrSyntax, `:2: kmeans: not a number: column 1 is "x"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := writeTemp(t, "in.csv", []byte(tc.src))
			info, ierr := Inspect(path)
			n := info.N
			if ierr != nil {
				n = 1
			}
			got, d, err := ReadCSVShard(path, 0, n)
			if tc.err == nil {
				if ierr != nil || err != nil || d != tc.d || info.N*d != len(tc.want) || sameBits(got, tc.want) != -1 {
					t.Fatalf("Inspect %+v, %v; read %v (d %d), %v; want %v (d %d)", info, ierr, got, d, err, tc.want, tc.d)
				}
				return
			}
			if ierr != nil {
				err = ierr // a quoting error is found by Inspect already
			}
			var fe *FileError
			if !errors.Is(err, tc.err) || !errors.As(err, &fe) || fe.Path != path || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err = %v, want a *FileError for %s of %v saying %q", err, path, tc.err, tc.msg)
			}
		})
	}
}

// --init takes the same files: a header, quotes.
func TestCentroidsCSVHeader(t *testing.T) {
	t.Parallel()
	path := writeTemp(t, "init.csv", []byte("\"c0\",\"c1\"\n\"1\",\"2\"\n3,4\n"))
	got, err := ReadCentroidsCSV(path, 2, 2)
	if err != nil || sameBits(got, []float64{1, 2, 3, 4}) != -1 {
		t.Fatalf("got %v, %v", got, err)
	}
	if _, err := ReadCentroidsCSV(path, 3, 2); !errors.Is(err, ErrCount) || !strings.Contains(err.Error(), "after the header on line 1") {
		t.Fatalf("k = 3 of 2: %v", err)
	}
}
