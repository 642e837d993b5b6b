package kvshuffle

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/gaspigo/gaspigo/pgas"
)

// Replicas: the spill files a checkpoint state names, copied to the ranks
// that hold the state's mirrors on other hosts (Config.Holders), so that a
// rank taken over on another host gets them back.
//
// The copies travel as pgas passive messages, inside the collective calls
// Checkpoint and RollBack, with credit-based flow control: a sender has at
// most xferWindow messages unconsumed at a receiver, so the runtime's
// passive inbox never overflows. One session is one such exchange; every
// rank takes part, sends what it must (possibly nothing) and receives from
// the ranks that the session's plan (the same on every rank) says will
// send to it. A session ends with an Allreduce, so when it returns on any
// rank every message of it has been consumed everywhere, and a later
// session never meets an earlier one's messages except those of a session
// cut short by a failure, which carry another (op, generation, checkpoint)
// tag and are dropped.
//
// A holder keeps each source's copies in its own directory under SpillDir,
// named by content (source rank, size, pairs, checksum), with the
// manifests (the files each checkpoint state names) of the checkpoints the
// source has not released yet. A copy named by no kept manifest is
// deleted. RollBack to c drops the manifests above c (an abandoned
// timeline) everywhere.

// fileKey names a spill file by content. Two files with the same key
// hold the same pairs (or a CRC-32C collision of equal sizes and counts),
// so either serves.
type fileKey struct {
	src   uint32
	crc   uint32
	size  int64
	pairs uint64
}

func keyOf(src int, f stateFile) fileKey {
	return fileKey{src: uint32(src), crc: f.crc, size: f.size, pairs: f.pairs}
}

func (k fileKey) name() string {
	return fmt.Sprintf("r%d-%d-%d-%08x.kvs", k.src, k.size, k.pairs, k.crc)
}

func (k fileKey) spill(path string) *spillFile {
	return &spillFile{path: path, size: k.size, pairs: k.pairs, crc: k.crc}
}

const keyLen = 24

func (k fileKey) append(b []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, k.src)
	b = binary.LittleEndian.AppendUint32(b, k.crc)
	b = binary.LittleEndian.AppendUint64(b, uint64(k.size))
	return binary.LittleEndian.AppendUint64(b, k.pairs)
}

func decodeKey(b []byte) fileKey {
	return fileKey{
		src:   binary.LittleEndian.Uint32(b),
		crc:   binary.LittleEndian.Uint32(b[4:]),
		size:  int64(binary.LittleEndian.Uint64(b[8:])),
		pairs: binary.LittleEndian.Uint64(b[16:]),
	}
}

// manifest is the list of files checkpoint c of a source names.
type manifest struct {
	c    uint64
	keys []fileKey
}

// replicaStore is what this rank holds for other ranks.
type replicaStore struct {
	mu        sync.Mutex
	dir       string // created at the first copy
	files     map[fileKey]string
	manifests map[uint32][]manifest
	bytes     int64
}

func newReplicaStore() *replicaStore {
	return &replicaStore{files: make(map[fileKey]string), manifests: make(map[uint32][]manifest)}
}

func (rs *replicaStore) has(k fileKey) (string, bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	p, ok := rs.files[k]
	return p, ok
}

// ensureDir returns the store's directory under spillDir, creating it.
func (rs *replicaStore) ensureDir(s *Shuffle, rank int) (string, error) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	s.waitIfDiskLost(&rs.mu)
	spillDir := s.cfg.SpillDir
	if rs.dir != "" {
		if _, err := os.Stat(rs.dir); err != nil {
			rs.dir = ""
		}
	}
	if rs.dir == "" {
		if spillDir == "" {
			return "", errors.New("no SpillDir to keep copies in")
		}
		if err := os.MkdirAll(spillDir, 0o755); err != nil {
			return "", fmt.Errorf("copy directory: %w", err)
		}
		d, err := os.MkdirTemp(spillDir, fmt.Sprintf("kvshuffle-copies-r%d-", rank))
		if err != nil {
			return "", fmt.Errorf("copy directory: %w", err)
		}
		rs.dir = d
	}
	return rs.dir, nil
}

func (rs *replicaStore) add(k fileKey, path string) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if old, ok := rs.files[k]; ok && old != path {
		os.Remove(path)
		return
	}
	rs.files[k] = path
	rs.bytes += k.size
}

// record keeps manifest m of source src, drops the manifests the source
// released (below keep) or redoes (at or above m.c), and deletes the
// copies of src that no kept manifest names. Only src's: other sources'
// sessions may be under way, their files not named by a manifest yet.
func (rs *replicaStore) record(src uint32, keep uint64, m manifest) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	ms := slices.DeleteFunc(rs.manifests[src], func(x manifest) bool { return x.c < keep || x.c >= m.c })
	rs.manifests[src] = append(ms, m)
	rs.gcLocked(func(k fileKey) bool { return k.src == src })
}

// rollBack drops the manifests above c (the abandoned timeline) and the
// copies they alone named.
func (rs *replicaStore) rollBack(c uint64) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for src, ms := range rs.manifests {
		rs.manifests[src] = slices.DeleteFunc(ms, func(x manifest) bool { return x.c > c })
	}
	rs.gcLocked(func(fileKey) bool { return true })
}

