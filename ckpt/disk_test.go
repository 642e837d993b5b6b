package ckpt

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
)

// writeDiskCheckpoints runs a job that commits iterations 1..last with the
// disk level on, and waits until the disk level has them.
func writeDiskCheckpoints(t *testing.T, dir string, ranks int, last uint64) {
	j := newTestJob(t, jobOpts{ranks: ranks, dir: dir})
	for iter := uint64(1); iter <= last; iter++ {
		j.checkpoint(iter)
	}
	j.each(indexes(ranks), func(r int) error { return j.ranks[r].ck.FlushDisk(j.ctx) })
	if st := j.ranks[0].ck.Stats(); st.DiskWrites != last || st.Manifests == 0 {
		t.Fatalf("rank 0 disk stats %+v", st)
	}
}

func TestDiskWriteAndLoad(t *testing.T) {
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		writeDiskCheckpoints(t, dir, 4, 3)
	})
	ids, err := listCkptDirs(dir)
	if err != nil || !slices.Equal(ids, []uint64{3, 2}) {
		t.Fatalf("checkpoint directories %v (%v), want [3 2]: the newest two are kept", ids, err)
	}
	m, err := readManifest(filepath.Join(dir, "ckpt-3"), 3)
	if err != nil {
		t.Fatal(err)
	}
	if m.Ranks != 4 || len(m.Files) != 4 || m.Files[2].Name != "rank-2.snap" {
		t.Fatalf("manifest %+v", m)
	}
	for _, f := range m.Files {
		st, err := os.Stat(filepath.Join(dir, "ckpt-3", f.Name))
		if err != nil || st.Size() != f.Size {
			t.Fatalf("%s: %v, size %v, manifest says %d", f.Name, err, st, f.Size)
		}
	}
	leftovers, _ := filepath.Glob(filepath.Join(dir, "*", "*.tmp"))
	if len(leftovers) > 0 {
		t.Fatalf("temporary files left: %v", leftovers)
	}
	// Checkpoints hold user data: owner-only directories and files (dir
	// itself is the test's).
	ckdirs, _ := filepath.Glob(filepath.Join(dir, "ckpt-*"))
	if loose, err := proctest.LoosePerms(ckdirs...); err != nil || len(loose) > 0 || len(ckdirs) == 0 {
		t.Fatalf("disk level readable by others (%v): %v", err, loose)
	}

	// A new job resumes from the disk level.
	synctest.Test(t, func(t *testing.T) {
		j := newTestJob(t, jobOpts{ranks: 4, dir: dir})
		ids := make([]uint64, 4)
		j.each(indexes(4), func(r int) error {
			var err error
			ids[r], err = j.ranks[r].ck.LoadFromDisk(j.ctx, dir)
			return err
		})
		if ids[0] != 3 {
			t.Fatalf("loaded %v, want 3", ids)
		}
		j.checkAll(3)
		j.waitProtected()
		j.checkMirrors(3)
		j.checkpoint(4)
		j.each(indexes(4), func(r int) error { return j.ranks[r].ck.FlushDisk(j.ctx) })
	})
	ids, _ = listCkptDirs(dir)
	if !slices.Equal(ids, []uint64{4, 3}) {
		t.Fatalf("after resuming: %v, want [4 3]", ids)
	}
}

// loadAll runs LoadFromDisk on a fresh job and returns the id (or error).
func loadAll(t *testing.T, dir string, ranks int) (uint64, error) {
	var id uint64
	var lerr error
	synctest.Test(t, func(t *testing.T) {
		j := newTestJob(t, jobOpts{ranks: ranks})
		ids := make([]uint64, ranks)
		errs := make([]error, ranks)
		j.each(indexes(ranks), func(r int) error {
			ids[r], errs[r] = j.ranks[r].ck.LoadFromDisk(j.ctx, dir)
			return nil
		})
		for r := range errs {
			if (errs[r] == nil) != (errs[0] == nil) || ids[r] != ids[0] {
				t.Fatalf("ranks disagree: %v %v", ids, errs)
			}
		}
		id, lerr = ids[0], errs[0]
		if lerr == nil {
			j.checkAll(id)
		}
	})
	return id, lerr
}

