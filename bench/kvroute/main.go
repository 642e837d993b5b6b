// Command kvroute measures kvshuffle's key routing (HPMR) against hash
// partitioning on a skewed workload, both in one run of one job:
//
//	go build -o bin/ ./cmd/gaspirun ./bench/kvroute
//	bin/gaspirun -n 4 -- bin/kvroute [--home spread|one] [--small N] [--large N] [--large-size B] [--reps R]
//
// Workload (the same pairs for both modes, generated before timing):
// every rank holds --small pairs of 32-byte values whose keys follow a
// Zipf law (s = 1.2) over --keys keys, and large values (--large-size
// bytes): with --home spread each rank holds --large of them, of keys
// whose home is the rank (CRC-32 of the key mod ranks, unrelated to
// hash partitioning's FNV-1a: each key's large
// values sit on one rank, as after a previous stage); with --home one
// rank 0 holds all ranks*--large of them.
//
// One repetition runs hash partitioning, then routing, each on a new
// shuffle between barriers: routing includes building the digest and
// the table (BuildRoute). Measured per mode: the bytes (key + value) of
// pairs sent to another rank's partition, summed over ranks, and the
// time from the first barrier until every rank received its partition
// (the slowest rank's). Every rank checks that it received exactly the
// pairs routed to it (count and a checksum agreed with the senders).
// Rank 0 prints one line per mode with the medians over --reps.
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"slices"
	"time"

	"github.com/gaspigo/gaspigo/job"
	"github.com/gaspigo/gaspigo/kvshuffle"
	"github.com/gaspigo/gaspigo/pgas"
	"github.com/gaspigo/gaspigo/segments"
)

type pair struct{ k, v []byte }

func main() {
	home := flag.String("home", "spread", "where the large values live: spread (each key's on its home rank) or one (all on rank 0)")
	keys := flag.Uint64("keys", 20000, "distinct keys")
	small := flag.Int("small", 100000, "pairs of 32-byte values per rank")
	large := flag.Int("large", 2000, "large values per rank (--home one: all on rank 0)")
	size := flag.Int("large-size", 16<<10, "bytes of a large value")
	reps := flag.Int("reps", 3, "repetitions (medians are printed)")
	slack := flag.Float64("slack", 0.1, "routing's balance slack")
	share := flag.Float64("home-share", 0.8, "--home spread: the fraction of a rank's large values whose key has the rank as home (the rest: any key)")
	slots := flag.Int("slots", kvshuffle.DefaultConfig().Slots, "kvshuffle Slots: frames in flight per sender and receiver")
	flag.Parse()
	if (*home != "spread" && *home != "one") || *keys < 2 || *small < 0 || *large < 0 || *size < 1 || *reps < 1 || !(*share >= 0 && *share <= 1) || *slots < 1 {
		fmt.Fprintln(os.Stderr, "kvroute: want --home spread|one, --keys >= 2, --small, --large >= 0, --large-size >= 1, --reps >= 1, --home-share in [0, 1], --slots >= 1")
		os.Exit(2)
	}
	ctx := context.Background()
	rt, err := job.Init(ctx, job.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "kvroute:", err)
		os.Exit(1)
	}
	defer rt.Close()
	if err := run(ctx, rt, spec{*home, *keys, *small, *large, *size, *reps, *slack, *share, *slots}); err != nil {
		fmt.Fprintf(os.Stderr, "kvroute: rank %d: %v\n", rt.Rank(), err)
		os.Exit(1)
	}
}

// homeOf is a key's home rank: CRC-32 (not FNV-1a, which hash
// partitioning uses) of the key mod n.
func homeOf(key []byte, n int) int { return int(crc32.ChecksumIEEE(key) % uint32(n)) }

// spec is the workload and the settings.
type spec struct {
	home               string
	keys               uint64
	small, large, size int
	reps               int
	slack, share       float64
	slots              int
}

// workload generates this rank's pairs.
func workload(rank, n int, sp spec) []pair {
	home, keys, small, large, size := sp.home, sp.keys, sp.small, sp.large, sp.size
	r := rand.New(rand.NewPCG(42, uint64(rank)))
	z := rand.NewZipf(r, 1.2, 1, keys-1)
	key := func() []byte { return fmt.Appendf(nil, "key%08d", z.Uint64()) }
	var ps []pair
	for range small {
		ps = append(ps, pair{key(), make([]byte, 32)})
	}
	nl := large
	if home == "one" {
		nl = 0
		if rank == 0 {
			nl = large * n
		}
	}
	for range nl {
		k := key()
		for home == "spread" && r.Float64() < sp.share && homeOf(k, n) != rank {
			k = key()
		}
		v := make([]byte, size)
		binary.LittleEndian.PutUint64(v, r.Uint64())
		ps = append(ps, pair{k, v})
	}
	r.Shuffle(len(ps), func(i, j int) { ps[i], ps[j] = ps[j], ps[i] })
	return ps
}

type result struct {
	moved, total uint64
	dur, build   time.Duration
	heavy        int
}