// gcLocked deletes the copies in scope that no kept manifest names.
func (rs *replicaStore) gcLocked(scope func(fileKey) bool) {
	named := make(map[fileKey]bool)
	for _, ms := range rs.manifests {
		for _, m := range ms {
			for _, k := range m.keys {
				named[k] = true
			}
		}
	}
	for k, p := range rs.files {
		if scope(k) && !named[k] {
			os.Remove(p)
			delete(rs.files, k)
			rs.bytes -= k.size
		}
	}
}

// removeAll deletes every copy and the directory.
func (rs *replicaStore) removeAll() error {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	clear(rs.files)
	clear(rs.manifests)
	rs.bytes = 0
	if rs.dir == "" {
		return nil
	}
	err := os.RemoveAll(rs.dir)
	rs.dir = ""
	return err
}

// copyTargets returns the holders of rank's checkpoint files: the ranks of
// Config.Holders(rank) on another host than rank. On the same host a
// file is kept by reference: whatever loses the rank's disk loses that
// holder too.
func (s *Shuffle) copyTargets(rank int) []int {
	var out []int
	for _, h := range s.cfg.Holders(rank) {
		if h != rank && h >= 0 && h < s.rt.Size() && s.rt.Host(h) != s.rt.Host(rank) {
			out = append(out, h)
		}
	}
	return out
}

// replicate copies the files of checkpoint state st that its holders on
// other hosts lack, with the manifest. Collective (a session).
func (s *Shuffle) replicate(ctx context.Context, st *state) error {
	spans := false // some rank has a holder on another host: every rank computes the same
	for _, src := range s.aRanks {
		spans = spans || len(s.copyTargets(src)) > 0
	}
	if !spans {
		return nil // one host: files by reference, no session
	}
	t0 := time.Now()
	me := s.rank
	p := &plan{
		tag:      xferTag{op: opCheckpoint, gen: s.gen.Load(), c: st.c},
		out:      make(map[int][]copyItem),
		manifest: make(map[int][]fileKey),
		keep:     s.keep.Load(),
	}
	var keys []fileKey
	for _, f := range st.files {
		keys = append(keys, keyOf(me, f))
	}
	if s.a != nil {
		for _, h := range s.copyTargets(me) {
			if s.sent[h] == nil {
				s.sent[h] = make(map[fileKey]bool)
			}
			p.out[h] = []copyItem{}
			p.manifest[h] = keys
			for i, f := range st.files {
				if !s.sent[h][keys[i]] {
					p.out[h] = append(p.out[h], copyItem{key: keys[i], path: f.path})
				}
			}
		}
	}
	for _, src := range s.aRanks {
		if src != me && slices.Contains(s.copyTargets(src), me) {
			p.from = append(p.from, src)
		}
	}
	p.sink = func(src int, k fileKey) (string, error) {
		if _, ok := s.copies.has(k); ok {
			return "", nil
		}
		return s.copies.ensureDir(s, me)
	}
	p.done = func(src int, k fileKey, path string) {
		final := filepath.Join(filepath.Dir(path), k.name())
		if err := os.Rename(path, final); err != nil {
			os.Remove(path)
			return // the manifest check at the end reports it
		}
		s.copies.add(k, final)
	}
	bytes, files, err := s.session(ctx, p)
	if err != nil {
		return fmt.Errorf("kvshuffle: checkpoint %d: copy files to their holders: %w", st.c, err)
	}
	for h, its := range p.out {
		for _, it := range its {
			s.sent[h][it.key] = true
		}
	}
	s.st.copyBytes.Add(uint64(bytes))
	s.st.copyFiles.Add(uint64(files))
	if len(p.out) > 0 || len(p.from) > 0 {
		s.log.Info("checkpoint files copied", "checkpoint", st.c, "files", files, "bytes", bytes,
			"holders", slices.Sorted(maps.Keys(p.out)), "sources", p.from, "took", time.Since(t0))
	}
	return nil
}

