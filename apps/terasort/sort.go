package terasort

import (
	"encoding/binary"
	"runtime"
	"sync"
	"unsafe"
)

// MaxSortRecords is the most records SortInMemory sorts in one call (the
// record index is kept in 40 bits of the sort entry).
const MaxSortRecords = 1 << 40

// SortConfig tunes SortInMemory.
type SortConfig struct {
	// Threads is the number of goroutines (≥ 1, at most 1024). The sort
	// figures of docs/design.md §12.4 are for 2 on a 2-vCPU machine.
	Threads int
	// HugePages maps the 16-byte-per-record scratch space with
	// MADV_HUGEPAGE (see AllocBuffer). Callers may allocate src and dst the
	// same way: the random gather from src dominates a warm sort, and huge
	// pages cut its TLB misses. Whether it pays depends on the machine: on
	// a VM whose host backs guest memory with small pages, first-touch
	// faults of fresh huge pages can cost more than the TLB saves; compare
	// with `terasort memsort --huge=false`.
	HugePages bool
}

// DefaultSortConfig returns one thread per CPU (GOMAXPROCS) and no huge
// pages: on the 2-vCPU VMs this was measured on (bench.sh), faulting in
// fresh huge pages made a one-shot 1 GiB sort 2-3 times slower, and once
// the memory was faulted in, huge pages saved only a few percent of CPU.
func DefaultSortConfig() SortConfig {
	return SortConfig{Threads: runtime.GOMAXPROCS(0), HugePages: false}
}

// Validate checks the fields; it never mutates c.
func (c SortConfig) Validate() error {
	if c.Threads < 1 || c.Threads > 1024 {
		return configErr("Threads = %d: want 1 to 1024", c.Threads)
	}
	return nil
}

// entry is one record's sort key and position: hi holds key bytes 0-7 and
// lo holds key bytes 8-9 in its top 16 bits and the record index in its low
// 40 bits, so comparing (hi, lo) orders by key and then by input position:
// the sort is stable, and the output is a function of the input only.
type entry struct{ hi, lo uint64 }

const idxMask = 1<<40 - 1

func entryLess(a, b entry) bool { return a.hi < b.hi || (a.hi == b.hi && a.lo < b.lo) }

// radixBits is the width of the first (most significant) key digit the
// entries are distributed by before each bucket is sorted on its own.
const radixBits = 16

// smallSort is the record count below which SortInMemory skips the radix
// pass and sorts the entries directly.
const smallSort = 1 << 12

// SortInMemory writes the records of src to dst in key order (stable: equal
// keys keep their input order). It is the single-process baseline: count
// the first two key bytes of every record, then write each record's
// compact 16-byte entry (10-byte key and index) straight into its bucket
// (both in parallel over record ranges, stable); sort each bucket by a
// most-significant-byte-first radix sort and gather the 100-byte records
// from src into dst in that order (in parallel over bucket ranges). src is
// not modified. len(dst) must equal len(src), a multiple of RecordSize, and
// the two must not overlap (ErrSize or ErrConfig otherwise). Scratch space
// is 16 bytes per record; a Sorter keeps it between calls.
func SortInMemory(dst, src []byte, cfg SortConfig) error {
	s, err := NewSorter(cfg)
	if err != nil {
		return err
	}
	defer s.Close()
	return s.Sort(dst, src)
}

// Sorter is SortInMemory with its scratch space (16 bytes per record,
// plus a small buffer per thread) kept between calls, so that sorting many
// runs, or the same buffers again in a benchmark, does not map and fault in
// fresh memory each time. A Sorter is used by one goroutine at a time;
// Close releases the scratch and is idempotent.
type Sorter struct {
	cfg     SortConfig
	buf     *Buffer // mapped entries, or nil
	entries []entry
	tmp     [][]entry // per thread: scratch for msdSort
}

// NewSorter returns a Sorter; it allocates nothing until the first Sort.
func NewSorter(cfg SortConfig) (*Sorter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Sorter{cfg: cfg, tmp: make([][]entry, cfg.Threads)}, nil
}

