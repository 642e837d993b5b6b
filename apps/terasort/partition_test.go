package terasort

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
)

// naivePartition is the reference: the number of splitters ≤ key.
func naivePartition(splitters [][]byte, key []byte) int {
	n := 0
	for _, s := range splitters {
		if bytes.Compare(s, key) <= 0 {
			n++
		}
	}
	return n
}

// randKeys returns n keys of KeySize bytes whose bytes are drawn from an
// alphabet of size alpha (small alphabets give many duplicates).
func randKeys(rng *rand.Rand, n, alpha, keyLen int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		k := make([]byte, keyLen)
		for j := range k {
			k[j] = byte(rng.IntN(alpha))
		}
		out[i] = k
	}
	return out
}

func TestSplittersPartitionProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(2024, 1))
	cases := []struct {
		name             string
		n, alpha, keyLen int
		parts            []int
	}{
		{"random", 1000, 256, KeySize, []int{2, 3, 10, 64, 999, 1000, 1001, 5000}},
		{"duplicates", 1000, 3, 2, []int{2, 4, 9, 50}}, // 9 distinct keys at most
		{"one-key", 200, 1, KeySize, []int{2, 7, 300}},
		{"tiny-sample", 3, 256, KeySize, []int{2, 3, 10}},
		{"short-keys", 500, 256, 1, []int{5, 300}},
	}
	for _, tc := range cases {
		for _, parts := range tc.parts {
			sample := randKeys(rng, tc.n, tc.alpha, tc.keyLen)
			orig := make([][]byte, len(sample))
			for i, k := range sample {
				orig[i] = bytes.Clone(k)
			}
			spl := Splitters(sample, parts)
			if len(spl) != parts-1 {
				t.Fatalf("%s parts=%d: %d splitters", tc.name, parts, len(spl))
			}
			for i := range sample { // sample untouched, splitters not aliased
				if !bytes.Equal(sample[i], orig[i]) {
					t.Fatalf("%s: Splitters reordered or changed the sample", tc.name)
				}
			}
			if len(spl) > 0 {
				spl[0][0] ^= 0xff
				if slices.ContainsFunc(sample, func(k []byte) bool { return &k[0] == &spl[0][0] }) {
					t.Fatalf("%s: splitter aliases the sample", tc.name)
				}
				spl[0][0] ^= 0xff
			}
			p, err := NewPartitioner(spl)
			if err != nil {
				t.Fatalf("%s parts=%d: %v", tc.name, parts, err)
			}
			if p.Parts() != parts {
				t.Fatalf("Parts() = %d, want %d", p.Parts(), parts)
			}
			// Against the reference, for sample keys and fresh keys.
			probes := append(slices.Clone(sample), randKeys(rng, 500, tc.alpha, tc.keyLen)...)
			probes = append(probes, []byte{}, bytes.Repeat([]byte{0xff}, 11))
			for _, k := range probes {
				got, want := p.Partition(k), naivePartition(spl, k)
				if got != want || got < 0 || got >= parts {
					t.Fatalf("%s parts=%d: Partition(%x) = %d, reference %d", tc.name, parts, k, got, want)
				}
			}
			// Monotone: sorted keys get non-decreasing partitions.
			sortedProbes := slices.Clone(probes)
			slices.SortFunc(sortedProbes, bytes.Compare)
			last := 0
			for _, k := range sortedProbes {
				q := p.Partition(k)
				if q < last {
					t.Fatalf("%s parts=%d: partition went back from %d to %d at key %x", tc.name, parts, last, q, k)
				}
				last = q
			}
			// Distinct sample keys: the sample splits exactly at ranks j*n/parts.
			ss := slices.Clone(sample)
			slices.SortFunc(ss, bytes.Compare)
			if len(slices.CompactFunc(slices.Clone(ss), func(a, b []byte) bool { return bytes.Equal(a, b) })) == len(ss) {
				n := len(ss)
				for r, k := range ss {
					// the partition j with j*n/parts ≤ r < (j+1)*n/parts
					want := 0
					for want+1 < parts && (want+1)*n/parts <= r {
						want++
					}
					if got := p.Partition(k); got != want {
						t.Fatalf("%s parts=%d: sample rank %d went to %d, want %d", tc.name, parts, r, got, want)
					}
				}
			}
		}
	}
}

