package kvshuffle

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"hash/fnv"
	"slices"

	"github.com/gaspigo/gaspigo/pgas"
)

// Key routing (after HPMR's KV routing): before the exchange, every rank
// tells the others, in a digest, how many pairs and bytes it holds of
// each key; one routing table, computed alike on every rank from all the
// digests, sends each key to the partition whose A task already holds
// most of its bytes, under a balance bound, so large values stay where
// they are. Set Config.Partition to the table's Partition.
//
// Keys are routed one by one (the heavy keys: each rank lists its
// RouteConfig.HeavyKeys largest by bytes) or by bucket (FNV-1a of the key
// modulo Buckets; a rank sums the keys it does not list into their
// buckets). The units, largest first (ties: heavy keys in byte order, then
// buckets in order), go to the partition that holds most of their bytes
// among those whose load stays within (1+Slack) * total / parts; when none
// does, to the least loaded. A bucket nobody holds goes to bucket mod
// parts. The table is a pure function of the digests, which every rank
// receives in the same order; a checksum agreed by one allreduce confirms
// it. The table is part of what a job checkpoints (Encode, DecodeRouteTable):
// a recovered job must route with the table its checkpointed pairs were
// routed with.

// RouteConfig tunes BuildRoute; every rank passes the same.
type RouteConfig struct {
	Buckets   int     // hash buckets for keys not routed one by one, >= 1
	HeavyKeys int     // keys each rank lists one by one, >= 0
	MaxKey    int     // longest key listed one by one (longer ones go by bucket)
	Slack     float64 // balance bound: a partition's load <= (1+Slack) * total / parts, >= 0
}

// DefaultRouteConfig returns 4096 buckets, 256 heavy keys of at most 64
// bytes per rank and a 10% balance slack.
func DefaultRouteConfig() RouteConfig {
	return RouteConfig{Buckets: 4096, HeavyKeys: 256, MaxKey: 64, Slack: 0.1}
}

// Validate checks the settings.
func (c RouteConfig) Validate() error {
	switch {
	case c.Buckets < 1 || c.Buckets > 1<<20:
		return cfgErr("RouteConfig.Buckets", c.Buckets, "want 1..%d", 1<<20)
	case c.HeavyKeys < 0 || c.MaxKey < 0 || c.MaxKey > 1<<16:
		return cfgErr("RouteConfig.HeavyKeys", c.HeavyKeys, "want HeavyKeys >= 0 and MaxKey in 0..65536")
	case !(c.Slack >= 0):
		return cfgErr("RouteConfig.Slack", c.Slack, "want a fraction >= 0")
	}
	return nil
}

// Digest counts the pairs and bytes a rank holds per key. Not safe for
// concurrent use.
type Digest struct {
	keys map[string]*keyStat
}

type keyStat struct{ count, bytes uint64 }

// NewDigest returns an empty digest.
func NewDigest() *Digest { return &Digest{keys: map[string]*keyStat{}} }

// Add counts one pair of key with size bytes (key and value).
func (d *Digest) Add(key []byte, size int) {
	st := d.keys[string(key)]
	if st == nil {
		st = &keyStat{}
		d.keys[string(key)] = st
	}
	st.count++
	st.bytes += uint64(size)
}

// bucketOf is the bucket of key.
func bucketOf(key []byte, buckets int) int {
	h := fnv.New64a()
	h.Write(key)
	return int(h.Sum64() % uint64(buckets))
}