func snapPath(dir string, id uint64, rank int) string {
	return filepath.Join(dir, ckptDirName(id), rankFileName(rank))
}

// checkFileRefusal reads a rank file directly and checks the error names
// the file and offset.
func checkFileRefusal(t *testing.T, dir string, id uint64, rank int, offset int64, words ...string) {
	t.Helper()
	m, err := readManifest(filepath.Join(dir, ckptDirName(id)), id)
	if err != nil {
		t.Fatal(err)
	}
	path := snapPath(dir, id, rank)
	buf := make([]byte, headerArea+64<<10)
	_, err = readSnapFile(path, m.Files[rank], buf, 64<<10)
	var fe *FileError
	if !errors.As(err, &fe) || !errors.Is(err, ErrCorrupt) {
		t.Fatalf("readSnapFile = %v, want a *FileError wrapping ErrCorrupt", err)
	}
	if fe.Path != path || fe.Offset != offset {
		t.Fatalf("refused %s at offset %d (%v), want %s at %d", fe.Path, fe.Offset, err, path, offset)
	}
	for _, w := range words {
		if !strings.Contains(err.Error(), w) {
			t.Fatalf("error %q does not say %q", err, w)
		}
	}
}

// smallChunks makes disk files and fetches use many small pieces.
func smallChunks(t *testing.T) {
	oldDisk, oldRead := diskChunk, readChunk
	diskChunk, readChunk = minChunk, 1000
	t.Cleanup(func() { diskChunk, readChunk = oldDisk, oldRead })
}

func TestDiskCorruptionFallsBack(t *testing.T) {
	smallChunks(t)
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) { writeDiskCheckpoints(t, dir, 4, 3) })
	path := snapPath(dir, 3, 2)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	hl := int64(68 + 8*2)          // two regions
	data[hl+2*minChunk+10] ^= 0x40 // in the third chunk
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	checkFileRefusal(t, dir, 3, 2, hl+2*minChunk, "rank-2.snap", "CRC32C", "[2132, 3156)")
	id, err := loadAll(t, dir, 4)
	if err != nil || id != 2 {
		t.Fatalf("LoadFromDisk = %d, %v; want the previous checkpoint 2", id, err)
	}
}

func TestDiskTruncationFallsBack(t *testing.T) {
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) { writeDiskCheckpoints(t, dir, 4, 3) })
	path := snapPath(dir, 3, 1)
	if err := os.Truncate(path, 2000); err != nil {
		t.Fatal(err)
	}
	checkFileRefusal(t, dir, 3, 1, 2000, "truncated")
	id, err := loadAll(t, dir, 4)
	if err != nil || id != 2 {
		t.Fatalf("LoadFromDisk = %d, %v; want 2", id, err)
	}
	// A damaged header is refused at its offset too.
	path2 := snapPath(dir, 2, 0)
	data, _ := os.ReadFile(path2)
	data[0] = 'X'
	os.WriteFile(path2, data, 0o644)
	checkFileRefusal(t, dir, 2, 0, 0, "magic")
	_, err = loadAll(t, dir, 4)
	if !errors.Is(err, ErrNoCheckpoint) || !strings.Contains(err.Error(), "rank-") {
		t.Fatalf("with both checkpoints damaged: %v, want ErrNoCheckpoint naming the files", err)
	}
}