// fetch gets the files st.files[i], i in missing, from ranks that hold
// copies, into this rank's spill directory, and points st at them. It is
// collective (most is the largest len(missing) of any rank, agreed
// before): the needs are allgathered, every rank says which it holds, the
// lowest such rank sends.
func (s *Shuffle) fetch(ctx context.Context, st *state, missing []int, most int) error {
	needs, ranks, err := s.gatherNeeds(ctx, st, missing, most)
	if err != nil {
		return err
	}
	held, err := s.gatherHeld(ctx, needs)
	if err != nil {
		return err
	}
	p, err := s.fetchPlan(st, needs, ranks, held)
	if err != nil {
		return err
	}
	got := make(map[fileKey]string)
	p.sink = func(int, fileKey) (string, error) {
		if s.a == nil {
			return "", fmt.Errorf("rank %d is no A task: %w", s.rank, ErrState)
		}
		return s.a.spillDir()
	}
	p.done = func(_ int, k fileKey, path string) { got[k] = path }
	t0 := time.Now()
	bytes, files, err := s.session(ctx, p)
	if err != nil {
		for _, path := range got {
			os.Remove(path)
		}
		return fmt.Errorf("checkpoint %d: fetch spill files: %w", st.c, err)
	}
	var fetched int64
	for _, fi := range missing {
		k := keyOf(int(st.rank), st.files[fi])
		path, ok := got[k]
		if !ok {
			return fmt.Errorf("checkpoint %d: %s was not delivered: %w", st.c, k.name(), ErrLost)
		}
		st.files[fi].path = path
		fetched += k.size
	}
	s.st.fetchBytes.Add(uint64(fetched))
	s.st.fetchFiles.Add(uint64(len(missing)))
	if len(missing) > 0 || files > 0 {
		s.log.Info("checkpoint files fetched", "checkpoint", st.c, "fetched_files", len(missing), "fetched_bytes", fetched,
			"served_files", files, "served_bytes", bytes, "took", time.Since(t0))
	}
	return nil
}

// fileNeed is a file a rank misses.
type fileNeed struct {
	rank int
	key  fileKey
}

// gatherNeeds allgathers the files every rank misses (this rank's: the
// files st.files[i], i in missing; most is the largest count of any
// rank). It returns them, and the ranks in the order of the gather.
func (s *Shuffle) gatherNeeds(ctx context.Context, st *state, missing []int, most int) ([]fileNeed, []int, error) {
	width := 2 + 3*most
	words := make([]uint64, width)
	words[0], words[1] = uint64(s.rank), uint64(len(missing))
	for i, fi := range missing {
		k := keyOf(int(st.rank), st.files[fi])
		words[2+3*i] = uint64(k.src)<<32 | uint64(k.crc)
		words[3+3*i] = uint64(k.size)
		words[4+3*i] = k.pairs
	}
	all, err := pgas.Allgather(ctx, s.rt, nil, words)
	if err != nil {
		return nil, nil, err
	}
	var needs []fileNeed
	var ranks []int
	for x := 0; x+width <= len(all); x += width {
		w := all[x : x+width]
		ranks = append(ranks, int(w[0]))
		for i := range min(int(w[1]), most) {
			k := fileKey{src: uint32(w[2+3*i] >> 32), crc: uint32(w[2+3*i]), size: int64(w[3+3*i]), pairs: w[4+3*i]}
			needs = append(needs, fileNeed{int(w[0]), k})
		}
	}
	return needs, ranks, nil
}

// heldBits is, for each rank in the order of the gather, a bit set of
// the needs it holds a copy of.
type heldBits struct {
	bits  []uint64 // words of all ranks, one after the other
	width int      // words per rank
}

// holds reports whether the x-th rank of the gather holds need i.
func (h heldBits) holds(x, i int) bool {
	w := x*h.width + i/64
	return w < len(h.bits) && h.bits[w]&(1<<(i%64)) != 0
}

// gatherHeld allgathers which of needs every rank holds a readable copy
// of (a rank does not serve its own needs).
func (s *Shuffle) gatherHeld(ctx context.Context, needs []fileNeed) (heldBits, error) {
	bw := max((len(needs)+63)/64, 1)
	bits := make([]uint64, bw)
	for i, nd := range needs {
		if path, ok := s.copies.has(nd.key); ok && nd.rank != s.rank {
			if _, err := os.Stat(path); err == nil {
				bits[i/64] |= 1 << (i % 64)
			}
		}
	}
	all, err := pgas.Allgather(ctx, s.rt, nil, bits)
	if err != nil {
		return heldBits{}, err
	}
	return heldBits{bits: all, width: bw}, nil
}

// fetchPlan chooses for every need the lowest rank of the gather that
// holds it: the plan sends what this rank provides and receives from the
// providers of its own needs. A need no rank holds is ErrLost.
func (s *Shuffle) fetchPlan(st *state, needs []fileNeed, ranks []int, held heldBits) (*plan, error) {
	me := s.rank
	p := &plan{tag: xferTag{op: opFetch, gen: s.gen.Load(), c: st.c}, out: make(map[int][]copyItem)}
	var lost []string
	from := make(map[int]bool)
	for i, nd := range needs {
		provider := -1
		for x, r := range ranks {
			if held.holds(x, i) {
				provider = r
				break
			}
		}
		switch {
		case provider < 0:
			lost = append(lost, fmt.Sprintf("rank %d's %s", nd.rank, nd.key.name()))
		case provider == me:
			path, _ := s.copies.has(nd.key)
			p.out[nd.rank] = append(p.out[nd.rank], copyItem{key: nd.key, path: path})
		case nd.rank == me:
			from[provider] = true
		}
	}
	if len(lost) > 0 {
		return nil, fmt.Errorf("checkpoint %d: spill files unreadable where their rank runs now, and no rank holds a copy: %s (the job's ranks share one host label, so files are kept by reference: run a spare on the same host, or label the hosts with PGAS_HOST): %w",
			st.c, lost, ErrLost)
	}
	p.from = slices.Sorted(maps.Keys(from))
	return p, nil
}
