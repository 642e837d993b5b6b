package terasort

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
)

// chunkReader returns data in pseudo-random pieces of 0 to max bytes,
// sometimes with io.EOF on the last piece.
type chunkReader struct {
	data []byte
	rng  *rand.Rand
	max  int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := min(c.rng.IntN(c.max+1), len(p), len(c.data))
	copy(p, c.data[:n])
	c.data = c.data[n:]
	if len(c.data) == 0 && c.rng.IntN(2) == 0 {
		return n, io.EOF
	}
	return n, nil
}

// readAll drains rd, checking the block invariants, and returns the
// concatenated blocks and the final error.
func readAll(t *testing.T, rd *Reader) ([]byte, error) {
	t.Helper()
	var out []byte
	for {
		off := rd.Offset()
		if off != int64(len(out)) {
			t.Fatalf("Offset() = %d after %d bytes", off, len(out))
		}
		b, err := rd.Next()
		if err != nil {
			if len(b) != 0 {
				t.Fatalf("Next returned %d bytes with error %v", len(b), err)
			}
			return out, err
		}
		if len(b) == 0 || len(b)%RecordSize != 0 {
			t.Fatalf("Next returned a block of %d bytes", len(b))
		}
		out = append(out, b...)
	}
}

func TestReaderOddBoundaries(t *testing.T) {
	data := records(257, 3, FormatBinary)
	readers := map[string]func() io.Reader{
		"plain":     func() io.Reader { return bytes.NewReader(data) },
		"onebyte":   func() io.Reader { return iotest.OneByteReader(bytes.NewReader(data)) },
		"half":      func() io.Reader { return iotest.HalfReader(bytes.NewReader(data)) },
		"dataerr":   func() io.Reader { return iotest.DataErrReader(bytes.NewReader(data)) },
		"chunks7":   func() io.Reader { return &chunkReader{data: data, rng: rand.New(rand.NewPCG(1, 2)), max: 7} },
		"chunks333": func() io.Reader { return &chunkReader{data: data, rng: rand.New(rand.NewPCG(3, 4)), max: 333} },
	}
	for name, mk := range readers {
		for _, block := range []int{0, 1, 100, 137, 300, 1000, 25600, 1 << 20} {
			t.Run(name+"/block="+strconv.Itoa(block), func(t *testing.T) {
				rd := NewReader(mk(), "x", block)
				got, err := readAll(t, rd)
				if err != io.EOF {
					t.Fatalf("final error %v, want io.EOF", err)
				}
				if !bytes.Equal(got, data) {
					t.Fatalf("read %d bytes, differ from the %d written", len(got), len(data))
				}
				if _, err := rd.Next(); err != io.EOF {
					t.Fatalf("Next after EOF: %v", err)
				}
			})
		}
	}
}

func TestReaderTruncated(t *testing.T) {
	data := records(10, 3, FormatASCII)
	for _, cut := range []int{1, 37, 99, 101, 550, 999} {
		for _, block := range []int{100, 300, 4000} {
			rd := NewReader(&chunkReader{data: data[:cut], rng: rand.New(rand.NewPCG(uint64(cut), 5)), max: 64}, "input.dat", block)
			got, err := readAll(t, rd)
			whole := cut / RecordSize * RecordSize
			if !bytes.Equal(got, data[:whole]) {
				t.Fatalf("cut=%d block=%d: got %d bytes before the error, want the %d whole records' bytes", cut, block, len(got), whole)
			}
			var fe *FileError
			if !errors.As(err, &fe) || !errors.Is(err, ErrSize) {
				t.Fatalf("cut=%d: error %v, want a *FileError wrapping ErrSize", cut, err)
			}
			if fe.Path != "input.dat" || fe.Offset != int64(whole) {
				t.Fatalf("cut=%d: error names %s offset %d, want input.dat offset %d", cut, fe.Path, fe.Offset, whole)
			}
			if msg := err.Error(); !strings.Contains(msg, "input.dat") || !strings.Contains(msg, "offset "+strconv.Itoa(whole)) {
				t.Fatalf("message %q does not name the file and offset", msg)
			}
			if _, err2 := rd.Next(); err2 != err {
				t.Fatalf("error not sticky: %v then %v", err, err2)
			}
		}
	}
}

func TestReaderEmptyAndErrors(t *testing.T) {
	if _, err := NewReader(bytes.NewReader(nil), "e", 0).Next(); err != io.EOF {
		t.Fatalf("empty stream: %v, want io.EOF", err)
	}
	boom := errors.New("disk on fire")
	_, err := NewReader(iotest.ErrReader(boom), "f", 0).Next()
	var fe *FileError
	if !errors.As(err, &fe) || !errors.Is(err, boom) || fe.Path != "f" {
		t.Fatalf("read error: %v", err)
	}
	_, err = NewReader(zeroReader{}, "z", 0).Next()
	if !errors.Is(err, io.ErrNoProgress) {
		t.Fatalf("reader that never progresses: %v", err)
	}
	// Reset reuses the buffer and starts over.
	rd := NewReader(bytes.NewReader(records(3, 1, FormatASCII)), "a", 100)
	if _, err := readAll(t, rd); err != io.EOF {
		t.Fatal(err)
	}
	want := records(5, 2, FormatASCII)
	rd.Reset(bytes.NewReader(want), "b")
	if got, err := readAll(t, rd); err != io.EOF || !bytes.Equal(got, want) {
		t.Fatalf("after Reset: %v", err)
	}
}

type zeroReader struct{}

func (zeroReader) Read([]byte) (int, error) { return 0, nil }

func FuzzReader(f *testing.F) {
	f.Add([]byte("hello"), uint16(100), uint8(3))
	f.Add(make([]byte, 250), uint16(200), uint8(90))
	f.Fuzz(func(t *testing.T, data []byte, block uint16, max uint8) {
		rd := NewReader(&chunkReader{data: data, rng: rand.New(rand.NewPCG(uint64(block), uint64(max))), max: int(max) + 1}, "fz", int(block))
		got, err := readAll(t, rd)
		whole := len(data) / RecordSize * RecordSize
		if !bytes.Equal(got, data[:whole]) {
			t.Fatalf("got %d bytes, want %d", len(got), whole)
		}
		if whole == len(data) {
			if err != io.EOF {
				t.Fatalf("error %v for a well-formed stream", err)
			}
		} else if !errors.Is(err, ErrSize) {
			t.Fatalf("error %v for a stream of %d bytes", err, len(data))
		}
	})
}