// Close releases the scratch space. The Sorter may be used again after it
// (it allocates anew).
func (s *Sorter) Close() error {
	s.entries = nil
	clear(s.tmp)
	if s.buf != nil {
		err := s.buf.Close()
		s.buf = nil
		return err
	}
	return nil
}

// entriesFor returns n entries, reusing the last ones if there are enough.
func (s *Sorter) entriesFor(n int) ([]entry, error) {
	if cap(s.entries) >= n {
		return s.entries[:n], nil
	}
	if err := s.Close(); err != nil {
		return nil, err
	}
	size := n * int(unsafe.Sizeof(entry{}))
	if s.cfg.HugePages && size >= hugeThreshold {
		buf, err := AllocBuffer(size, true)
		if err != nil {
			return nil, err
		}
		if buf.Huge() { // mapped: page aligned, so the entry view is aligned
			s.buf, s.entries = buf, entriesOf(buf.Bytes())
			return s.entries[:n], nil
		}
		buf.Close()
	}
	s.entries = make([]entry, n)
	return s.entries, nil
}

// tmpFor returns thread t's scratch of at least n entries.
func (s *Sorter) tmpFor(t, n int) []entry {
	if cap(s.tmp[t]) < n {
		s.tmp[t] = make([]entry, max(n, 1024))
	}
	return s.tmp[t][:n]
}

// Sort is SortInMemory with this Sorter's configuration and scratch.
func (s *Sorter) Sort(dst, src []byte) error {
	if len(src)%RecordSize != 0 {
		return sizeErr("SortInMemory: source of %d bytes is not a multiple of %d", len(src), RecordSize)
	}
	if len(dst) != len(src) {
		return sizeErr("SortInMemory: destination has %d bytes, source %d: they must be equal", len(dst), len(src))
	}
	if overlap(dst, src) {
		return configErr("SortInMemory: destination and source overlap: use two buffers")
	}
	n := len(src) / RecordSize
	if int64(n) > MaxSortRecords {
		return ErrTooLarge
	}
	if n == 0 {
		return nil
	}
	es, err := s.entriesFor(n)
	if err != nil {
		return err
	}
	if n < smallSort {
		extract(es, src)
		msdSort(es, s.tmpFor(0, n), 0)
		gather(dst, src, es, 0)
		return nil
	}
	threads := s.cfg.Threads
	counts := distribute(es, src, threads)
	// Split the buckets into threads contiguous groups of about n/threads
	// entries; each goroutine sorts its buckets and gathers their records.
	var wg sync.WaitGroup
	bucket, start := 0, 0
	for t := range threads {
		end, biggest := start, 0
		target := n * (t + 1) / threads
		firstBucket := bucket
		for bucket < len(counts) && (end < target || t == threads-1) {
			end += counts[bucket]
			biggest = max(biggest, counts[bucket])
			bucket++
		}
		lo, hi, bk := start, end, firstBucket
		tmp := s.tmpFor(t, biggest)
		wg.Go(func() {
			off := lo
			for i := bk; off < hi; i++ {
				c := counts[i]
				msdSort(es[off:off+c], tmp[:c], radixBits/8)
				off += c
			}
			gather(dst, src, es[lo:hi], lo)
		})
		start = end
	}
	wg.Wait()
	return nil
}

// extract fills a with the entries of src's records.
func extract(a []entry, src []byte) {
	for i := range a {
		a[i] = entryOf(src, i)
	}
}

// entryOf returns the entry of record i of src.
func entryOf(src []byte, i int) entry {
	rec := src[i*RecordSize : i*RecordSize+KeySize]
	return entry{
		hi: binary.BigEndian.Uint64(rec),
		lo: uint64(binary.BigEndian.Uint16(rec[8:]))<<48 | uint64(i),
	}
}

