package points

import (
	"encoding/csv"
	"errors"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/gaspigo/gaspigo/apps/kmeans/internal/kmtest"
	"github.com/gaspigo/gaspigo/apps/kmeans/kernel"
)

// The first column of a file is refused when it is a row index, or named
// as one, until the layout says what it is; another separator is named.
func TestCSVIndexColumnAndSeparator(t *testing.T) {
	t.Parallel()
	pandas := ",x,y\n0,1.5,2\n1,3,4\n2,5,6\n"
	for _, tc := range []struct {
		name, src string
		layout    CSVLayout
		want      []float64 // all points; nil: err
		d         int
		err       error
		msg       string
	}{
		{"data frame", pandas, CSVLayout{}, nil, 0, ErrIndexColumn, `in.csv:1: kmeans: the first column is an index: its header is "", an index's name, not a coordinate: give --skip-columns 1 to leave it out (or --skip-columns 0 to cluster it all the same)`},
		{"data frame, skipped", pandas, CSVLayout{Skip: 1}, []float64{1.5, 2, 3, 4, 5, 6}, 2, nil, ""},
		{"unnamed columns", ",0,1\n0,1.5,2\n1,3,4\n2,5,6\n", CSVLayout{}, nil, 0, ErrIndexColumn, `in.csv:1: kmeans: the first column is an index: its header is ""`},
		{"unnamed columns, skipped", ",0,1\n0,1.5,2\n1,3,4\n2,5,6\n", CSVLayout{Skip: 1}, []float64{1.5, 2, 3, 4, 5, 6}, 2, nil, ""},
		{"named id", "id,x\n7,1\n9,2\n", CSVLayout{}, nil, 0, ErrIndexColumn, `its header is "id"`},
		{"named Index", "Index,x\n7,1\n9,2\n", CSVLayout{}, nil, 0, ErrIndexColumn, `"Index"`},
		{"counts from 1", "1,1.5,2\n2,3,4\n3,5,6\n", CSVLayout{}, nil, 0, ErrIndexColumn, "in.csv:1: kmeans: the first column is an index: it counts 1, 2, 3, ... down the lines, not a coordinate"},
		{"counts from 0 after a header", "a,b\n0,5\n1,6\n2,7\n", CSVLayout{}, nil, 0, ErrIndexColumn, "in.csv:2: kmeans: the first column is an index: it counts 0, 1, 2, ..."},
		{"counts, kept", "1,1.5,2\n2,3,4\n3,5,6\n", CSVLayout{KeepIndex: true}, []float64{1, 1.5, 2, 2, 3, 4, 3, 5, 6}, 3, nil, ""},
		{"counts from 2: data", "2,1.5\n3,3\n4,5\n", CSVLayout{}, []float64{2, 1.5, 3, 3, 4, 5}, 2, nil, ""},
		{"counts then breaks: data", "0,1\n1,2\n2,3\n4,4\n", CSVLayout{}, []float64{0, 1, 1, 2, 2, 3, 4, 4}, 2, nil, ""},
		{"two points: too few to tell", "0,1\n1,2\n", CSVLayout{}, []float64{0, 1, 1, 2}, 2, nil, ""},
		{"one column counting is data", "0\n1\n2\n3\n", CSVLayout{}, []float64{0, 1, 2, 3}, 1, nil, ""},
		{"semicolons", "1.5;2\n3;4\n", CSVLayout{}, nil, 0, ErrColumns, "in.csv:1: kmeans: wrong number of columns: one value per line with semicolons inside it: give --sep ';'"},
		{"semicolons given", "1.5;2\n3;4\n", CSVLayout{Sep: ';'}, []float64{1.5, 2, 3, 4}, 2, nil, ""},
		{"tabs", "x\ty\n1.5\t2\n", CSVLayout{}, nil, 0, ErrColumns, "give --sep tab"},
		{"tabs given", "x\ty\n1.5\t2\n", CSVLayout{Sep: '\t'}, []float64{1.5, 2}, 2, nil, ""},
		{"skip leaves none", "1\n2\n", CSVLayout{Skip: 1}, nil, 0, ErrColumns, "--skip-columns 1 leaves none"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := writeTemp(t, "in.csv", []byte(tc.src))
			info, err := Inspect(path, tc.layout)
			if tc.err == nil {
				got, d, rerr := ReadCSVShard(path, 0, info.N, tc.layout)
				if err != nil || rerr != nil || d != tc.d || info.D != d || info.N*d != len(tc.want) || kmtest.SameBits(got, tc.want) != -1 {
					t.Fatalf("Inspect %+v, %v; read %v (d %d), %v; want %v (d %d)", info, err, got, d, rerr, tc.want, tc.d)
				}
				return
			}
			var fe *FileError
			if !errors.Is(err, tc.err) || !errors.As(err, &fe) || fe.Path != path || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err = %v, want a *FileError for %s of %v saying %q", err, path, tc.err, tc.msg)
			}
		})
	}
	for _, l := range []CSVLayout{{Skip: -1}, {Sep: '"'}, {Sep: '\n'}} {
		if err := l.Validate(); !errors.Is(err, kernel.ErrConfig) {
			t.Errorf("%+v: Validate = %v, want kernel.ErrConfig", l, err)
		}
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
		{"header with an empty name", "w,,z\n1,2,3\n", []float64{1, 2, 3}, 3, nil, ""},
		{"quoted", `"1","2.5e1"` + "\n" + ` "-3" ,4` + "\n", nil, 0, ErrSyntax, ":2:"},
		{"quoted, blanks inside", "\" 1 \",\"2\"\r\n\"3\",4\r\n", []float64{1, 2, 3, 4}, 2, nil, ""},
		{"quoted header", `"a ""b""","c, d"` + "\n1,2\n", []float64{1, 2}, 2, nil, ""},
		{"a value over two lines", "\"1\n\",2\n3,4\n", []float64{1, 2, 3, 4}, 2, nil, ""},
		{"numbers with a gap are no header", "1,,3\n", nil, 0, ErrSyntax, "column 2 is empty"},
		{"a point with a typo is no header", "1.0,abc\n2,3\n", nil, 0, ErrSyntax, "abc"},
		{"header wider than the points", "a,b,c\n1,2\n", nil, 0, ErrColumns, "the header, on line 1, sets the dimension"},
		{"header only", "a,b\n", nil, 0, kernel.ErrRange, "no points"},
		{"bare quote", "1,2\n3,4\"\n", nil, 0, ErrSyntax, ":2:"},
		{"unterminated quote", "1,2\n\"3,4\n", nil, 0, ErrSyntax, ":"},
		{"a second header is a bad point", "x,y\nx,y\n", nil, 0, ErrSyntax, `:2: kmeans: not a number: column 1 is "x"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := writeTemp(t, "in.csv", []byte(tc.src))
			info, ierr := Inspect(path, CSVLayout{})
			n := info.N
			if ierr != nil {
				n = 1
			}
			got, d, err := ReadCSVShard(path, 0, n, CSVLayout{})
			if tc.err == nil {
				if ierr != nil || err != nil || d != tc.d || info.N*d != len(tc.want) || kmtest.SameBits(got, tc.want) != -1 {
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
	if err != nil || kmtest.SameBits(got, []float64{1, 2, 3, 4}) != -1 {
		t.Fatalf("got %v, %v", got, err)
	}
	if _, err := ReadCentroidsCSV(path, 3, 2); !errors.Is(err, kernel.ErrCount) || !strings.Contains(err.Error(), "after the header on line 1") {
		t.Fatalf("k = 3 of 2: %v", err)
	}
}

// TestCSVFastPathIsRFC4180: lines without quotes are split by the reader
// itself, the rest by encoding/csv from the first quote on; on random
// files of values, blanks, tabs, CRLF, empty lines and (in some) quoted
// values, the records and their lines are encoding/csv's.
func TestCSVFastPathIsRFC4180(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	pieces := []string{"1", "-2.5", "3e4", " ", "\t", "x", "", "0.125"}
	for _, sep := range []rune{',', ';', '\t', '|'} {
		for round := range 400 {
			var b strings.Builder
			quotes := round%3 == 0
			for range 1 + rng.IntN(12) {
				switch rng.IntN(8) {
				case 0:
					b.WriteString("\n") // an empty line
					continue
				case 1:
					b.WriteString("   \r\n") // blanks only
					continue
				}
				for f := range 1 + rng.IntN(4) {
					if f > 0 {
						b.WriteRune(sep)
					}
					for range rng.IntN(3) {
						b.WriteString(pieces[rng.IntN(len(pieces))])
					}
					if quotes && rng.IntN(6) == 0 {
						b.WriteString(`" 7,""8""` + "\n" + `9"`)
					}
				}
				if rng.IntN(3) == 0 {
					b.WriteString("\r")
				}
				b.WriteString("\n")
			}
			in := b.String()
			if rng.IntN(4) == 0 {
				in = strings.TrimSuffix(in, "\n") // no newline at the end
			}
			ref := csv.NewReader(strings.NewReader(in))
			ref.Comma, ref.FieldsPerRecord, ref.TrimLeadingSpace = sep, -1, sep != '\t'
			c := newCSVRecords(strings.NewReader(in), CSVLayout{Sep: sep})
			for {
				want, werr := ref.Read()
				got, line, gerr := c.read()
				if werr != nil || gerr != nil {
					if (werr == io.EOF) != (gerr == io.EOF) || (werr == nil) != (gerr == nil) {
						t.Fatalf("sep %q, %q: errors %v and %v", sep, in, werr, gerr)
					}
					if pe, ok := werr.(*csv.ParseError); ok && gerr.(*FileError).Line != pe.Line {
						t.Fatalf("sep %q, %q: error on line %d, want %d", sep, in, gerr.(*FileError).Line, pe.Line)
					}
					break
				}
				wline, _ := ref.FieldPos(0)
				if !slices.Equal(got, want) || line != wline {
					t.Fatalf("sep %q, %q: record %q on line %d, want %q on line %d", sep, in, got, line, want, wline)
				}
			}
		}
	}
}
