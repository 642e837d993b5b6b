package terasort

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestSortInMemoryMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	inputs := map[string][]byte{
		"empty":  nil,
		"one":    records(1, 1, FormatASCII),
		"small":  records(333, 2, FormatBinary),
		"ascii":  records(30000, 3, FormatASCII),
		"binary": records(30000, 4, FormatBinary),
	}
	// Every key shares its first two bytes: one radix bucket holds all.
	same2 := records(20000, 5, FormatBinary)
	for i := range NumRecords(same2) {
		Record(same2, i)[0], Record(same2, i)[1] = 0x42, 0x42
	}
	inputs["one-bucket"] = same2
	// Few distinct keys: stability decides the order of equal keys.
	dups := records(20000, 6, FormatBinary)
	for i := range NumRecords(dups) {
		copy(Record(dups, i), fmt.Appendf(nil, "%010d", rng.IntN(7)))
	}
	inputs["duplicates"] = dups
	// Keys that differ only in bytes 8 and 9.
	tail := records(10000, 7, FormatBinary)
	for i := range NumRecords(tail) {
		copy(Record(tail, i), "ABCDEFGH")
	}
	inputs["tail-bytes"] = tail
	inputs["presorted"] = sorted(records(10000, 8, FormatASCII))
	rev := sorted(records(10000, 9, FormatASCII))
	for i, j := 0, NumRecords(rev)-1; i < j; i, j = i+1, j-1 {
		swap(rev, i, j)
	}
	inputs["reversed"] = rev

	for name, in := range inputs {
		want := sorted(in) // stable reference
		for _, cfg := range []SortConfig{{Threads: 1}, {Threads: 2, HugePages: true}, {Threads: 3}, {Threads: 7, HugePages: true}} {
			src := bytes.Clone(in)
			dst := make([]byte, len(src))
			if err := SortInMemory(dst, src, cfg); err != nil {
				t.Fatalf("%s %+v: %v", name, cfg, err)
			}
			if !bytes.Equal(src, in) {
				t.Fatalf("%s %+v: the source was modified", name, cfg)
			}
			if !bytes.Equal(dst, want) {
				t.Fatalf("%s %+v: output differs from the stable reference sort", name, cfg)
			}
		}
	}
}

func TestSortInMemoryHugeBuffers(t *testing.T) {
	in := records(60000, 10, FormatBinary) // 6 MB: above the huge-page threshold
	src, err := AllocBuffer(len(in), true)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := AllocBuffer(len(in), true)
	if err != nil {
		t.Fatal(err)
	}
	copy(src.Bytes(), in)
	if err := SortInMemory(dst.Bytes(), src.Bytes(), DefaultSortConfig()); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(dst.Bytes(), sorted(in)) {
		t.Fatal("sorted output differs from the reference")
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil || dst.Bytes() != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestSortInMemoryErrors(t *testing.T) {
	buf := make([]byte, 1000)
	if err := SortInMemory(buf[:500], buf[500:599], DefaultSortConfig()); !errors.Is(err, ErrSize) {
		t.Fatalf("partial record: %v", err)
	}
	if err := SortInMemory(buf[:400], buf[500:], DefaultSortConfig()); !errors.Is(err, ErrSize) {
		t.Fatalf("length mismatch: %v", err)
	}
	if err := SortInMemory(buf[:500], buf[400:900], DefaultSortConfig()); !errors.Is(err, ErrConfig) {
		t.Fatalf("overlap: %v", err)
	}
	if err := SortInMemory(buf[:500], buf[500:], SortConfig{Threads: 0}); !errors.Is(err, ErrConfig) {
		t.Fatalf("zero threads: %v", err)
	}
}

// msdSort is a stable sort by the 10-byte key: compare with
// slices.SortStableFunc on patterns that hurt naive sorts, long common
// prefixes, and keys that differ only in bytes 8 and 9 or not at all.
func TestMSDSort(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	gens := map[string]func(i, n int) (hi uint64, tail uint16){
		"random":   func(i, n int) (uint64, uint16) { return rng.Uint64(), uint16(rng.Uint32()) },
		"sorted":   func(i, n int) (uint64, uint16) { return uint64(i), 0 },
		"reversed": func(i, n int) (uint64, uint16) { return uint64(n - i), 0 },
		"organ":    func(i, n int) (uint64, uint16) { return uint64(min(i, n-i)) << 40, 0 },
		"few":      func(i, n int) (uint64, uint16) { return uint64(rng.IntN(3)) << 61, uint16(rng.IntN(2)) },
		"tail":     func(i, n int) (uint64, uint16) { return 42, uint16(rng.IntN(1000)) },
		"equal":    func(i, n int) (uint64, uint16) { return 7, 7 },
		"bytewise": func(i, n int) (uint64, uint16) { return uint64(rng.IntN(4)) << uint(8*rng.IntN(8)), 0 },
	}
	for name, g := range gens {
		for _, n := range []int{0, 1, 2, 3, 24, 25, 26, 100, 1000, 5000} {
			a := make([]entry, n)
			for i := range a {
				hi, tail := g(i, n)
				a[i] = entry{hi: hi, lo: uint64(tail)<<48 | uint64(i)} // indexes in input order, as SortInMemory makes them
			}
			want := slices.Clone(a)
			slices.SortStableFunc(want, func(x, y entry) int {
				if c := cmp.Compare(x.hi, y.hi); c != 0 {
					return c
				}
				return cmp.Compare(x.lo>>48, y.lo>>48)
			})
			msdSort(a, make([]entry, n), 0)
			if !slices.Equal(a, want) {
				t.Fatalf("%s n=%d: msdSort differs from the stable reference", name, n)
			}
		}
	}
}

func TestCompareKeys(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	keys := randKeys(rng, 300, 3, KeySize)
	for _, a := range keys {
		for _, b := range keys[:30] {
			if got, want := CompareKeys(a, b), bytes.Compare(a, b); got != want {
				t.Fatalf("CompareKeys(%x, %x) = %d, want %d", a, b, got, want)
			}
		}
	}
}

func BenchmarkSortInMemory(b *testing.B) {
	for _, n := range []int{100000, 1000000} {
		in := records(n, 1, FormatBinary)
		for _, huge := range []bool{false, true} {
			b.Run(fmt.Sprintf("records=%d/huge=%v", n, huge), func(b *testing.B) {
				src, _ := AllocBuffer(len(in), huge)
				defer src.Close()
				dst, _ := AllocBuffer(len(in), huge)
				defer dst.Close()
				copy(src.Bytes(), in)
				cfg := SortConfig{Threads: 2, HugePages: huge}
				b.SetBytes(int64(len(in)))
				for b.Loop() {
					if err := SortInMemory(dst.Bytes(), src.Bytes(), cfg); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// A Sorter reuses its scratch across calls of growing and shrinking size,
// and works again after Close.
func TestSorterReuse(t *testing.T) {
	for _, huge := range []bool{false, true} {
		s, err := NewSorter(SortConfig{Threads: 2, HugePages: huge})
		if err != nil {
			t.Fatal(err)
		}
		for i, n := range []int{5000, 200000, 100, 200000, 0, 7} {
			in := records(n, uint64(i), FormatBinary)
			dst := make([]byte, len(in))
			if err := s.Sort(dst, in); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(dst, sorted(in)) {
				t.Fatalf("huge=%v call %d (n=%d): wrong output", huge, i, n)
			}
			if i == 3 {
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
			}
		}
		s.Close()
	}
	if _, err := NewSorter(SortConfig{}); !errors.Is(err, ErrConfig) {
		t.Fatalf("zero config: %v", err)
	}
}