// distribute writes the entries of src's records to b grouped by the top
// radixBits bits of their keys, in record order within each group, and
// returns the group sizes. Each goroutine counts the keys of its own
// contiguous range of records, then builds and scatters their entries.
func distribute(b []entry, src []byte, threads int) []int {
	const buckets = 1 << radixBits
	n := len(b)
	hist := make([][]int, threads)
	parallelIdx(n, threads, func(t, lo, hi int) {
		h := make([]int, buckets)
		for i := lo; i < hi; i++ {
			h[binary.BigEndian.Uint16(src[i*RecordSize:])>>(16-radixBits)]++
		}
		hist[t] = h
	})
	counts := make([]int, buckets)
	sum := 0
	for k := range buckets {
		for t := range threads {
			c := hist[t][k]
			hist[t][k] = sum // becomes thread t's next slot in bucket k
			sum += c
			counts[k] += c
		}
	}
	parallelIdx(n, threads, func(t, lo, hi int) {
		next := hist[t]
		for i := lo; i < hi; i++ {
			e := entryOf(src, i)
			k := e.hi >> (64 - radixBits)
			b[next[k]] = e
			next[k]++
		}
	})
	return counts
}

// gather copies the records named by es from src to dst, starting at output
// record first.
func gather(dst, src []byte, es []entry, first int) {
	d := dst[first*RecordSize:]
	for k, e := range es {
		s := int(e.lo&idxMask) * RecordSize
		*(*[RecordSize]byte)(d[k*RecordSize:]) = *(*[RecordSize]byte)(src[s:])
	}
}

// parallelIdx runs f over threads contiguous ranges of [0, n), passing
// the range's number t, and waits for all.
func parallelIdx(n, threads int, f func(t, lo, hi int)) {
	if threads <= 1 {
		f(0, 0, n)
		return
	}
	var wg sync.WaitGroup
	for t := range threads {
		lo, hi := n*t/threads, n*(t+1)/threads
		wg.Go(func() { f(t, lo, hi) })
	}
	wg.Wait()
}

// insertionMax is the run length from which msdSort distributes by the
// next key byte instead of sorting by insertion.
const insertionMax = 24

// keyByte returns byte k (0..9) of e's key.
func keyByte(e entry, k int) byte {
	if k < 8 {
		return byte(e.hi >> (56 - 8*uint(k)))
	}
	return byte(e.lo >> (56 - 8*uint(k-8)))
}

// msdSort sorts x stably by the key bytes from k on (the bytes before k
// are equal across x), using tmp (len(tmp) ≥ len(x)) as scratch: a
// counting sort on byte k, then the same on each group, down to insertion
// sort for short runs. Counting sorts have no data-dependent branches, which
// is what makes this faster than a comparison sort on random keys. Stable:
// entries with equal keys keep their order (which is index order, as the
// entries are extracted in index order and distributed stably).
func msdSort(x, tmp []entry, k int) {
	for {
		if len(x) <= insertionMax {
			insertionSort(x)
			return
		}
		if k == KeySize {
			return // all keys equal: already in input order
		}
		var counts [256]int
		for _, e := range x {
			counts[keyByte(e, k)]++
		}
		if counts[keyByte(x[0], k)] == len(x) { // one group: next byte
			k++
			continue
		}
		var next [256]int
		sum := 0
		for d, c := range counts {
			next[d] = sum
			sum += c
		}
		for _, e := range x {
			d := keyByte(e, k)
			tmp[next[d]] = e
			next[d]++
		}
		copy(x, tmp[:len(x)])
		start := 0
		for _, c := range counts {
			if c > 1 {
				msdSort(x[start:start+c], tmp[start:start+c], k+1)
			}
			start += c
		}
		return
	}
}

// insertionSort sorts a short run by (hi, lo): by key, then by index.
func insertionSort(a []entry) {
	for i := 1; i < len(a); i++ {
		e := a[i]
		j := i
		for ; j > 0 && entryLess(e, a[j-1]); j-- {
			a[j] = a[j-1]
		}
		a[j] = e
	}
}
