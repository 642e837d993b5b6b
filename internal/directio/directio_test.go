package directio

import (
	"bytes"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// dirs are the directories the tests write in: the test's own (a disk
// file system, where O_DIRECT is usually taken) and /dev/shm (tmpfs, where
// it may be refused and the fallback runs).
func dirs(t *testing.T) []string {
	d := []string{t.TempDir()}
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		shm, err := os.MkdirTemp("/dev/shm", "directio-test-")
		if err == nil {
			t.Cleanup(func() { os.RemoveAll(shm) })
			d = append(d, shm)
		}
	}
	return d
}

func TestWriteThenReadRanges(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, dir := range dirs(t) {
		for _, size := range []int{0, 1, Align - 1, Align, 3*Align + 17, 1 << 20, 1<<20 + 5} {
			data := make([]byte, size)
			for i := range data {
				data[i] = byte(rng.IntN(256))
			}
			path := filepath.Join(dir, "f")
			f, err := os.Create(path)
			if err != nil {
				t.Fatal(err)
			}
			w := NewWriter(f, true)
			b := NewBuffer(w, 3*Align)
			// Uneven pieces, so that blocks fill across calls.
			for off := 0; off < size; {
				n := min(size-off, 1+rng.IntN(5000))
				if k, err := b.Write(data[off : off+n]); err != nil || k != n {
					t.Fatalf("%s size %d: write %d: %d, %v", dir, size, n, k, err)
				}
				off += n
			}
			if err := b.Flush(); err != nil {
				t.Fatal(err)
			}
			if w.Written() != int64(size) {
				t.Fatalf("written %d, want %d", w.Written(), size)
			}
			f.Close()
			got, err := os.ReadFile(path)
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("%s size %d (direct %v): file differs (%v)", dir, size, w.Direct(), err)
			}
			for _, direct := range []bool{false, true} {
				for range 20 {
					lo := int64(rng.IntN(size + 1))
					hi := lo + int64(rng.IntN(size-int(lo)+1))
					f, err := os.Open(path)
					if err != nil {
						t.Fatal(err)
					}
					r := NewReader(f, lo, hi, 2*Align, direct)
					got, err := io.ReadAll(r)
					f.Close()
					if err != nil || !bytes.Equal(got, data[lo:hi]) {
						t.Fatalf("%s size %d: read [%d,%d) direct %v: %d bytes, %v", dir, size, lo, hi, direct, len(got), err)
					}
				}
			}
		}
	}
}

func TestReaderShortFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, make([]byte, 3*Align), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, direct := range []bool{false, true} {
		f, _ := os.Open(path)
		_, err := io.ReadAll(NewReader(f, 10, 5*Align, Align, direct))
		f.Close()
		if err != io.ErrUnexpectedEOF {
			t.Fatalf("direct %v: reading past the end: %v, want io.ErrUnexpectedEOF", direct, err)
		}
	}
}

func TestAllocAligned(t *testing.T) {
	for _, n := range []int{1, Align, 5*Align + 3} {
		b := Alloc(n)
		if !aligned(b) || len(b) != RoundUp(n) {
			t.Fatalf("Alloc(%d): len %d aligned %v", n, len(b), aligned(b))
		}
	}
}

// Sum sees every byte written after the SumNow that skips a header once,
// in order, whether it came by Write or Append, and none of what follows
// the SumNow before Sum is cleared.
func TestBufferSum(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	path := filepath.Join(t.TempDir(), "f")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	b := NewBuffer(NewWriter(f, true), Align)
	var seen, want []byte
	b.Write([]byte("header"))
	b.SumNow()
	b.Sum = func(p []byte) { seen = append(seen, p...) }
	for range 3000 {
		p := make([]byte, rng.IntN(300))
		for i := range p {
			p[i] = byte(rng.IntN(256))
		}
		want = append(want, p...)
		if dst := b.Append(len(p)); dst != nil {
			copy(dst, p)
		} else if _, err := b.Write(p); err != nil {
			t.Fatal(err)
		}
	}
	b.SumNow()
	b.Sum = nil
	b.Write([]byte("trailer"))
	if err := b.Flush(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if !bytes.Equal(seen, want) {
		t.Fatalf("Sum saw %d bytes, want the %d written between header and trailer", len(seen), len(want))
	}
	got, _ := os.ReadFile(path)
	if !bytes.Equal(got, append(append([]byte("header"), want...), "trailer"...)) {
		t.Fatal("file differs from what was written")
	}
}
