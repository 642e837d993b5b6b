package ckpt

import (
	"errors"
	"fmt"
	"path/filepath"
)

// DiskSnapshot is one rank's snapshot of a checkpoint on disk, read
// outside a job (ReadDiskRank).
type DiskSnapshot struct {
	Header
	// Ranks is the number of ranks of the job that wrote it.
	Ranks int
	// Regions are the region contents in registration order.
	Regions [][]byte
}

// ReadDiskRank reads rank's snapshot of the newest complete checkpoint in
// dir (the disk level) with every check LoadFromDisk makes (manifest, file
// size, chunk and payload CRCs), whatever the number of ranks of the job
// that wrote it. Checkpoints whose manifest or file for rank fails a check
// are skipped for older ones; the error lists why each was refused. It is
// for programs whose checkpointed state does not depend on the number of
// ranks (some regions identical on every rank), to resume a job on a
// different number of ranks; maxPayload bounds the payload read (bytes).
func ReadDiskRank(dir string, rank int, maxPayload int64) (*DiskSnapshot, error) {
	if dir == "" || rank < 0 || maxPayload < 0 {
		return nil, fmt.Errorf("ckpt: read disk rank %d of %q (max %d bytes): %w", rank, dir, maxPayload, ErrInvalid)
	}
	ids, err := listCkptDirs(dir)
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, id := range ids {
		cdir := filepath.Join(dir, ckptDirName(id))
		m, err := readManifest(cdir, id)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if rank >= m.Ranks {
			errs = append(errs, fmt.Errorf("ckpt: %s: written by a job of %d ranks, no rank %d", cdir, m.Ranks, rank))
			continue
		}
		mf := m.Files[rank]
		buf := make([]byte, headerArea+min(maxPayload, max(0, mf.Size)))
		h, err := readSnapFile(filepath.Join(cdir, mf.Name), mf, buf, maxPayload)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if int(h.Rank) != rank || h.ID != id || int(h.NumRanks) != m.Ranks {
			errs = append(errs, fmt.Errorf("ckpt: %s: holds rank %d of %d, checkpoint %d: %w", cdir, h.Rank, h.NumRanks, h.ID, ErrCorrupt))
			continue
		}
		s := &DiskSnapshot{Header: h, Ranks: m.Ranks}
		off := uint64(headerArea)
		for _, n := range h.Regions {
			s.Regions = append(s.Regions, buf[off:off+n])
			off += n
		}
		return s, nil
	}
	if len(errs) == 0 {
		return nil, fmt.Errorf("ckpt: no checkpoint in %s: %w", dir, ErrNoCheckpoint)
	}
	return nil, fmt.Errorf("ckpt: no readable checkpoint of rank %d in %s: %w", rank, dir, errors.Join(errs...))
}
