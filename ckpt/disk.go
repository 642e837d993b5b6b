package ckpt

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gaspigo/gaspigo/internal/durable"
	"github.com/gaspigo/gaspigo/pgas"
)

// Disk level.
//
// Dir/ckpt-<id>/rank-<r>.snap is one rank's snapshot:
//
//	header (see header.go) | payload | trailer
//
// and the trailer is one CRC32C per chunk of payload, then the chunk
// count (u32), the chunk size (u32), the CRC32C of the chunk CRCs (u32)
// and "GCKE". The chunk CRCs let a reader say where a file is damaged. Each file is written
// to a temporary name, synced, renamed and its directory synced. Rank 0
// writes Dir/ckpt-<id>/manifest.json last, once every rank has reported
// its file (size and whole-file CRC32C) through a one-sided write into
// rank 0's board: a checkpoint directory is complete exactly when its
// manifest exists. Rank 0 keeps the newest Config.DiskKeep complete ones.

// diskChunk is the chunk size the writer uses (a variable so that tests
// can exercise many chunks); readers take it from the trailer.
var diskChunk = 1 << 20

const (
	minChunk       = 1 << 10
	maxChunk       = 1 << 26
	trailerFooter  = 16
	manifestName   = "manifest.json"
	manifestFormat = "gaspigo-ckpt"
	maxManifest    = 64 << 20
)

var trailerMagic = [4]byte{'G', 'C', 'K', 'E'}

func ckptDirName(id uint64) string { return "ckpt-" + strconv.FormatUint(id, 10) }
func rankFileName(r int) string    { return "rank-" + strconv.Itoa(r) + ".snap" }

// parseCkptDir returns the id of a directory named ckpt-<id> (canonical
// decimal only).
func parseCkptDir(name string) (uint64, bool) {
	s, ok := strings.CutPrefix(name, "ckpt-")
	if !ok {
		return 0, false
	}
	id, err := strconv.ParseUint(s, 10, 64)
	if err != nil || ckptDirName(id) != name {
		return 0, false
	}
	return id, true
}

// manifest lists the files of one complete disk checkpoint.
type manifest struct {
	Format  string         `json:"format"`
	Version int            `json:"version"`
	ID      uint64         `json:"id"`
	Gen     uint64         `json:"gen"`
	Ranks   int            `json:"ranks"`
	Written time.Time      `json:"written"`
	Files   []manifestFile `json:"files"`
}

type manifestFile struct {
	Rank   int    `json:"rank"`
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	CRC32C uint32 `json:"crc32c"`
}

// diskState is the disk writer's queue and progress, under c.mu.
type diskState struct {
	jobs        []diskJob
	running     bool
	wake        chan struct{}
	seq         uint64 // records sent to rank 0
	queued      uint64 // id of the last job queued
	hasQueued   bool
	lastErr     error
	manifest    uint64 // rank 0: id of the last manifest written
	hasManifest bool
	manifester  bool
	// After a restore to base in generation minGen, checkpoints above base
	// count only from the new timeline (gen >= minGen).
	base   uint64
	minGen uint64
}

// diskRestoredLocked resets the disk level's bookkeeping after a restore to
// id in generation gen. c.mu is held.
func (c *Checkpointer) diskRestoredLocked(id, gen uint64) {
	c.disk.base, c.disk.minGen = id, gen
	c.disk.hasQueued = false
	if c.disk.hasManifest && c.disk.manifest > id {
		c.disk.manifest = id
	}
}

type diskJob struct {
	id, gen    uint64
	buf        int
	hdrLen     int
	payloadLen int64
}

func (c *Checkpointer) enqueueDiskLocked(b int) {
	s := c.bufs[b]
	c.bufs[b].busy++
	c.disk.jobs = append(c.disk.jobs, diskJob{id: s.id, gen: s.gen, buf: b, hdrLen: s.hdrLen, payloadLen: s.payloadLen})
	c.disk.queued, c.disk.hasQueued = s.id, true
	c.diskWake()
}

