package ckpt

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"
)

// Rule: a disk checkpoint that cannot be written is never silent. The
// in-memory level goes on committing; the rank that lost the write
// returns a *DiskError naming the checkpoint from FlushDisk and Close,
// even after later checkpoints were written, and VerifyDisk returns
// ErrDiskLost on every rank.
func TestDiskWriteFailureIsLoud(t *testing.T) {
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		j := newTestJob(t, jobOpts{ranks: 3, dir: dir})
		j.checkpoint(1)
		j.each(indexes(3), func(r int) error { return j.ranks[r].ck.VerifyDisk(j.ctx) })
		// Checkpoint 2's directory cannot be made: a file holds its name.
		if err := os.WriteFile(filepath.Join(dir, ckptDirName(2)), []byte("in the way"), 0o600); err != nil {
			t.Fatal(err)
		}
		j.checkpoint(2) // the in-memory level commits it regardless
		j.checkpoint(3)
		j.checkAll(3)

		errs := make([]error, 3)
		var wg sync.WaitGroup
		for r := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[r] = j.ranks[r].ck.VerifyDisk(j.ctx)
			}()
		}
		wg.Wait()
		for r, err := range errs {
			var de *DiskError
			if !errors.Is(err, ErrDiskLost) || !errors.As(err, &de) || !slices.Equal(de.IDs, []uint64{2}) || de.Rank != r {
				t.Errorf("rank %d: VerifyDisk = %v; want a *DiskError for checkpoint 2 of this rank", r, err)
			}
			if err := j.ranks[r].ck.FlushDisk(j.ctx); !errors.Is(err, ErrDiskLost) {
				t.Errorf("rank %d: FlushDisk = %v after a lost write; want ErrDiskLost", r, err)
			}
			if st := j.ranks[r].ck.Stats(); st.DiskLost != 1 || st.DiskWrites != 2 {
				t.Errorf("rank %d: stats DiskLost %d DiskWrites %d; want 1 and 2", r, st.DiskLost, st.DiskWrites)
			}
		}
		if err := j.ranks[1].ck.Close(); !errors.Is(err, ErrDiskLost) {
			t.Errorf("Close = %v; want ErrDiskLost", err)
		}
	})
}

// Rule: when only some ranks lose a write, VerifyDisk still fails on
// every rank, so no rank reports success over an incomplete directory.
func TestVerifyDiskAgreesOnALossElsewhere(t *testing.T) {
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		j := newTestJob(t, jobOpts{ranks: 3, dir: dir})
		j.checkpoint(1)
		j.each(indexes(3), func(r int) error { return j.ranks[r].ck.VerifyDisk(j.ctx) })
		// Only rank 2 loses checkpoint 2: its file name is taken by a directory.
		if err := os.MkdirAll(filepath.Join(dir, ckptDirName(2), rankFileName(2)), 0o700); err != nil {
			t.Fatal(err)
		}
		j.checkpoint(2)
		errs := make([]error, 3)
		var wg sync.WaitGroup
		for r := range 3 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[r] = j.ranks[r].ck.VerifyDisk(j.ctx)
			}()
		}
		wg.Wait()
		for r, err := range errs {
			if !errors.Is(err, ErrDiskLost) {
				t.Errorf("rank %d: VerifyDisk = %v; want ErrDiskLost", r, err)
			}
		}
		var de *DiskError
		if !errors.As(errs[2], &de) || errors.As(errs[0], &de) {
			t.Errorf("only rank 2's error should be its own *DiskError: %v / %v", errs[0], errs[2])
		}
	})
}

func TestFDExhausted(t *testing.T) {
	_, err := os.Open(filepath.Join(t.TempDir(), "missing"))
	if fdExhausted(err) {
		t.Errorf("%v counted as descriptor exhaustion", err)
	}
	if !fdExhausted(&os.PathError{Op: "open", Path: "x", Err: errEMFILE()}) {
		t.Error("EMFILE not recognised")
	}
}

func errEMFILE() error { return syscall.EMFILE }