// encode lists the heavy keys and sums the rest into buckets: u32 heavy
// count; per heavy key u16 length, key, u64 count, u64 bytes; then per
// bucket u64 count, u64 bytes.
func (d *Digest) encode(c RouteConfig) []byte {
	type kv struct {
		k string
		s *keyStat
	}
	all := make([]kv, 0, len(d.keys))
	for k, s := range d.keys {
		all = append(all, kv{k, s})
	}
	slices.SortFunc(all, func(a, b kv) int {
		if x := cmp.Compare(b.s.bytes, a.s.bytes); x != 0 {
			return x
		}
		return cmp.Compare(a.k, b.k)
	})
	var heavy []kv
	buckets := make([]keyStat, c.Buckets)
	for _, e := range all {
		if len(heavy) < c.HeavyKeys && len(e.k) <= c.MaxKey {
			heavy = append(heavy, e)
			continue
		}
		b := &buckets[bucketOf([]byte(e.k), c.Buckets)]
		b.count += e.s.count
		b.bytes += e.s.bytes
	}
	out := binary.LittleEndian.AppendUint32(nil, uint32(len(heavy)))
	for _, e := range heavy {
		out = binary.LittleEndian.AppendUint16(out, uint16(len(e.k)))
		out = append(out, e.k...)
		out = binary.LittleEndian.AppendUint64(out, e.s.count)
		out = binary.LittleEndian.AppendUint64(out, e.s.bytes)
	}
	for _, b := range buckets {
		out = binary.LittleEndian.AppendUint64(out, b.count)
		out = binary.LittleEndian.AppendUint64(out, b.bytes)
	}
	return out
}

// RouteTable maps keys to partitions; see the key routing notes above.
type RouteTable struct {
	parts   int
	heavy   map[string]int32
	buckets []int32
	// Moved and Kept are the digests' bytes the table sends to another
	// rank's partition and keeps on the rank that holds them (by the
	// units: a key one rank listed and another summed into its bucket
	// counts in the bucket there).
	Moved, Kept uint64
}

// Partition is the table's partition of key (parts must be the table's).
func (t *RouteTable) Partition(key []byte, parts int) int {
	if p, ok := t.heavy[string(key)]; ok {
		return int(p)
	}
	return int(t.buckets[bucketOf(key, len(t.buckets))])
}

// Parts is the number of partitions the table routes to.
func (t *RouteTable) Parts() int { return t.parts }

// Heavy is the number of keys routed one by one.
func (t *RouteTable) Heavy() int { return len(t.heavy) }

