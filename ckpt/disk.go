package ckpt

import (
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
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
		if _, err := c.rt.NotifyWaitSome(c.ctx, c.local, boardNotify, 1); err != nil && !errors.Is(err, pgas.ErrStaleEpoch) {
			return
		} // (a report dropped by a view: look at the board all the same)
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
