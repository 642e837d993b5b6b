package points

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gaspigo/gaspigo/apps/kmeans/internal/kmtest"
	"github.com/gaspigo/gaspigo/apps/kmeans/kernel"
)

// awkward values that must survive a round trip bit for bit.
var awkward = []float64{0.1, math.Copysign(0, -1), 1e-300, 5e-324, math.MaxFloat64, -math.MaxFloat64, 1.0 / 3, 123456789.123456789, 0, -2.5}

func writeTemp(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPointFilesRoundTrip(t *testing.T) {
	t.Parallel()
	const d = 5
	pts := append(append([]float64(nil), awkward...), kmtest.RandPoints(1, 300, d)...)
	n := len(pts) / d
	for _, f := range []Format{FormatCSV, FormatBinary} {
		path := filepath.Join(t.TempDir(), "pts."+f.String())
		if err := WriteFile(path, f, pts, d); err != nil {
			t.Fatal(err)
		}
		info, err := Inspect(path, CSVLayout{})
		if err != nil {
			t.Fatal(err)
		}
		if info != (Info{Format: f, N: n, D: d}) {
			t.Fatalf("%v: Inspect = %+v, want n=%d d=%d", f, info, n, d)
		}
		for _, r := range [][2]int{{0, n}, {0, 0}, {0, 1}, {1, 2}, {17, 200}, {n - 1, n}, {n, n}} {
			got, gd, err := ReadShard(path, r[0], r[1], CSVLayout{})
			if err != nil {
				t.Fatalf("%v %v: %v", f, r, err)
			}
			if r[1] > r[0] && gd != d {
				t.Fatalf("%v %v: d = %d", f, r, gd)
			}
			if i := kmtest.SameBits(got, pts[r[0]*d:r[1]*d]); i != -1 && len(got) > 0 || len(got) != (r[1]-r[0])*d {
				t.Fatalf("%v %v: value %d differs (len %d)", f, r, i, len(got))
			}
		}
	}
}

func TestCSVLenientLayout(t *testing.T) {
	t.Parallel()
	src := "\xef\xbb\xbf1, 2 ,3\r\n\n   \n\t4,5,6\r\n7,8,9" // BOM, CRLF, blank lines, no final newline
	path := writeTemp(t, "x.csv", []byte(src))
	info, err := Inspect(path, CSVLayout{})
	if err != nil || info.N != 3 || info.D != 3 {
		t.Fatalf("Inspect = %+v, %v", info, err)
	}
	if _, err := Inspect(writeTemp(t, "blank.csv", []byte("\n  \n")), CSVLayout{}); !errors.Is(err, kernel.ErrRange) {
		t.Fatalf("Inspect of a file without points: %v", err)
	}
	got, d, err := ReadCSVShard(path, 1, 3, CSVLayout{})
	if err != nil || d != 3 {
		t.Fatal(d, err)
	}
	if want := []float64{4, 5, 6, 7, 8, 9}; kmtest.SameBits(got, want) != -1 {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestCSVErrors(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("1,", MaxLineBytes/2+10) + "1\n"
	cases := []struct {
		name, src string
		lo, hi    int
		err       error
		want      []string // substrings of the message
	}{
		{"columns", "1,2,3\n4,5\n", 0, 2, ErrColumns, []string{":2:", "got 2 values, want 3", "line 1"}},
		{"columns late", "1,2,3\n\n4,5,6\n7,8,9,10\n", 0, 3, ErrColumns, []string{":4:", "got 4 values, want 3"}},
		{"trailing comma", "1,2\n3,4,\n", 0, 2, ErrColumns, []string{":2:", "trailing comma"}},
		{"trailing comma first line", "1,2,\n", 0, 1, ErrSyntax, []string{":1:", "column 3 is empty"}},
		{"not a number", "1,2,3\n4,abc,6\n", 0, 2, ErrSyntax, []string{":2:", "column 2", `"abc"`}},
		{"empty field", "1,,3\n", 0, 1, ErrSyntax, []string{":1:", "column 2 is empty"}},
		{"nan", "1,2,3\n4,5,NaN\n", 1, 2, kernel.ErrNotFinite, []string{":2:", "column 3", "NaN"}},
		{"inf", "-Inf,2\n", 0, 1, kernel.ErrNotFinite, []string{":1:", "column 1"}},
		{"overflow", "1e999,2\n", 0, 1, kernel.ErrNotFinite, []string{":1:", "float64 range"}},
		{"past end", "1,2\n3,4\n", 1, 3, kernel.ErrRange, []string{"holds 2"}},
		{"empty file", "\n \n", 0, 1, kernel.ErrRange, []string{"no points"}},
		{"long line", long, 0, 1, ErrLineTooLong, []string{":1:"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := writeTemp(t, "in.csv", []byte(tc.src))
			_, _, err := ReadCSVShard(path, tc.lo, tc.hi, CSVLayout{})
			if !errors.Is(err, tc.err) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			var fe *FileError
			if !errors.As(err, &fe) || fe.Path != path {
				t.Fatalf("err %v is not a *FileError naming %s", err, path)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("message %q lacks %q", err, w)
				}
			}
		})
	}
	// Lines outside the shard are not parsed (so ranks only pay for theirs).
	path := writeTemp(t, "in.csv", []byte("1,2\nxx,yy\n5,6\n"))
	if got, _, err := ReadCSVShard(path, 2, 3, CSVLayout{}); err != nil || kmtest.SameBits(got, []float64{5, 6}) != -1 {
		t.Fatalf("shard after a bad line: %v %v", got, err)
	}
	if _, _, err := ReadCSVShard(path, -1, 2, CSVLayout{}); !errors.Is(err, kernel.ErrRange) {
		t.Fatalf("negative lo: %v", err)
	}
	if _, _, err := ReadCSVShard(filepath.Join(t.TempDir(), "missing.csv"), 0, 1, CSVLayout{}); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
}

func binFile(n, d uint64, version, reserved uint32, values []float64) []byte {
	var b bytes.Buffer
	b.WriteString(BinaryMagic)
	binary.Write(&b, binary.LittleEndian, version)
	binary.Write(&b, binary.LittleEndian, reserved)
	binary.Write(&b, binary.LittleEndian, n)
	binary.Write(&b, binary.LittleEndian, d)
	for _, v := range values {
		binary.Write(&b, binary.LittleEndian, math.Float64bits(v))
	}
	return b.Bytes()
}

func TestBinaryErrors(t *testing.T) {
	t.Parallel()
	six := []float64{1, 2, 3, 4, 5, 6}
	good := binFile(3, 2, 1, 0, six)
	// The layout documented in doc.go, checked byte for byte.
	var w bytes.Buffer
	if err := WriteBinary(&w, six, 2); err != nil || !bytes.Equal(w.Bytes(), good) {
		t.Fatalf("WriteBinary does not produce the documented layout: %v", err)
	}
	withNaN := append([]float64(nil), six...)
	withNaN[4] = math.NaN()
	badMagic := append([]byte(nil), good...)
	badMagic[0] = 'X'
	cases := []struct {
		name   string
		data   []byte
		lo, hi int
		err    error
		want   []string
	}{
		{"short header", good[:20], 0, 1, ErrHeader, []string{"shorter than the 32-byte header"}},
		{"magic", badMagic, 0, 1, ErrHeader, []string{"magic", "byte offset 0"}},
		{"version", binFile(3, 2, 2, 0, six), 0, 1, ErrHeader, []string{"version 2", "byte offset 8"}},
		{"reserved", binFile(3, 2, 1, 7, six), 0, 1, ErrHeader, []string{"reserved", "byte offset 12"}},
		{"zero d", binFile(3, 0, 1, 0, six), 0, 1, ErrHeader, []string{"dimension 0", "byte offset 24"}},
		{"huge d", binFile(3, kernel.MaxDim+1, 1, 0, six), 0, 1, ErrHeader, []string{"dimension"}},
		{"zero n", binFile(0, 2, 1, 0, nil), 0, 0, kernel.ErrRange, []string{"no points"}},
		{"absurd n", binFile(1<<62, 2, 1, 0, six), 0, 1, ErrHeader, []string{"cannot fit"}},
		{"truncated", good[:len(good)-3], 0, 1, ErrSize, []string{"truncated", "80 bytes"}},
		{"trailing", append(append([]byte(nil), good...), 0), 0, 1, ErrSize, []string{"trailing"}},
		{"nan", binFile(3, 2, 1, 0, withNaN), 0, 3, kernel.ErrNotFinite, []string{"byte offset 64", "point 2 dimension 0"}},
		{"past end", good, 2, 4, kernel.ErrRange, []string{"holds 3"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := writeTemp(t, "in.bin", tc.data)
			_, _, err := ReadBinaryShard(path, tc.lo, tc.hi)
			if !errors.Is(err, tc.err) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			var fe *FileError
			if !errors.As(err, &fe) || fe.Path != path {
				t.Fatalf("err %v is not a *FileError naming %s", err, path)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("message %q lacks %q", err, w)
				}
			}
			if tc.name != "nan" && tc.name != "past end" {
				if _, err := Inspect(path, CSVLayout{}); !errors.Is(err, tc.err) {
					t.Errorf("Inspect: %v, want %v", err, tc.err)
				}
			}
			if _, _, err := ReadShard(path, tc.lo, tc.hi, CSVLayout{}); !errors.Is(err, tc.err) {
				t.Errorf("ReadShard: %v, want %v", err, tc.err)
			}
		})
	}
	// A .bin file without the magic (a CSV file, say) is a header error
	// naming the file, the magic found and the one expected, for Inspect
	// and ReadShard alike; a file of another name is read as CSV.
	csv := []byte("1,2\n3,4\n")
	for _, name := range []string{"pts.bin", "PTS.BIN", "tiny.bin"} {
		data := csv
		if name == "tiny.bin" {
			data = []byte("1,2\n")
		}
		path := writeTemp(t, name, data)
		_, err := Inspect(path, CSVLayout{})
		_, _, rerr := ReadShard(path, 0, 1, CSVLayout{})
		for _, e := range []error{err, rerr} {
			var fe *FileError
			if !errors.Is(e, ErrHeader) || !errors.As(e, &fe) || fe.Path != path {
				t.Fatalf("%s: %v, want ErrHeader naming the file", name, e)
			}
		}
		want := []string{path, `magic is "1,2\n3,4\n", want "GGKMPTS\x00"`, "binary point format"}
		if name == "tiny.bin" {
			want = []string{path, `magic is "1,2\n", want`}
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: message %q lacks %q", name, err, w)
			}
		}
	}
	if info, err := Inspect(writeTemp(t, "pts.txt", csv), CSVLayout{}); err != nil || info.Format != FormatCSV || info.N != 2 {
		t.Fatalf("pts.txt: %+v, %v; want 2 CSV points", info, err)
	}
	// The NaN is outside this shard: fine.
	path := writeTemp(t, "nan.bin", binFile(3, 2, 1, 0, withNaN))
	if got, _, err := ReadBinaryShard(path, 0, 2); err != nil || kmtest.SameBits(got, six[:4]) != -1 {
		t.Fatalf("shard before the NaN: %v %v", got, err)
	}
}

