package ckpt

import (
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/gaspigo/gaspigo/internal/durable"
)

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
	return durable.WriteFile(dir, manifestName, append(data, '\n'), 0o600)
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