func run(ctx context.Context, rt *pgas.Runtime, sp spec) error {
	n, rank := rt.Size(), rt.Rank()
	ps := workload(rank, n, sp)
	res := map[string][]result{}
	seg := kvshuffle.DefaultSegmentID
	for rep := range sp.reps {
		for _, mode := range []string{"hash", "route"} {
			seg += 2
			r, err := once(ctx, rt, ps, mode, seg, sp)
			if err != nil {
				return fmt.Errorf("%s, repetition %d: %w", mode, rep, err)
			}
			res[mode] = append(res[mode], r)
		}
	}
	if rank != 0 {
		return nil
	}
	var hashMoved uint64
	for _, mode := range []string{"hash", "route"} {
		rs := res[mode]
		med := func(f func(result) float64) float64 {
			v := make([]float64, len(rs))
			for i, r := range rs {
				v[i] = f(r)
			}
			slices.Sort(v)
			return v[len(v)/2]
		}
		moved := uint64(med(func(r result) float64 { return float64(r.moved) }))
		if mode == "hash" {
			hashMoved = moved
		}
		line := fmt.Sprintf("kvroute: mode=%s ranks=%d home=%s bytes_total=%d bytes_moved=%d moved=%.1f%% time=%.3fs",
			mode, n, sp.home, rs[0].total, moved, 100*float64(moved)/float64(rs[0].total), med(func(r result) float64 { return r.dur.Seconds() }))
		if mode == "route" {
			line += fmt.Sprintf(" table_build=%.3fs heavy_keys=%d moved_vs_hash=%.2f", med(func(r result) float64 { return r.build.Seconds() }), rs[0].heavy, float64(moved)/float64(hashMoved))
		}
		fmt.Println(line)
	}
	return nil
}

// once shuffles ps with mode and measures it.
func once(ctx context.Context, rt *pgas.Runtime, ps []pair, mode string, seg segments.ID, sp spec) (result, error) {
	var res result
	n, rank := rt.Size(), rt.Rank()
	cfg := kvshuffle.DefaultConfig()
	cfg.SegmentID = seg // a new segment per shuffle
	cfg.MemoryBudget = 1 << 30
	cfg.SpillDir = ""
	cfg.Slots = sp.slots
	var table *kvshuffle.RouteTable
	cfg.Partition = func(key []byte, parts int) int {
		if table != nil {
			return table.Partition(key, parts)
		}
		return kvshuffle.HashPartition(key, parts)
	}
	sh, err := kvshuffle.New(ctx, rt, cfg)
	if err != nil {
		return res, err
	}
	defer sh.Close()
	if err := rt.Barrier(ctx, nil); err != nil {
		return res, err
	}
	t0 := time.Now()
	if mode == "route" {
		d := kvshuffle.NewDigest()
		for _, p := range ps {
			d.Add(p.k, len(p.k)+len(p.v))
		}
		rc := kvshuffle.DefaultRouteConfig()
		rc.Slack = sp.slack
		if table, err = kvshuffle.BuildRoute(ctx, rt, d, nil, rc); err != nil {
			return res, err
		}
		res.build, res.heavy = time.Since(t0), table.Heavy()
	}
	// sent[p]: pairs and checksum this rank sends to partition p.
	sent := make([]uint64, 2*n)
	for _, p := range ps {
		dst := cfg.Partition(p.k, n)
		if dst != rank {
			res.moved += uint64(len(p.k) + len(p.v))
		}
		res.total += uint64(len(p.k) + len(p.v))
		sent[2*dst]++
		sent[2*dst+1] += uint64(crc32.ChecksumIEEE(p.k)) + uint64(len(p.v))
		if err := sh.Send(ctx, p.k, p.v); err != nil {
			return res, err
		}
	}
	if err := sh.CloseSend(ctx); err != nil {
		return res, err
	}
	var got [2]uint64
	for k, v := range sh.Recv(ctx) {
		got[0]++
		got[1] += uint64(crc32.ChecksumIEEE(k)) + uint64(len(v))
	}
	if err := sh.Err(); err != nil {
		return res, err
	}
	res.dur = time.Since(t0)
	if err := pgas.Allreduce(ctx, rt, nil, sent, pgas.OpSum); err != nil {
		return res, err
	}
	if got[0] != sent[2*rank] || got[1] != sent[2*rank+1] {
		return res, fmt.Errorf("received %d pairs (checksum %x), the senders sent %d (%x)", got[0], got[1], sent[2*rank], sent[2*rank+1])
	}
	tot := []uint64{res.moved, res.total, uint64(res.dur)}
	if err := pgas.Allreduce(ctx, rt, nil, tot[:2], pgas.OpSum); err != nil {
		return res, err
	}
	if err := pgas.Allreduce(ctx, rt, nil, tot[2:], pgas.OpMax); err != nil {
		return res, err
	}
	res.moved, res.total, res.dur = tot[0], tot[1], time.Duration(tot[2])
	return res, nil
}