func (c *Checkpointer) diskWake() {
	if c.disk.wake == nil {
		return
	}
	select {
	case c.disk.wake <- struct{}{}:
	default:
	}
}

// diskWriter writes committed snapshots in commit order and reports each
// file to rank 0.
func (c *Checkpointer) diskWriter() {
	c.reserveFDs()
	for {
		c.mu.Lock()
		var j diskJob
		ok := len(c.disk.jobs) > 0
		if ok {
			j = c.disk.jobs[0]
			c.disk.jobs = c.disk.jobs[1:]
			c.disk.running = true
		}
		wake := c.disk.wake
		c.mu.Unlock()
		if !ok {
			select {
			case <-wake:
				continue
			case <-c.ctx.Done():
				return
			}
		}
		size, crc, werr := c.writeSnapRetrying(j)
		c.mu.Lock()
		c.bufs[j.buf].busy--
		c.signalLocked()
		c.mu.Unlock()
		err := werr
		if err == nil {
			err = c.report(j, size, crc)
		}
		c.mu.Lock()
		c.disk.running = false
		c.disk.lastErr = err
		// A file that could not be written is lost. A report that failed
		// because a rank failed (rank 0, which writes manifests, or the
		// epoch moved on) is part of that failure: the checkpoint is in
		// memory, the job recovers and its next checkpoint supersedes it.
		lost := err != nil && c.ctx.Err() == nil && (werr != nil || !pgas.NeedsRecovery(err))
		superseded := err != nil && c.ctx.Err() == nil && !lost
		if lost {
			c.noteLostLocked(j.id, err) // before running is seen false: VerifyDisk counts it
		}
		rank := c.rank
		if err != nil {
			c.st.DiskErrors++
		} else {
			c.st.DiskWrites++
			c.st.DiskBytes += uint64(size)
		}
		c.signalLocked()
		c.mu.Unlock()
		if lost {
			c.logLost(rank, j.id, "write", err)
		}
		if superseded {
			c.log.Warn("disk checkpoint left incomplete by a rank failure; the next one supersedes it", "rank", rank, "id", j.id, "err", err)
		}
	}
}

// writeSnap writes local buffer j.buf to Dir/ckpt-<id>/rank-<r>.snap.
func (c *Checkpointer) writeSnap(j diskJob) (int64, uint32, error) {
	seg, err := c.rt.Segment(c.local)
	if err != nil {
		return 0, 0, err
	}
	c.mu.Lock()
	rank := c.rank
	c.mu.Unlock()
	buf := seg.Bytes()[c.bufOff(j.buf):]
	dir := filepath.Join(c.cfg.Dir, ckptDirName(j.id))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, 0, err
	}
	if err := durable.Sync(c.cfg.Dir); err != nil {
		return 0, 0, err
	}
	final := filepath.Join(dir, rankFileName(rank))
	tmp := final + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return 0, 0, err
	}
	var crc uint32
	var size int64
	write := func(b []byte) error {
		if _, err := f.Write(b); err != nil {
			return err
		}
		crc = crc32.Update(crc, castagnoli, b)
		size += int64(len(b))
		return nil
	}
	payload := buf[headerArea : headerArea+j.payloadLen]
	err = write(buf[:j.hdrLen])
	if err == nil {
		err = write(payload)
	}
	if err == nil {
		err = write(encodeTrailer(payload))
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, final)
	}
	if err == nil {
		err = durable.Sync(dir)
	}
	if err != nil {
		os.Remove(tmp)
		return 0, 0, err
	}
	return size, crc, nil
}

func encodeTrailer(payload []byte) []byte {
	chunk := diskChunk
	nch := (len(payload) + chunk - 1) / chunk
	t := make([]byte, 4*nch+trailerFooter)
	for i := 0; i < nch; i++ {
		end := min((i+1)*chunk, len(payload))
		binary.LittleEndian.PutUint32(t[4*i:], crc32c(payload[i*chunk:end]))
	}
	binary.LittleEndian.PutUint32(t[4*nch:], uint32(nch))
	binary.LittleEndian.PutUint32(t[4*nch+4:], uint32(chunk))
	binary.LittleEndian.PutUint32(t[4*nch+8:], crc32c(t[:4*nch]))
	copy(t[4*nch+12:], trailerMagic[:])
	return t
}