func TestWritersRefuseBadInput(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	if err := WriteCSV(&b, []float64{1, math.NaN()}, 2); !errors.Is(err, kernel.ErrNotFinite) {
		t.Errorf("CSV NaN: %v", err)
	}
	if err := WriteBinary(&b, []float64{math.Inf(1), 1}, 2); !errors.Is(err, kernel.ErrNotFinite) {
		t.Errorf("binary Inf: %v", err)
	}
	if err := WriteCSV(&b, []float64{1, 2, 3}, 2); !errors.Is(err, kernel.ErrShape) {
		t.Errorf("CSV shape: %v", err)
	}
	if err := WriteBinary(&b, nil, 2); !errors.Is(err, kernel.ErrShape) {
		t.Errorf("binary empty: %v", err)
	}
	if err := WriteFile(filepath.Join(t.TempDir(), "x"), Format(9), []float64{1}, 1); !errors.Is(err, kernel.ErrConfig) {
		t.Errorf("unknown format: %v", err)
	}
	for _, s := range []string{"csv", "binary", "bin", "CSV"} {
		if _, err := ParseFormat(s); err != nil {
			t.Errorf("ParseFormat(%q): %v", s, err)
		}
	}
	if _, err := ParseFormat("parquet"); !errors.Is(err, kernel.ErrConfig) {
		t.Errorf("ParseFormat(parquet): %v", err)
	}
}

// TestBinaryStreamingWrite: a header plus several WriteBinaryPoints calls
// (how a generator writes a big file) reads back as one data set.
func TestBinaryStreamingWrite(t *testing.T) {
	t.Parallel()
	g := kernel.GenConfig{Seed: 9, N: 1000, D: 3, Blobs: 4, Spread: 5, Sigma: 1}
	path := filepath.Join(t.TempDir(), "gen.bin")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteBinaryHeader(f, g.N, g.D); err != nil {
		t.Fatal(err)
	}
	for lo := 0; lo < g.N; lo += 300 {
		hi := min(lo+300, g.N)
		part := make([]float64, (hi-lo)*g.D)
		if err := kernel.Generate(g, lo, hi, part); err != nil {
			t.Fatal(err)
		}
		if err := WriteBinaryPoints(f, part); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	all := make([]float64, g.N*g.D)
	if err := kernel.Generate(g, 0, g.N, all); err != nil {
		t.Fatal(err)
	}
	got, _, err := ReadShard(path, 0, g.N, CSVLayout{})
	if err != nil || kmtest.SameBits(got, all) != -1 {
		t.Fatalf("streamed file differs: %v", err)
	}
}