func TestDiskRefusesOtherJobs(t *testing.T) {
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) { writeDiskCheckpoints(t, dir, 4, 2) })
	// A job of another size.
	if _, err := loadAll(t, dir, 3); !errors.Is(err, ErrNoCheckpoint) || !strings.Contains(err.Error(), "4 ranks") {
		t.Fatalf("3-rank job loading a 4-rank checkpoint: %v", err)
	}
	// An incomplete checkpoint (no manifest) is skipped.
	if err := os.Remove(filepath.Join(dir, "ckpt-2", manifestName)); err != nil {
		t.Fatal(err)
	}
	if id, err := loadAll(t, dir, 4); err != nil || id != 1 {
		t.Fatalf("without ckpt-2's manifest: %d, %v; want 1", id, err)
	}
	// A manifest that is not JSON is refused with its offset.
	mp := filepath.Join(dir, "ckpt-1", manifestName)
	os.WriteFile(mp, []byte(`{"format": "gaspigo-ckpt", "version": 1,,}`), 0o644)
	_, err := readManifest(filepath.Join(dir, "ckpt-1"), 1)
	var fe *FileError
	if !errors.As(err, &fe) || fe.Path != mp || fe.Offset == 0 {
		t.Fatalf("bad manifest: %v", err)
	}
	// Unknown fields are refused (a newer format must not be half-read).
	var m map[string]any
	json.Unmarshal([]byte(`{"format":"gaspigo-ckpt","version":1,"id":1,"ranks":1,"files":[{"rank":0,"name":"rank-0.snap","size":1,"crc32c":0}],"extra":1}`), &m)
	data, _ := json.Marshal(m)
	os.WriteFile(mp, data, 0o644)
	if _, err := readManifest(filepath.Join(dir, "ckpt-1"), 1); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("manifest with an unknown field: %v", err)
	}
}

func TestParseCkptDir(t *testing.T) {
	for name, want := range map[string]bool{"ckpt-0": true, "ckpt-17": true, "ckpt-017": false, "ckpt-+1": false, "ckpt-": false, "ckpt-1x": false, "other": false} {
		if _, ok := parseCkptDir(name); ok != want {
			t.Errorf("parseCkptDir(%q) = %v", name, ok)
		}
	}
}

// A running job rolls back to an older disk checkpoint (the newest is
// damaged): the abandoned timeline's directories go, and the redone
// checkpoints get manifests of the new generation.
func TestDiskRollbackMidJob(t *testing.T) {
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		j := newTestJob(t, jobOpts{ranks: 3, dir: dir})
		flush := func() {
			j.each(indexes(3), func(r int) error { return j.ranks[r].ck.FlushDisk(j.ctx) })
		}
		for iter := uint64(1); iter <= 3; iter++ {
			j.checkpoint(iter)
		}
		flush()
		path := snapPath(dir, 3, 1)
		data, _ := os.ReadFile(path)
		data[len(data)/2] ^= 1
		os.WriteFile(path, data, 0o644)
		ids := make([]uint64, 3)
		j.each(indexes(3), func(r int) error {
			var err error
			ids[r], err = j.ranks[r].ck.LoadFromDisk(j.ctx, dir)
			return err
		})
		if ids[0] != 2 {
			t.Fatalf("rolled back to %d, want 2", ids[0])
		}
		j.checkAll(2)
		if got, _ := listCkptDirs(dir); !slices.Equal(got, []uint64{2}) {
			t.Fatalf("after the rollback: %v, want [2] (3 belonged to the abandoned timeline)", got)
		}
		if moved, _ := filepath.Glob(filepath.Join(dir, "ckpt-3.abandoned-*")); len(moved) != 1 {
			t.Fatalf("the damaged checkpoint 3 was not kept aside: %v", moved)
		}
		j.checkpoint(3)
		j.checkpoint(4)
		flush()
		got, _ := listCkptDirs(dir)
		if !slices.Equal(got, []uint64{4, 3}) {
			t.Fatalf("directories %v, want [4 3]", got)
		}
		m, err := readManifest(filepath.Join(dir, "ckpt-3"), 3)
		if err != nil || m.Gen == 0 {
			t.Fatalf("redone checkpoint 3: manifest %+v, %v; want the new generation", m, err)
		}
	})
}
