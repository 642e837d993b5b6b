package terasort

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math/bits"
	"os"
	"path/filepath"
	"runtime"
	"sync"
)

// MaxParts is the largest number of part files: names stay part-00000 to
// part-99999, so name order and part order agree.
const MaxParts = 100000

// PartName returns the file name of part p: "part-" and p in 5 digits.
func PartName(p int) string { return fmt.Sprintf("part-%05d", p) }

// PartRange returns the records [lo, hi) of part p when total records are
// split into parts parts: the first total%parts parts get one record more.
func PartRange(total int64, parts, p int) (lo, hi int64) {
	q, r := total/int64(parts), total%int64(parts)
	pp := int64(p)
	lo = pp*q + min(pp, r)
	hi = lo + q
	if pp < r {
		hi++
	}
	return lo, hi
}

// GenConfig says what Generate and GenerateFile write.
type GenConfig struct {
	// Records is the total number of records (≥ 0). Record i (0-based) is
	// a function of Seed, Format and i only.
	Records int64
	// Parts is the number of part files Generate writes (1..MaxParts);
	// part p holds the records PartRange(Records, Parts, p). GenerateFile
	// ignores it.
	Parts int
	// Seed selects the data set: the same seed gives the same records.
	Seed uint64
	// Format is the record layout: FormatASCII (gensort -a) or FormatBinary.
	Format Format
	// Workers is the number of goroutines generating and writing at once
	// (≥ 1). Parts are independent, so this scales to the CPU count.
	Workers int
	// BlockRecords is the number of records generated per write (≥ 1);
	// each worker holds one block, BlockRecords*100 bytes.
	BlockRecords int
}

// DefaultGenConfig returns one part per CPU, ASCII records, seed 1, one
// worker per CPU and 1 MB blocks. Records is 0: set it.
func DefaultGenConfig() GenConfig {
	return GenConfig{
		Parts:        runtime.NumCPU(),
		Seed:         1,
		Format:       FormatASCII,
		Workers:      runtime.GOMAXPROCS(0),
		BlockRecords: 10000,
	}
}

// Validate checks the fields and their relations; it never mutates c.
func (c GenConfig) Validate() error {
	switch {
	case c.Records < 0:
		return configErr("Records = %d: want 0 or more", c.Records)
	case c.Parts < 1 || c.Parts > MaxParts:
		return configErr("Parts = %d: want 1 to %d", c.Parts, MaxParts)
	case c.Format != FormatASCII && c.Format != FormatBinary:
		return configErr("Format = %v: want ascii or binary", c.Format)
	case c.Workers < 1:
		return configErr("Workers = %d: want at least 1", c.Workers)
	case c.BlockRecords < 1 || c.BlockRecords > 1<<24:
		return configErr("BlockRecords = %d: want 1 to %d", c.BlockRecords, 1<<24)
	}
	return nil
}

// generator holds the per-seed keys; record i is a pure function of them
// and i (counter-based), so any range of records can be made on its own.
type generator struct {
	k0, k1 uint64
	format Format
}

func newGenerator(seed uint64, f Format) generator {
	return generator{k0: mix64(seed ^ 0x6a09e667f3bcc908), k1: mix64(seed + 0xbb67ae8584caa73b), format: f}
}

// mix64 is the splitmix64 finalizer: a bijection on uint64 with good
// avalanche, so distinct counters give distinct, well-mixed outputs.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

const hexDigits = "0123456789ABCDEF"

