package kvshuffle

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"
)

// spillConfig makes a budget far below the data: 4 KiB frames, 64 KiB per
// A task, 16 KiB runs, fan-in 3 so that spill files are merged in passes.
func spillConfig(dir string) func(c *Config) {
	return func(c *Config) {
		c.SpillDir = dir
		c.SlotSize = 4 << 10
		c.MemoryBudget = 64 << 10
		c.RunSize = 16 << 10
		c.MergeFanIn = 3
		c.IOBufferSize = 4 << 10
	}
}

func listFiles(t testing.TB, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && path != dir {
			out = append(out, path)
		}
		return nil
	})
	return out
}

// Rule (spill): with a budget smaller than the data, the result is still
// sorted and complete, the memory held never exceeds the budget, spill
// files are merged in passes, and every file is gone after Recv and Close.
func TestSpillBeyondBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 3
		dir := t.TempDir()
		rts, _ := newJob(t, n, 30)
		shs := newShuffles(t, rts, spillConfig(dir))
		inputs := make([][]kv, n)
		for i := range inputs {
			inputs[i] = randPairs(rand.New(rand.NewPCG(31, uint64(i))), 8000, 3000, 120) // ~600 KB per rank
		}
		got := make([][]kv, n)
		each(t, n, func(i int) error {
			if err := sendAll(shs[i], inputs[i]); err != nil {
				return err
			}
			got[i] = collect(t, shs[i], nil)
			return nil
		})
		expectPartitioned(t, inputs, got, HashPartition)
		budget := int64(64 << 10)
		for i, s := range shs {
			st := s.Stats()
			if st.Spills < 6 {
				t.Errorf("rank %d: %d spill files written, want several (budget %d, received %d bytes)", i, st.Spills, budget, st.BytesReceived)
			}
			if st.MemoryPeak > budget {
				t.Errorf("rank %d: held %d bytes, budget %d", i, st.MemoryPeak, budget)
			}
			if st.SpillFiles != 0 {
				t.Errorf("rank %d: %d spill files still listed after Recv", i, st.SpillFiles)
			}
			t.Logf("rank %d: received %d bytes, peak memory %d, %d spill files written (%d bytes)", i, st.BytesReceived, st.MemoryPeak, st.Spills, st.SpillBytes)
		}
		for _, f := range listFiles(t, dir) {
			if filepath.Ext(f) == ".kvs" {
				t.Errorf("spill file left after Recv: %s", f)
			}
		}
		for _, s := range shs {
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
		}
		if left := listFiles(t, dir); len(left) != 0 {
			t.Errorf("left after Close: %q", left)
		}
	})
}

// A spill file damaged on disk is caught when it is read: ErrCorrupt, no
// crash, no wrong data.
func TestSpillCorruption(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 2
		rts, _ := newJob(t, n, 32)
		shs := newShuffles(t, rts, func(c *Config) {
			spillConfig(t.TempDir())(c)
			c.MergeFanIn = 64 // keep the files as spilled
		})
		each(t, n, func(i int) error {
			return sendAll(shs[i], randPairs(rand.New(rand.NewPCG(33, uint64(i))), 6000, 3000, 100))
		})
		synctest.Wait() // the mergers are done
		a := shs[0].a
		a.mu.Lock()
		if len(a.files) == 0 {
			a.mu.Unlock()
			t.Fatal("no spill file to damage")
		}
		path := a.files[len(a.files)/2].path
		a.mu.Unlock()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)/2] ^= 0x40
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		for range shs[0].Recv(context.Background()) {
		}
		if err := shs[0].Err(); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Recv over a damaged spill file: %v, want ErrCorrupt", err)
		}
	})
}

// Rule (lost disk): after LoseSpillDir the spill directory is gone and no
// later spill or copy of the rank brings it back: they wait, as I/O to a
// lost disk hangs, until the injection's SIGKILL ends the process.
func TestLoseSpillDirStaysLost(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "host1")
	s := &Shuffle{cfg: Config{SpillDir: dir}, copies: newReplicaStore(), diskLost: make(chan struct{})}
	s.a = &aside{s: s}
	spill, err := s.a.spillDir()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(spill, "run-1.kvs"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.copies.ensureDir(s, 0); err != nil {
		t.Fatal(err)
	}
	if err := s.LoseSpillDir(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("spill directory after LoseSpillDir: %v, want it gone", err)
	}
	returned := make(chan string, 2)
	go func() { s.a.spillDir(); returned <- "spillDir" }()
	go func() { s.copies.ensureDir(s, 0); returned <- "ensureDir" }()
	select {
	case who := <-returned:
		t.Fatalf("%s returned after the disk was lost", who)
	case <-time.After(100 * time.Millisecond):
	}
	if _, err := os.Lstat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("spill directory is back: %v", err)
	}
}

// Rule (whole blocks): with blocks of a quarter of the budget, each sealed
// block is spilled alone, written as it lies once sortBlock moved it into
// key order, and the results, checkpoints and roll-backs are those of the
// merging spill. The spill and checkpoint tests run again with blocks
// small enough to be moved, and must see such spills.
func TestSpillWholeBlocks(t *testing.T) {
	old := minPhysSort
	minPhysSort = 16
	defer func() { minPhysSort = old }()
	spillBlocks.Store(0)
	t.Run("beyond-budget", TestSpillBeyondBudget)
	t.Run("roll-back", TestRollBackResend)
	t.Run("async-checkpoint", TestAsyncCheckpoint)
	if spillBlocks.Load() == 0 {
		t.Fatal("no block was spilled as it lies: the tests did not reach spillBlock")
	}
	t.Logf("%d blocks spilled as they lie", spillBlocks.Load())
}

// Rule (stop): a merger whose context has ended returns, even with merge
// work left: a merge cut short leaves its inputs listed, and picking it
// again would keep the merger, and stop with it, going for ever. Not in a
// synctest bubble: a spinning merger never blocks, so the bound is real
// time.
func TestMergerStopsWithWorkLeft(t *testing.T) {
	const n = 2
	rts, _ := newJob(t, n, 34)
	shs := newShuffles(t, rts, func(c *Config) {
		spillConfig(t.TempDir())(c)
		c.MergeFanIn = 64 // keep the files as spilled
	})
	each(t, n, func(i int) error {
		// Enough pairs that a merge pass runs past the merge's context
		// check (every 4096 pairs).
		return sendAll(shs[i], randPairs(rand.New(rand.NewPCG(35, uint64(i))), 30000, 20000, 20))
	})
	s := shs[0]
	s.stop()
	a := s.a
	a.mu.Lock()
	files := len(a.files)
	// The state of a final merge pass about to start: more files than the
	// fan-in, every source ended.
	s.cfg.MergeFanIn = 2
	a.final = false
	a.mu.Unlock()
	if files <= 2 {
		t.Fatalf("%d spill files, want more than the fan-in 2", files)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	done := make(chan error, 1)
	go func() { done <- a.merger(ctx) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("merger after its context ended: %v, want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("merger still ran 30s after its context ended, with merge work left")
	}
}