func TestSplittersDegenerate(t *testing.T) {
	if s := Splitters(nil, 5); s != nil {
		t.Fatalf("empty sample: %v", s)
	}
	if s := Splitters([][]byte{{1}}, 1); s != nil {
		t.Fatalf("one part: %v", s)
	}
	p, err := NewPartitioner(nil)
	if err != nil || p.Parts() != 1 || p.Partition([]byte("anything")) != 0 {
		t.Fatalf("no splitters: %v %v", p, err)
	}
	if _, err := NewPartitioner([][]byte{{2}, {1}}); !errors.Is(err, ErrSplitters) {
		t.Fatalf("unsorted splitters: %v", err)
	}
	in := [][]byte{{1}, {3}}
	p, _ = NewPartitioner(in)
	in[0][0] = 9 // the partitioner holds copies
	if got := p.Splitters(); got[0][0] != 1 {
		t.Fatalf("partitioner aliases its input")
	}
}

func TestSampleKeysAndFiles(t *testing.T) {
	recs := records(1000, 3, FormatBinary)
	if got := SampleKeys(recs, 0); got != nil {
		t.Fatalf("n=0: %d keys", len(got))
	}
	all := SampleKeys(recs, 5000)
	if len(all) != 1000 || !bytes.Equal(all[999], Key(Record(recs, 999))) {
		t.Fatalf("n > records: %d keys", len(all))
	}
	want := SampleKeys(recs, 37)
	if len(want) != 37 || !bytes.Equal(want[1], Key(Record(recs, 27))) {
		t.Fatalf("SampleKeys spacing wrong")
	}
	// Files: the same picks over the concatenation, whatever the cuts.
	for _, cuts := range [][]int{{1000}, {0, 1000}, {1, 998, 1}, {333, 333, 334}, {500, 0, 500}} {
		var chunks [][]byte
		at := 0
		for _, c := range cuts {
			chunks = append(chunks, recs[at*RecordSize:(at+c)*RecordSize])
			at += c
		}
		paths := writeParts(t, t.TempDir(), chunks...)
		for _, n := range []int{1, 37, 1000, 2000} {
			got, err := SampleFiles(paths, n)
			if err != nil {
				t.Fatal(err)
			}
			ref := SampleKeys(recs, n)
			if len(got) != len(ref) {
				t.Fatalf("cuts %v n=%d: %d keys, want %d", cuts, n, len(got), len(ref))
			}
			for i := range ref {
				if !bytes.Equal(got[i], ref[i]) {
					t.Fatalf("cuts %v n=%d: key %d differs", cuts, n, i)
				}
			}
		}
	}
}

// End to end: sample, split, partition every record, sort each partition;
// the concatenation validates and has the input's checksum.
func TestRangePartitionSortsGlobally(t *testing.T) {
	in := records(20000, 12, FormatASCII)
	p, err := NewPartitioner(Splitters(SampleKeys(in, 500), 5))
	if err != nil {
		t.Fatal(err)
	}
	buckets := make([][]byte, p.Parts())
	for i := range NumRecords(in) {
		r := Record(in, i)
		q := p.Partition(Key(r))
		buckets[q] = append(buckets[q], r...)
	}
	for q, b := range buckets {
		out := make([]byte, len(b))
		if err := SortInMemory(out, b, SortConfig{Threads: 2}); err != nil {
			t.Fatal(err)
		}
		buckets[q] = out
		if n := NumRecords(b); n < 20000/5/2 || n > 20000/5*2 {
			t.Errorf("partition %d got %d of 20000 records: badly balanced", q, n)
		}
	}
	paths := writeParts(t, t.TempDir(), buckets...)
	rep, err := ValidateFiles(context.Background(), paths, DefaultScanConfig())
	if err != nil || rep.Summary != SumRecords(in) {
		t.Fatalf("validate: %v, summary %v want %v", err, rep.Summary, SumRecords(in))
	}
}

// Partition's prefix search agrees with a plain binary search on whole
// keys, for keys that share 8-byte prefixes with the splitters, keys
// shorter than 8 bytes, and keys equal to a splitter.
func TestPartitionPrefixSearch(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	key := func() []byte {
		k := make([]byte, r.IntN(12))
		for i := range k {
			k[i] = byte(r.IntN(3)) // few values: many shared prefixes
		}
		return k
	}
	for round := range 200 {
		sp := make([][]byte, r.IntN(9))
		for i := range sp {
			sp[i] = key()
		}
		slices.SortFunc(sp, bytes.Compare)
		p, err := NewPartitioner(sp)
		if err != nil {
			t.Fatal(err)
		}
		for range 200 {
			k := key()
			if len(sp) > 0 && r.IntN(4) == 0 {
				k = bytes.Clone(sp[r.IntN(len(sp))])
			}
			want := sort.Search(len(sp), func(i int) bool { return bytes.Compare(sp[i], k) > 0 })
			if got := p.Partition(k); got != want {
				t.Fatalf("round %d: splitters %x: Partition(%x) = %d, want %d", round, sp, k, got, want)
			}
		}
	}
}