// report tells rank 0 that this rank's file for j.id is durable: a record
// (id, gen, size, file CRC, record CRC) written into rank 0's board, then
// a notification.
func (c *Checkpointer) report(j diskJob, size int64, crc uint32) error {
	seg, err := c.rt.Segment(c.local)
	if err != nil {
		return err
	}
	c.mu.Lock()
	rank := c.rank
	ring := c.disk.seq % recordRing
	c.disk.seq++
	c.mu.Unlock()
	rec := seg.Bytes()[c.recordOff() : c.recordOff()+recordLen]
	le := binary.LittleEndian
	le.PutUint64(rec[0:], j.id+1)
	le.PutUint64(rec[8:], j.gen)
	le.PutUint64(rec[16:], uint64(size))
	le.PutUint32(rec[24:], crc)
	le.PutUint32(rec[28:], crc32c(rec[:28]))
	q := c.cfg.DiskQueue
	dst := c.boardOff() + int64(rank*recordRing+int(ring))*recordLen
	ctx := c.ctx
	err = c.rt.Write(ctx, q, 0, pgas.Loc{Seg: c.local, Off: dst}, pgas.Loc{Seg: c.local, Off: c.recordOff()}, recordLen)
	if err == nil {
		err = c.rt.Notify(ctx, q, 0, c.local, boardNotify, 1)
	}
	if werr := c.rt.Wait(ctx, q); err == nil {
		err = werr
	}
	return err
}

// startManifester starts rank 0's manifest writer once.
func (c *Checkpointer) startManifester() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cfg.Dir == "" || c.rank != 0 || c.disk.manifester || c.closed.Load() {
		return
	}
	c.disk.manifester = true
	c.goFunc(c.manifester)
}

// manifester runs on rank 0: at each board notification it looks for a
// checkpoint that every rank has reported and writes its manifest.
func (c *Checkpointer) manifester() {
	for {
		if _, err := c.rt.NotifyWaitSome(c.ctx, c.local, boardNotify, 1); err != nil {
			return
		}
		c.rt.NotifyReset(c.local, boardNotify)
		if err := c.scanBoard(); err != nil && c.ctx.Err() == nil {
			c.mu.Lock()
			c.st.DiskErrors++
			c.noteLostLocked(0, err)
			c.mu.Unlock()
			c.logLost(0, 0, "manifest", err)
		}
	}
}

type boardRecord struct {
	size int64
	crc  uint32
}

func (c *Checkpointer) scanBoard() error {
	seg, err := c.rt.Segment(c.local)
	if err != nil {
		return err
	}
	c.mu.Lock()
	n := c.n
	last, hasLast := c.disk.manifest, c.disk.hasManifest
	base, minGen := c.disk.base, c.disk.minGen
	c.mu.Unlock()
	board := seg.Bytes()[c.boardOff():]
	recs := make([]map[pair]boardRecord, n)
	var rec [recordLen]byte
	le := binary.LittleEndian
	for r := 0; r < n; r++ {
		recs[r] = make(map[pair]boardRecord)
		for k := 0; k < recordRing; k++ {
			copy(rec[:], board[(r*recordRing+k)*recordLen:])
			if le.Uint64(rec[0:]) == 0 || le.Uint32(rec[28:]) != crc32c(rec[:28]) {
				continue // empty, or torn by a write in progress
			}
			p := pair{le.Uint64(rec[0:]) - 1, le.Uint64(rec[8:])}
			recs[r][p] = boardRecord{size: int64(le.Uint64(rec[16:])), crc: le.Uint32(rec[24:])}
		}
	}
	// Every checkpoint all ranks reported and not yet in a manifest, oldest
	// first (two may complete between scans).
	var ready []pair
	for p := range recs[0] {
		all := true
		for r := 1; r < n && all; r++ {
			_, all = recs[r][p]
		}
		if all && (!hasLast || p.id > last) && (p.id <= base || p.gen >= minGen) {
			ready = append(ready, p)
		}
	}
	slices.SortFunc(ready, func(a, b pair) int { return cmp.Compare(a.id, b.id) })
	for _, p := range ready {
		m := manifest{Format: manifestFormat, Version: 1, ID: p.id, Gen: p.gen, Ranks: n, Written: time.Now().UTC()}
		for r := 0; r < n; r++ {
			br := recs[r][p]
			m.Files = append(m.Files, manifestFile{Rank: r, Name: rankFileName(r), Size: br.size, CRC32C: br.crc})
		}
		if err := writeManifest(filepath.Join(c.cfg.Dir, ckptDirName(p.id)), &m); err != nil {
			return err
		}
		if err := c.cleanup(c.cfg.Dir); err != nil {
			return err
		}
		c.mu.Lock()
		c.disk.manifest, c.disk.hasManifest = p.id, true
		c.st.Manifests++
		c.signalLocked()
		c.mu.Unlock()
		c.log.Info("disk checkpoint complete", "id", p.id, "dir", c.cfg.Dir)
	}
	return nil
}