// record writes record i into dst[:100].
func (g generator) record(dst []byte, i uint64) {
	dst = dst[:RecordSize:RecordSize]
	h0 := mix64(g.k0 + i*0x9e3779b97f4a7c15)
	h1 := mix64(g.k1 + i*0xd1b54a32d192ed03)
	// Row id: i as a 128-bit number in 32 upper-case hex digits.
	for j := 12; j < 28; j++ {
		dst[j] = '0'
	}
	for j := 0; j < 16; j++ {
		dst[43-j] = hexDigits[(i>>(4*j))&0xF]
	}
	if g.format == FormatBinary {
		binary.BigEndian.PutUint64(dst[0:8], h0)
		dst[8], dst[9] = byte(h1>>56), byte(h1>>48)
		dst[10], dst[11] = 0x00, 0x11
		dst[44], dst[45], dst[46], dst[47] = 0x88, 0x99, 0xAA, 0xBB
		for j := 0; j < 12; j++ { // 12 groups of 4 equal hex digits from h1's low 48 bits
			d := hexDigits[(h1>>(44-4*j))&0xF]
			dst[48+4*j], dst[49+4*j], dst[50+4*j], dst[51+4*j] = d, d, d, d
		}
		dst[96], dst[97], dst[98], dst[99] = 0xCC, 0xDD, 0xEE, 0xFF
		return
	}
	// ASCII: 10 key characters from ' ' to '~' (95 values), five from each
	// of h0 and h1, taken as successive base-95 digits by multiply-high.
	r := h0
	for j := 0; j < 10; j++ {
		if j == 5 {
			r = h1
		}
		hi, lo := bits.Mul64(r, 95)
		dst[j] = ' ' + byte(hi)
		r = lo
	}
	dst[10], dst[11] = ' ', ' '
	dst[44], dst[45] = ' ', ' '
	h2 := mix64(h0 ^ bits.RotateLeft64(h1, 29))
	for j := 0; j < 13; j++ { // 13 groups of 4 equal hex digits from 52 bits of h2
		d := hexDigits[(h2>>(48-4*j))&0xF]
		dst[46+4*j], dst[47+4*j], dst[48+4*j], dst[49+4*j] = d, d, d, d
	}
	dst[98], dst[99] = '\r', '\n'
}

// GenRecord writes record i of the data set (seed, f) into dst[:100]. It
// panics if len(dst) < RecordSize. For many records use GenRecords, which
// derives the seed keys once.
func GenRecord(dst []byte, seed, i uint64, f Format) {
	newGenerator(seed, f).record(dst, i)
}

// GenRecords fills dst with records first, first+1, ... of the data set
// (seed, f): one per 100 bytes; a trailing partial record is left alone.
// The result does not depend on how a range is cut into calls.
func GenRecords(dst []byte, seed, first uint64, f Format) {
	g := newGenerator(seed, f)
	n := len(dst) / RecordSize
	for k := 0; k < n; k++ {
		g.record(dst[k*RecordSize:], first+uint64(k))
	}
}

// genItem is one run of records written at a byte offset of one file.
type genItem struct {
	f      *os.File
	lo, hi int64 // record numbers
	at     int64 // byte offset in f of record lo
}

// Generate writes cfg.Parts files dir/part-NNNNN, in parallel, and returns
// the summary (count and checksum) of everything written. dir is created if
// missing; if it already holds part files Generate returns ErrExists. Files
// are written under a ".tmp" suffix and renamed once all are complete, so
// an interrupted run leaves no file that looks finished.
func Generate(ctx context.Context, dir string, cfg GenConfig) (Summary, error) {
	if err := cfg.Validate(); err != nil {
		return Summary{}, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return Summary{}, fmt.Errorf("terasort: create output directory: %w", err)
	}
	if old, err := partFiles(dir); err != nil {
		return Summary{}, err
	} else if len(old) > 0 {
		return Summary{}, fmt.Errorf("%w: %s already holds %d part file(s) (%s, ...): remove them or choose another directory",
			ErrExists, dir, len(old), filepath.Base(old[0].path))
	}
	files := make([]*os.File, cfg.Parts)
	items := make([]genItem, cfg.Parts)
	cleanup := func() {
		for p, f := range files {
			if f != nil {
				f.Close()
				os.Remove(filepath.Join(dir, PartName(p)+".tmp"))
			}
		}
	}
	for p := range cfg.Parts {
		f, err := createPrivate(filepath.Join(dir, PartName(p)+".tmp"))
		if err != nil {
			cleanup()
			return Summary{}, fmt.Errorf("terasort: create part file: %w", err)
		}
		files[p] = f
		lo, hi := PartRange(cfg.Records, cfg.Parts, p)
		items[p] = genItem{f: f, lo: lo, hi: hi}
	}
	sum, err := runGen(ctx, cfg, items)
	if err == nil {
		for p, f := range files {
			if cerr := f.Close(); cerr != nil && err == nil {
				err = fmt.Errorf("terasort: close %s: %w", f.Name(), cerr)
			}
			files[p] = nil
		}
	}
	if err == nil {
		for p := range cfg.Parts {
			base := filepath.Join(dir, PartName(p))
			if rerr := os.Rename(base+".tmp", base); rerr != nil {
				err = fmt.Errorf("terasort: %w", rerr)
				break
			}
		}
	}
	if err != nil {
		cleanup()
		for p := range cfg.Parts { // renamed ones too: leave nothing half done
			os.Remove(filepath.Join(dir, PartName(p)))
			os.Remove(filepath.Join(dir, PartName(p)+".tmp"))
		}
		return Summary{}, err
	}
	return sum, nil
}

