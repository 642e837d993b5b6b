package ckpt

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/gaspigo/gaspigo/pgas"
)

// The disk level's restore, top to bottom: the shared first step
// (restore.go), the search for the checkpoint every rank loads and the
// load of this rank's file (its manifest, then the file with every check),
// then the shared last steps. The files are written by the disk writer
// (disk.go, diskmanifest.go); ReadDiskRank (readrank.go) reads them with
// the same checks outside a job.

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
	r, err := c.beginRestore(ctx, "load from disk", true)
	if err != nil {
		return 0, err
	}

	// This rank's part: the search for the newest checkpoint every rank
	// can load (two allreduces a round), which leaves this rank's file of
	// it in a local buffer.
	ch, diag, err := c.prepareFromDisk(ctx, dir)
	if err != nil {
		return 0, fmt.Errorf("ckpt: %s: %w", r.op, err)
	}
	newGen := r.ag.maxGen
	if ch != nil {
		newGen = max(newGen, ch.p.gen)
	}
	r.laps.lap("prepare")

	failed, err := c.settleRestore(ctx, r, ch != nil, nil, newGen+1)
	if err != nil {
		return 0, err
	}
	if ch == nil {
		if diag != nil {
			return 0, fmt.Errorf("ckpt: %s %s: no complete checkpoint that every rank can read (this rank: %v): %w", r.op, dir, diag, ErrNoCheckpoint)
		}
		return 0, fmt.Errorf("ckpt: %s %s: no complete checkpoint that every rank can read: %w", r.op, dir, ErrNoCheckpoint)
	}
	if failed >= 0 {
		return 0, restoreFailed(r.op, ch.p.id, nil, failed)
	}
	return c.applyRestore(r, ch, "disk")
}

// prepareFromDisk agrees with the other ranks on the newest checkpoint in
// dir that every rank can load (diskSearch, plan.go), and loads this
// rank's file of it into a local buffer; ch is nil when there is none.
// diag says why newer checkpoints were refused on this rank.
func (c *Checkpointer) prepareFromDisk(ctx context.Context, dir string) (ch *choice, diag, err error) {
	c.mu.Lock()
	me, n, committed := c.rank, c.n, c.committed
	c.mu.Unlock()
	b := 0
	if committed == 0 {
		b = 1
	}
	if err := c.waitFor(ctx, "the snapshot buffer", func() bool { return c.bufs[b].busy == 0 }); err != nil {
		return nil, nil, err
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
			return nil, nil, err
		}
		x, has, ok := search.candidate(v[0])
		if !ok {
			return nil, errors.Join(errs...), nil
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
			return nil, nil, err
		}
		done, more := search.settle(x, f[0] == 1)
		if done {
			return got, nil, nil
		}
		if !more {
			break
		}
	}
	return nil, errors.Join(errs...), nil
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