func writeManifest(dir string, m *manifest) error {
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, manifestName+".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(append(data, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, manifestName))
	}
	if err == nil {
		err = durable.Sync(dir)
	}
	return err
}

// listCkptDirs returns the ids of the ckpt-<id> directories in dir,
// newest first.
func listCkptDirs(dir string) ([]uint64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var ids []uint64
	for _, e := range ents {
		if id, ok := parseCkptDir(e.Name()); ok && e.IsDir() {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	slices.Reverse(ids)
	return ids, nil
}

// cleanup keeps the newest DiskKeep complete checkpoints and everything
// newer than the oldest of them; older directories go.
func (c *Checkpointer) cleanup(dir string) error {
	ids, err := listCkptDirs(dir)
	if err != nil {
		return err
	}
	complete := 0
	cutoff := uint64(0)
	for _, id := range ids {
		if _, err := os.Stat(filepath.Join(dir, ckptDirName(id), manifestName)); err == nil {
			complete++
			if complete == c.cfg.DiskKeep {
				cutoff = id
				break
			}
		}
	}
	if complete < c.cfg.DiskKeep {
		return nil
	}
	var errs []error
	for _, id := range ids {
		if id < cutoff {
			if err := os.RemoveAll(filepath.Join(dir, ckptDirName(id))); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// pruneAbove moves the checkpoint directories above id out of the way,
// renaming ckpt-<x> to ckpt-<x>.abandoned-<unix nanoseconds>: they belong
// to a timeline the job rolled back from (incomplete, or refused by some
// rank), the new timeline reuses their names, and a damaged file is kept
// for inspection rather than deleted.
func (c *Checkpointer) pruneAbove(dir string, id uint64) {
	ids, err := listCkptDirs(dir)
	if err != nil {
		return
	}
	for _, x := range ids {
		if x <= id {
			continue
		}
		from := filepath.Join(dir, ckptDirName(x))
		to := fmt.Sprintf("%s.abandoned-%d", from, time.Now().UnixNano())
		if err := os.Rename(from, to); err == nil {
			c.log.Warn("moved aside a disk checkpoint of an abandoned timeline", "id", x, "to", to)
		}
	}
}

// FlushDisk waits until this rank has written every checkpoint committed
// so far to the disk level and, on rank 0, until the manifest of the last
// one is written. It returns a *DiskError (ErrDiskLost) once any disk
// checkpoint of this rank was lost, else the last disk error, if any. With
// no disk level it returns nil at once. It is not collective: on rank 0 it
// waits for a manifest that another rank's lost write never completes; use
// VerifyDisk to end a job.
func (c *Checkpointer) FlushDisk(ctx context.Context) error {
	if c.cfg.Dir == "" {
		return nil
	}
	c.mu.Lock()
	target, has := c.disk.queued, c.disk.hasQueued
	c.mu.Unlock()
	if !has {
		return nil
	}
	var lastErr error
	err := c.waitFor(ctx, "the disk level", func() bool {
		if len(c.disk.jobs) > 0 || c.disk.running {
			return false
		}
		if c.disk.lastErr != nil {
			lastErr = c.disk.lastErr
			return true
		}
		return c.rank != 0 || (c.disk.hasManifest && c.disk.manifest >= target)
	})
	if err != nil {
		return err
	}
	if derr := c.DiskErr(); derr != nil {
		return derr
	}
	return lastErr
}

// LoadFromDisk restores every rank from the newest complete checkpoint in
// dir (one whose manifest exists and names as many ranks as the job has)
// that every rank can read intact, and returns its id. It is collective,
// and does everything Restore does afterwards (mirror setup, rebuild).
// A damaged file (bad header or checksum, truncated, size or CRC differing
// from the manifest) is refused with a *FileError naming the file and
// offset, and the ranks fall back together to the previous complete
// checkpoint. ErrNoCheckpoint when none is usable.
func (c *Checkpointer) LoadFromDisk(ctx context.Context, dir string) (uint64, error) {
	if dir == "" {
		return 0, fmt.Errorf("ckpt: load from disk: empty directory: %w", ErrInvalid)
	}
	return c.recoverFrom(ctx, dir)
}

// prepareFromDisk agrees with the other ranks on the newest checkpoint in
// dir that every rank can load, and loads this rank's file into a local
// buffer. diag says why newer checkpoints were refused on this rank.
func (c *Checkpointer) prepareFromDisk(ctx context.Context, dir string) (ch *choice, found bool, diag, err error) {
	c.mu.Lock()
	me, n, committed := c.rank, c.n, c.committed
	c.mu.Unlock()
	b := 0
	if committed == 0 {
		b = 1
	}
	if err := c.waitFor(ctx, "the snapshot buffer", func() bool { return c.bufs[b].busy == 0 }); err != nil {
		return nil, false, nil, err
	}
	ids, lerr := listCkptDirs(dir)
	var errs []error
	if lerr != nil {
		errs = append(errs, lerr)
	}
	// tried remembers refusals; inBuf is the checkpoint now in buffer b.
	tried := make(map[uint64]bool)
	var inBuf *choice
	load := func(id uint64) *choice {
		if inBuf != nil && inBuf.p.id == id {
			return inBuf
		}
		if tried[id] {
			return nil
		}
		ch, err := c.loadSnap(dir, id, me, n, b)
		if err != nil {
			tried[id] = true
			errs = append(errs, err)
			c.log.Warn("disk checkpoint refused", "rank", me, "id", id, "err", err)
		}
		inBuf = ch
		return ch
	}
	search := newDiskSearch(ids)
	for {
		mine, ok := search.vote(func(id uint64) bool { return load(id) != nil })
		if !ok {
			break
		}
		v := []uint64{mine}
		if err := pgas.Allreduce(ctx, c.rt, nil, v, pgas.OpMin); err != nil {
			return nil, false, nil, err
		}
		x, has, ok := search.candidate(v[0])
		if !ok {
			return nil, false, errors.Join(errs...), nil
		}
		var got *choice
		if has {
			got = load(x)
		}
		f := []uint64{0}
		if got != nil {
			f[0] = 1
		}
		if err := pgas.Allreduce(ctx, c.rt, nil, f, pgas.OpMin); err != nil {
			return nil, false, nil, err
		}
		done, more := search.settle(x, f[0] == 1)
		if done {
			return got, true, nil, nil
		}
		if !more {
			break
		}
	}
	return nil, false, errors.Join(errs...), nil
}

// loadSnap loads and fully verifies this rank's file of checkpoint id into
// local buffer b.
func (c *Checkpointer) loadSnap(dir string, id uint64, me, n, b int) (*choice, error) {
	ch := &choice{buf: b}
	if err := c.loadSnapInto(dir, id, me, n, b, ch); err != nil {
		return nil, err
	}
	return ch, nil
}

func (c *Checkpointer) loadSnapInto(dir string, id uint64, me, n, b int, ch *choice) error {
	cdir := filepath.Join(dir, ckptDirName(id))
	m, err := readManifest(cdir, id)
	if err != nil {
		return err
	}
	if m.Ranks != n {
		return fmt.Errorf("ckpt: %s: written by a job of %d ranks, this job has %d", filepath.Join(cdir, manifestName), m.Ranks, n)
	}
	mf := m.Files[me]
	path := filepath.Join(cdir, mf.Name)
	seg, err := c.rt.Segment(c.local)
	if err != nil {
		return err
	}
	buf := seg.Bytes()[c.bufOff(b) : c.bufOff(b)+c.slot]
	c.mu.Lock()
	c.bufs[b].valid = false
	c.mu.Unlock()
	h, err := readSnapFile(path, mf, buf, c.slot-headerArea)
	if err != nil {
		return err
	}
	if int(h.Rank) != me || int(h.NumRanks) != n || h.ID != id || h.Gen != m.Gen {
		return &FileError{Path: path, Offset: 16, Err: fmt.Errorf("holds rank %d of %d, checkpoint %d gen %d; want rank %d of %d, checkpoint %d gen %d: %w",
			h.Rank, h.NumRanks, h.ID, h.Gen, me, n, id, m.Gen, ErrCorrupt)}
	}
	ch.p, ch.buf = pair{id, h.Gen}, b
	if err := c.verifyBuf(ch); err != nil {
		return fmt.Errorf("ckpt: %s: %w", path, err)
	}
	return nil
}

func readManifest(cdir string, id uint64) (*manifest, error) {
	path := filepath.Join(cdir, manifestName)
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("ckpt: checkpoint %d is incomplete (no readable manifest): %w", id, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxManifest+1))
	if err != nil {
		return nil, &FileError{Path: path, Err: err}
	}
	if len(data) > maxManifest {
		return nil, &FileError{Path: path, Offset: maxManifest, Err: fmt.Errorf("manifest above %d bytes: %w", maxManifest, ErrCorrupt)}
	}
	var m manifest
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		var se *json.SyntaxError
		var off int64
		if errors.As(err, &se) {
			off = se.Offset
		}
		return nil, &FileError{Path: path, Offset: off, Err: fmt.Errorf("%v: %w", err, ErrCorrupt)}
	}
	bad := func(format string, args ...any) (*manifest, error) {
		return nil, &FileError{Path: path, Err: fmt.Errorf(format+": %w", append(args, ErrCorrupt)...)}
	}
	switch {
	case m.Format != manifestFormat || m.Version != 1:
		return bad("format %q version %d, want %q version 1", m.Format, m.Version, manifestFormat)
	case m.ID != id:
		return bad("manifest is for checkpoint %d, directory for %d", m.ID, id)
	case m.Ranks < 1 || len(m.Files) != m.Ranks:
		return bad("%d files for %d ranks", len(m.Files), m.Ranks)
	}
	for i, f := range m.Files {
		if f.Rank != i || f.Name != rankFileName(i) || f.Size < 0 {
			return bad("file entry %d is rank %d %q size %d, want rank %d %q", i, f.Rank, f.Name, f.Size, i, rankFileName(i))
		}
	}
	return &m, nil
}

// readSnapFile reads and verifies a rank file into buf (header area, then
// payload area of maxPayload bytes). Every refusal is a *FileError with
// the offset at fault.
func readSnapFile(path string, mf manifestFile, buf []byte, maxPayload int64) (Header, error) {
	fail := func(off int64, format string, args ...any) (Header, error) {
		return Header{}, &FileError{Path: path, Offset: off, Err: fmt.Errorf(format+": %w", append(args, ErrCorrupt)...)}
	}
	f, err := os.Open(path)
	if err != nil {
		return Header{}, &FileError{Path: path, Err: err}
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return Header{}, &FileError{Path: path, Err: err}
	}
	size := st.Size()
	if size < mf.Size {
		return fail(size, "truncated: %d bytes, the manifest says %d", size, mf.Size)
	}
	if size > mf.Size {
		return fail(mf.Size, "%d bytes, the manifest says %d (trailing data)", size, mf.Size)
	}
	hb := buf[:headerArea]
	k, err := f.ReadAt(hb[:min(int64(MaxHeaderLen), size)], 0)
	if err != nil && !errors.Is(err, io.EOF) {
		return Header{}, &FileError{Path: path, Err: err}
	}
	h, err := DecodeHeader(hb[:k])
	if err != nil {
		var he *HeaderError
		if errors.As(err, &he) {
			return Header{}, &FileError{Path: path, Offset: int64(he.Offset), Err: err}
		}
		return Header{}, &FileError{Path: path, Err: err}
	}
	hl, pl := int64(h.Len()), int64(h.PayloadLen())
	if pl > maxPayload {
		return fail(48, "payload of %d bytes, above this job's MaxBytes %d", pl, maxPayload)
	}
	// The trailer: chunk CRCs, then the footer at the end of the file. The
	// footer is checked before anything is sized from it.
	tOff := hl + pl
	if size < tOff+trailerFooter {
		return fail(size, "truncated: %d bytes, the header implies at least %d", size, tOff+trailerFooter)
	}
	le := binary.LittleEndian
	var foot [trailerFooter]byte
	fOff := size - trailerFooter
	if _, err := f.ReadAt(foot[:], fOff); err != nil {
		return Header{}, &FileError{Path: path, Offset: fOff, Err: err}
	}
	chunk := int64(le.Uint32(foot[4:]))
	if [4]byte(foot[12:16]) != trailerMagic {
		return fail(fOff+12, "trailer magic %q, want %q", foot[12:16], trailerMagic[:])
	}
	if chunk < minChunk || chunk > maxChunk {
		return fail(fOff+4, "chunk size %d outside %d..%d", chunk, minChunk, maxChunk)
	}
	nch := (pl + chunk - 1) / chunk
	if want := tOff + 4*nch + trailerFooter; size != want {
		if size < want {
			return fail(size, "truncated: %d bytes, the header and trailer imply %d", size, want)
		}
		return fail(want, "%d bytes, the header and trailer imply %d (trailing data)", size, want)
	}
	if int64(le.Uint32(foot[0:])) != nch {
		return fail(fOff, "trailer lists %d chunks, a %d-byte payload in %d-byte chunks has %d", le.Uint32(foot[0:]), pl, chunk, nch)
	}
	tr := make([]byte, 4*nch+trailerFooter)
	if _, err := f.ReadAt(tr, tOff); err != nil {
		return Header{}, &FileError{Path: path, Offset: tOff, Err: err}
	}
	if le.Uint32(foot[8:]) != crc32c(tr[:4*nch]) {
		return fail(tOff, "trailer checksum mismatch")
	}
	payload := buf[headerArea : headerArea+pl]
	fileCRC := crc32.Update(0, castagnoli, hb[:hl])
	for i := int64(0); i < nch; i++ {
		a, e := i*chunk, min((i+1)*chunk, pl)
		if _, err := f.ReadAt(payload[a:e], hl+a); err != nil {
			return Header{}, &FileError{Path: path, Offset: hl + a, Err: err}
		}
		if crc32c(payload[a:e]) != le.Uint32(tr[4*i:]) {
			return fail(hl+a, "bytes [%d, %d) fail their CRC32C", hl+a, hl+e)
		}
		fileCRC = crc32.Update(fileCRC, castagnoli, payload[a:e])
	}
	if got := crc32c(payload); got != h.PayloadCRC {
		return fail(hl, "payload CRC32C %#08x, the header says %#08x", got, h.PayloadCRC)
	}
	fileCRC = crc32.Update(fileCRC, castagnoli, tr)
	if fileCRC != mf.CRC32C {
		return fail(0, "file CRC32C %#08x, the manifest says %#08x", fileCRC, mf.CRC32C)
	}
	return h, nil
}