// Encode returns the table as bytes (for a checkpoint): magic, u32 parts,
// u32 buckets, u32 heavy keys, the buckets' partitions (u32 each), each
// heavy key (u16 length, key, u32 partition), and a CRC-32C of all that.
func (t *RouteTable) Encode() []byte {
	keys := make([]string, 0, len(t.heavy))
	for k := range t.heavy {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b := append([]byte(nil), routeMagic...)
	b = binary.LittleEndian.AppendUint32(b, uint32(t.parts))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(t.buckets)))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(keys)))
	for _, p := range t.buckets {
		b = binary.LittleEndian.AppendUint32(b, uint32(p))
	}
	for _, k := range keys {
		b = binary.LittleEndian.AppendUint16(b, uint16(len(k)))
		b = append(b, k...)
		b = binary.LittleEndian.AppendUint32(b, uint32(t.heavy[k]))
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

const routeMagic = "KVROUTE1"

// DecodeRouteTable reads what Encode wrote; damage is ErrCorrupt.
func DecodeRouteTable(b []byte) (*RouteTable, error) {
	bad := func(what string) (*RouteTable, error) {
		return nil, fmt.Errorf("kvshuffle: route table: %s: %w", what, ErrCorrupt)
	}
	if len(b) < len(routeMagic)+16 || string(b[:len(routeMagic)]) != routeMagic {
		return bad("not a route table")
	}
	body := b[:len(b)-4]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(b[len(b)-4:]) {
		return bad("checksum mismatch")
	}
	r := body[len(routeMagic):]
	parts, nb, nh := binary.LittleEndian.Uint32(r), binary.LittleEndian.Uint32(r[4:]), binary.LittleEndian.Uint32(r[8:])
	r = r[12:]
	if parts == 0 || nb == 0 || uint64(len(r)) < 4*uint64(nb) {
		return bad("bad sizes")
	}
	t := &RouteTable{parts: int(parts), heavy: make(map[string]int32, nh), buckets: make([]int32, nb)}
	for i := range t.buckets {
		t.buckets[i] = int32(binary.LittleEndian.Uint32(r))
		r = r[4:]
		if uint32(t.buckets[i]) >= parts {
			return bad("bucket partition out of range")
		}
	}
	for range nh {
		if len(r) < 2 || len(r) < 6+int(binary.LittleEndian.Uint16(r)) {
			return bad("truncated key")
		}
		n := int(binary.LittleEndian.Uint16(r))
		k, p := string(r[2:2+n]), binary.LittleEndian.Uint32(r[2+n:])
		if p >= parts {
			return bad("key partition out of range")
		}
		t.heavy[k] = int32(p)
		r = r[6+n:]
	}
	if len(r) != 0 {
		return bad("trailing bytes")
	}
	return t, nil
}

// BuildRoute is collective over rt's ranks: every rank passes its digest
// and the same aRanks (partition p is received by aRanks[p]; nil: every
// rank, partition p on rank p) and config, and gets the same table. It
// fails with ErrMismatch if the ranks' tables differ.
func BuildRoute(ctx context.Context, rt *pgas.Runtime, d *Digest, aRanks []int, c RouteConfig) (*RouteTable, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if aRanks == nil {
		aRanks = make([]int, rt.Size())
		for i := range aRanks {
			aRanks[i] = i
		}
	}
	enc := d.encode(c)
	lens, err := pgas.Allgather(ctx, rt, nil, []int64{int64(len(enc))})
	if err != nil {
		return nil, fmt.Errorf("kvshuffle: build route: %w", err)
	}
	width := slices.Max(lens)
	buf := make([]byte, width)
	copy(buf, enc)
	all, err := pgas.Allgather(ctx, rt, nil, buf)
	if err != nil {
		return nil, fmt.Errorf("kvshuffle: build route: %w", err)
	}
	digests := make([][]byte, len(lens))
	for r, n := range lens {
		digests[r] = all[int64(r)*width : int64(r)*width+n]
	}
	t, err := routeTable(digests, aRanks, c)
	if err != nil {
		return nil, err
	}
	sum := uint64(crc32.Checksum(t.Encode(), castagnoli))
	agree := []uint64{sum, ^sum}
	if err := pgas.Allreduce(ctx, rt, nil, agree, pgas.OpMax); err != nil {
		return nil, fmt.Errorf("kvshuffle: build route: %w", err)
	}
	if agree[0] != sum || ^agree[1] != sum {
		return nil, fmt.Errorf("kvshuffle: build route: the ranks computed different tables: %w", ErrMismatch)
	}
	return t, nil
}

// routeUnit is a heavy key or a bucket, with the bytes each rank holds.
type routeUnit struct {
	key    []byte // nil: a bucket
	bucket int
	bytes  []uint64 // per source rank
	total  uint64
}

// routeTable computes the table from every rank's digest (in rank order):
// the heavy keys and the buckets, largest first, each to the A rank that
// holds most of it among those it does not fill past the bound.
func routeTable(digests [][]byte, aRanks []int, c RouteConfig) (*RouteTable, error) {
	heavy, buckets, err := readDigests(digests, c.Buckets)
	if err != nil {
		return nil, err
	}
	units, total := sortUnits(heavy, buckets)
	parts := len(aRanks)
	t := &RouteTable{parts: parts, heavy: make(map[string]int32, len(heavy)), buckets: make([]int32, c.Buckets)}
	pl := placer{
		aRanks: aRanks,
		n:      len(digests),
		bound:  uint64((1 + c.Slack) * float64(total) / float64(parts)),
		load:   make([]uint64, parts),
		order:  make([]int, parts),
	}
	for _, u := range units {
		p := u.bucket % parts // heavy keys always hold bytes
		if u.total > 0 {
			var kept uint64
			p, kept = pl.place(u)
			t.Kept += kept
			t.Moved += u.total - kept
		}
		if u.key != nil {
			t.heavy[string(u.key)] = int32(p)
		} else {
			t.buckets[u.bucket] = int32(p)
		}
	}
	return t, nil
}

// readDigests adds up the digests (in rank order): the bytes of each
// heavy key, by its key, and of each of nb buckets, per source rank.
func readDigests(digests [][]byte, nb int) (map[string]*routeUnit, []*routeUnit, error) {
	n := len(digests)
	heavy := map[string]*routeUnit{}
	buckets := make([]*routeUnit, nb)
	for i := range buckets {
		buckets[i] = &routeUnit{bucket: i, bytes: make([]uint64, n)}
	}
	for r, b := range digests {
		if len(b) < 4 {
			return nil, nil, fmt.Errorf("kvshuffle: build route: digest of rank %d: %w", r, ErrCorrupt)
		}
		nh := binary.LittleEndian.Uint32(b)
		b = b[4:]
		for range nh {
			if len(b) < 2 || len(b) < 18+int(binary.LittleEndian.Uint16(b)) {
				return nil, nil, fmt.Errorf("kvshuffle: build route: digest of rank %d: truncated: %w", r, ErrCorrupt)
			}
			k := b[2 : 2+int(binary.LittleEndian.Uint16(b))]
			u := heavy[string(k)]
			if u == nil {
				u = &routeUnit{key: k, bytes: make([]uint64, n)}
				heavy[string(k)] = u
			}
			u.bytes[r] += binary.LittleEndian.Uint64(b[2+len(k)+8:])
			b = b[18+len(k):]
		}
		if len(b) != 16*nb {
			return nil, nil, fmt.Errorf("kvshuffle: build route: digest of rank %d: %d bytes of buckets, want %d: %w", r, len(b), 16*nb, ErrMismatch)
		}
		for i := range buckets {
			buckets[i].bytes[r] += binary.LittleEndian.Uint64(b[16*i+8:])
		}
	}
	return heavy, buckets, nil
}

// sortUnits returns the heavy keys and the buckets with their totals set,
// largest first (then heavy keys before buckets, by key or bucket), and
// the total of all.
func sortUnits(heavy map[string]*routeUnit, buckets []*routeUnit) ([]*routeUnit, uint64) {
	units := make([]*routeUnit, 0, len(heavy)+len(buckets))
	for _, u := range heavy {
		units = append(units, u)
	}
	units = append(units, buckets...)
	var total uint64
	for _, u := range units {
		for _, x := range u.bytes {
			u.total += x
		}
		total += u.total
	}
	slices.SortFunc(units, func(a, b *routeUnit) int {
		if x := cmp.Compare(b.total, a.total); x != 0 {
			return x
		}
		if (a.key == nil) != (b.key == nil) {
			return cmp.Compare(boolInt(a.key == nil), boolInt(b.key == nil))
		}
		if a.key != nil {
			return bytes.Compare(a.key, b.key)
		}
		return cmp.Compare(a.bucket, b.bucket)
	})
	return units, total
}

// placer places units on the A ranks' partitions, keeping each
// partition's load within bound where it can.
type placer struct {
	aRanks []int    // partition p is A rank aRanks[p]
	n      int      // the ranks that sent digests
	bound  uint64   // the load a partition should not pass
	load   []uint64 // per partition
	order  []int    // scratch
}

// place returns the partition of u, the one whose rank holds most of it
// among those it leaves within the bound (else the least loaded), and how
// many of its bytes that rank holds.
func (pl *placer) place(u *routeUnit) (p int, kept uint64) {
	for i := range pl.order {
		pl.order[i] = i
	}
	held := func(p int) uint64 {
		if r := pl.aRanks[p]; r < pl.n {
			return u.bytes[r]
		}
		return 0
	}
	slices.SortStableFunc(pl.order, func(a, b int) int { return cmp.Compare(held(b), held(a)) })
	p = -1
	for _, q := range pl.order {
		if pl.load[q]+u.total <= pl.bound {
			p = q
			break
		}
	}
	if p < 0 {
		p = 0
		for q := range pl.load {
			if pl.load[q] < pl.load[p] {
				p = q
			}
		}
	}
	pl.load[p] += u.total
	return p, held(p)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