// GenerateFile writes all cfg.Records records to the single file path
// (cfg.Parts is ignored), generating ranges in parallel and writing each at
// its offset. It returns ErrExists if path exists. The file is written as
// path+".tmp" and renamed when complete.
func GenerateFile(ctx context.Context, path string, cfg GenConfig) (Summary, error) {
	if err := cfg.Validate(); err != nil {
		return Summary{}, err
	}
	if _, err := os.Lstat(path); err == nil {
		return Summary{}, fmt.Errorf("%w: %s: remove it or choose another file", ErrExists, path)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return Summary{}, fmt.Errorf("terasort: %w", err)
	}
	tmp := path + ".tmp"
	f, err := createPrivate(tmp)
	if err != nil {
		return Summary{}, fmt.Errorf("terasort: create output file: %w", err)
	}
	chunk := int64(cfg.BlockRecords) * 16
	var items []genItem
	for lo := int64(0); lo < cfg.Records; lo += chunk {
		hi := min(lo+chunk, cfg.Records)
		items = append(items, genItem{f: f, lo: lo, hi: hi, at: lo * RecordSize})
	}
	sum, err := runGen(ctx, cfg, items)
	if cerr := f.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("terasort: close %s: %w", tmp, cerr)
	}
	if err == nil {
		if rerr := os.Rename(tmp, path); rerr != nil {
			err = fmt.Errorf("terasort: %w", rerr)
		}
	}
	if err != nil {
		os.Remove(tmp)
		return Summary{}, err
	}
	return sum, nil
}

// runGen runs the items on cfg.Workers goroutines, all joined before it
// returns. The first error cancels the others.
func runGen(ctx context.Context, cfg GenConfig, items []genItem) (Summary, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g := newGenerator(cfg.Seed, cfg.Format)
	next := make(chan genItem)
	var (
		mu       sync.Mutex
		total    Summary
		firstErr error
		wg       sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
		cancel()
	}
	for range min(cfg.Workers, max(len(items), 1)) {
		wg.Go(func() {
			buf := make([]byte, cfg.BlockRecords*RecordSize)
			var local Summary
			for it := range next {
				at := it.at
				for lo := it.lo; lo < it.hi; {
					if err := ctx.Err(); err != nil {
						fail(err)
						return
					}
					n := min(int64(cfg.BlockRecords), it.hi-lo)
					b := buf[:n*RecordSize]
					for k := range int(n) {
						g.record(b[k*RecordSize:], uint64(lo)+uint64(k))
					}
					if _, err := it.f.WriteAt(b, at); err != nil {
						fail(fmt.Errorf("terasort: write %s: %w", it.f.Name(), err))
						return
					}
					local = local.Add(SumRecords(b))
					lo += n
					at += int64(len(b))
				}
			}
			mu.Lock()
			total = total.Add(local)
			mu.Unlock()
		})
	}
feed:
	for _, it := range items {
		select {
		case next <- it:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if firstErr == nil && ctx.Err() != nil {
		firstErr = ctx.Err()
	}
	// The parent's cancellation also surfaces here (cancel above is ours).
	if firstErr != nil {
		return Summary{}, firstErr
	}
	return total, nil
}
