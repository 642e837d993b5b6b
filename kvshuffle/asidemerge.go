package kvshuffle

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
)

// task is one piece of merger work, chosen under a.mu.
type task struct {
	kind    int // taskSpill, taskSort, taskMergeRuns, taskMergeFiles
	batches []*batch
	runs    []*memRun
	files   []*spillFile
	reserve int64 // memory reserved for the output
}

const (
	taskSpill = iota
	taskSortChunks
	taskSort
	taskMergeRuns
	taskMergeFiles
)

// merger sorts the index of every chunk as it arrives (each frame becomes
// a sorted run), merges the chunks of a sealed batch into one run, merges
// runs when there are too many, spills everything in memory when the drain
// waits for memory, and prepares the final merge once every source has
// ended. The final merge reads the runs, the spill files and the chunks of
// the last batch in place.
//
// A task cut short by ctx's end leaves its inputs listed, so the loop
// stops there: picking the same task again would spin until the end of
// the process, with stop (and a rollback) waiting for it.
func (a *aside) merger(ctx context.Context) error {
	for ctx.Err() == nil {
		a.mu.Lock()
		t, err := a.nextTaskLocked()
		if err != nil {
			a.mu.Unlock()
			return err
		}
		if t == nil {
			ch := a.changed
			a.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return nil
			}
		}
		a.mu.Unlock()
		if err := a.run(ctx, t); err != nil {
			return err
		}
	}
	return nil
}

func (a *aside) nextTaskLocked() (*task, error) {
	s := a.s
	budget := s.cfg.MemoryBudget
	if a.recvStarted {
		return nil, nil
	}
	ended := a.nEnded == len(a.ended)
	if ended && len(a.builder.chunks) > 0 {
		a.sealLocked() // nothing more arrives: the open block is complete
	}
	spill := func() (*task, error) {
		if s.cfg.SpillDir == "" {
			return nil, fmt.Errorf("%w: holding %d bytes, MemoryBudget is %d: set SpillDir or raise MemoryBudget", ErrBudget, a.mem, budget)
		}
		if len(a.sealed) == 0 && len(a.runs) == 0 {
			a.sealLocked()
		}
		t := &task{kind: taskSpill, batches: slices.Clone(a.sealed), runs: slices.Clone(a.runs)}
		if len(t.runs) == 0 && len(t.batches) > 1 && a.wholeBlocks() {
			// Large blocks: spill the oldest alone, written as it lies
			// once sorted (no merge); the drain fills the next meanwhile.
			t.batches = t.batches[:1]
		}
		if len(t.batches) == 0 && len(t.runs) == 0 {
			a.pressure = false
			return nil, nil
		}
		return t, nil
	}
	if cu := a.cutSpillLocked(); cu != nil {
		// A checkpoint's data first, and nothing that would mix it with
		// data that arrived after the checkpoint.
		return &task{kind: taskSpill, batches: slices.Clone(cu.batches), runs: slices.Clone(cu.runs)}, nil
	}
	if a.pressure || a.mem > budget {
		return spill()
	}
	if len(a.unsorted) > 0 {
		t := &task{kind: taskSortChunks, batches: []*batch{{chunks: a.unsorted}}}
		a.unsorted = nil
		return t, nil
	}
	if !ended && s.cfg.SpillDir != "" && len(a.sealed) > 0 && a.mem+a.blockCost() > budget {
		// The drain will want a block that does not fit: spill the sealed
		// blocks now, while it fills the open one.
		return spill()
	}
	if !ended && len(a.sealed)+len(a.runs) > s.cfg.MergeFanIn {
		if s.cfg.SpillDir != "" {
			return spill()
		}
		// Without a spill directory, merge the sealed batches into a run
		// in memory so that the final merge's fan-in stays bounded.
		bs := slices.Clone(a.sealed)
		var size int64
		for _, b := range bs {
			size += b.bytes
		}
		if a.mem+size > budget {
			return spill()
		}
		a.addMemLocked(size)
		return &task{kind: taskMergeRuns, batches: bs, reserve: size}, nil
	}
	if len(a.runs) > s.cfg.MergeFanIn {
		rs := slices.Clone(a.runs)
		slices.SortFunc(rs, func(x, y *memRun) int { return cmp.Compare(len(x.data), len(y.data)) })
		rs = rs[:s.cfg.MergeFanIn]
		var size int64
		for _, r := range rs {
			size += int64(len(r.data))
		}
		if a.mem+size > budget {
			return spill()
		}
		a.addMemLocked(size)
		return &task{kind: taskMergeRuns, runs: rs, reserve: size}, nil
	}
	if ended && !a.final {
		if len(a.files) > s.cfg.MergeFanIn {
			fs := slices.Clone(a.files)
			slices.SortFunc(fs, func(x, y *spillFile) int { return cmp.Compare(x.size, y.size) })
			return &task{kind: taskMergeFiles, files: fs[:s.cfg.MergeFanIn]}, nil
		}
		a.final = true
		a.signalLocked()
	}
	return nil, nil
}

// run performs a task outside a.mu; its inputs stay listed (and visible
// to checkpoints) until the output replaces them.
func (a *aside) run(ctx context.Context, t *task) error {
	s := a.s
	if t.kind == taskSortChunks {
		for _, c := range t.batches[0].chunks {
			a.sortChunk(c)
			if ctx.Err() != nil {
				return nil
			}
		}
		return nil
	}
	if c := t.block(); c != nil && a.wholeBlocks() {
		a.sortChunk(c)
		a.mu.Lock()
		inOrder := c.inOrder
		a.mu.Unlock()
		if inOrder {
			return a.spillBlock(ctx, t, c)
		}
	}
	var srcs []source
	var in int64 // memory the inputs hold
	for _, b := range t.batches {
		for _, c := range b.chunks {
			a.sortChunk(c)
			srcs = append(srcs, &chunkSource{c: c})
		}
		in += b.cost()
	}
	for _, r := range t.runs {
		srcs = append(srcs, &runSource{data: r.data})
		in += int64(len(r.data))
	}
	for _, f := range t.files {
		fsrc, err := openSpill(f, s.cfg.IOBufferSize, s.cfg.MaxPairSize)
		if err != nil {
			for _, x := range srcs {
				x.close()
			}
			return err
		}
		srcs = append(srcs, fsrc)
	}
	m := newMerge(s.ord, srcs)
	var run *memRun
	var file *spillFile
	var err error
	switch t.kind {
	case taskSort, taskMergeRuns:
		run, err = mergeToMemory(m, t.reserve)
		s.st.merges.Add(1)
	default:
		var dir string
		if dir, err = a.spillDir(); err == nil {
			a.wbuf = spillBuffer(a.wbuf, s.cfg.IOBufferSize)
			file, err = mergeTo(ctx, m, dir, a.wbuf, s.cfg.PageCache)
		}
	}
	if cerr := m.close(); err == nil {
		err = cerr
	}
	return a.done(ctx, t, run, file, err, in, len(srcs))
}

// wholeBlocks reports whether sealed blocks are spilled one by one, each
// written as it lies once sorted, instead of several merged into one
// file: when they are large against the budget (a quarter of it or more),
// so that the files stay few. The spill then costs one sequential copy
// and no comparison; the final merge, which waits on the disk, does the
// merging.
func (a *aside) wholeBlocks() bool {
	return a.s.ord.bytewise && a.s.cfg.RunSize*4 >= a.s.cfg.MemoryBudget
}

// block returns the task's block when the task is a spill of a single
// block and nothing else.
func (t *task) block() *chunk {
	if t.kind != taskSpill || len(t.runs) > 0 || len(t.files) > 0 || len(t.batches) != 1 || len(t.batches[0].chunks) != 1 {
		return nil
	}
	return t.batches[0].chunks[0]
}

// spillBlock writes a block whose pairs lie in key order (sortBlock) to
// a spill file: its data is the file's framed pairs.
func (a *aside) spillBlock(ctx context.Context, t *task, c *chunk) error {
	s := a.s
	dir, err := a.spillDir()
	var file *spillFile
	if err == nil {
		a.wbuf = spillBuffer(a.wbuf, s.cfg.IOBufferSize)
		var w *spillWriter
		if w, err = createSpill(dir, a.wbuf, s.cfg.PageCache); err == nil {
			if err = w.put(c.data); err == nil {
				w.pairs, w.n = uint64(len(c.ents)), int64(len(c.data))
				if file, err = w.finish(); err == nil {
					s.st.blockSpills.Add(1)
				}
			} else {
				w.abort()
			}
		}
	}
	return a.done(ctx, t, nil, file, err, t.batches[0].cost(), 1)
}

// done retires a task's inputs (in: the memory they held) and lists its
// output (run or file), or takes back its reservation after err.
func (a *aside) done(ctx context.Context, t *task, run *memRun, file *spillFile, err error, in int64, inputs int) error {
	s := a.s
	a.mu.Lock()
	defer a.mu.Unlock()
	if err != nil {
		a.addMemLocked(-t.reserve)
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	if err := a.cutReplaceLocked(t, run, file); err != nil {
		return err
	}
	for _, b := range t.batches {
		a.sealed = slices.DeleteFunc(a.sealed, func(x *batch) bool { return x == b })
	}
	a.recycleLocked(t.batches)
	for _, r := range t.runs {
		a.runs = slices.DeleteFunc(a.runs, func(x *memRun) bool { return x == r })
	}
	for _, f := range t.files {
		a.dropFileLocked(f)
	}
	if run != nil {
		a.runs = append(a.runs, run)
	}
	if file != nil {
		file.live = true
		a.files = append(a.files, file)
		a.owned[file.path] = file
		s.st.spills.Add(1)
		s.st.spillBytes.Add(uint64(file.size))
		noteSpill(file.size)
		s.log.Debug("spilled", "file", file.path, "bytes", file.size, "pairs", file.pairs, "inputs", inputs)
	}
	a.addMemLocked(-in)
	if t.kind == taskSpill {
		a.pressure = false
	}
	a.signalLocked()
	return nil
}

// sortChunk sorts c (the merger, outside a.mu): a block of the pool in
// bytewise order is moved into key order (blockSorter), anything else has
// its index sorted in place.
func (a *aside) sortChunk(c *chunk) {
	a.mu.Lock()
	sorted := c.sorted
	a.mu.Unlock()
	if sorted {
		return
	}
	if !c.pooled || !a.s.ord.bytewise || len(c.ents) < minPhysSort {
		a.s.ord.sortEnts(c.data, c.ents, &a.sortTmp)
		a.mu.Lock()
		c.sorted = true
		a.mu.Unlock()
		return
	}
	data, es := a.bsort.sortBlock(c.data, c.ents, int(a.s.cfg.RunSize))
	a.mu.Lock()
	old, oldEnts := c.data, c.ents
	c.data, c.ents, c.sorted, c.inOrder = data, es, true, true
	a.mu.Unlock()
	a.bsort.recycle(old, oldEnts)
}

// spillDir returns this shuffle's spill directory, creating it.
func (a *aside) spillDir() (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.s.waitIfDiskLost(&a.mu)
	if a.dir != "" {
		if _, err := os.Stat(a.dir); err != nil {
			a.dir = "" // removed under us (a cleaner, a lost disk): make another
		}
	}
	if a.dir == "" {
		if err := os.MkdirAll(a.s.cfg.SpillDir, 0o755); err != nil {
			return "", fmt.Errorf("spill directory: %w", err)
		}
		dir, err := os.MkdirTemp(a.s.cfg.SpillDir, fmt.Sprintf("kvshuffle-r%d-", a.s.rank))
		if err != nil {
			return "", fmt.Errorf("spill directory: %w", err)
		}
		a.dir = dir
	}
	return a.dir, nil
}

// dropFileLocked takes f out of the live set and removes it from disk
// unless a checkpoint pins it.
func (a *aside) dropFileLocked(f *spillFile) {
	a.files = slices.DeleteFunc(a.files, func(x *spillFile) bool { return x == f })
	f.live = false
	a.gcFileLocked(f)
}

func (a *aside) gcFileLocked(f *spillFile) {
	if f.live || a.mk.isPinned(f.path) {
		return
	}
	if err := os.Remove(f.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		a.s.log.Warn("spill file not removed", "file", f.path, "err", err)
	}
	delete(a.owned, f.path)
}

// removeAll deletes every file the shuffle owns and its directory.
func (a *aside) removeAll(keepPinned bool) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var first error
	kept := false
	for path, f := range a.owned {
		if keepPinned && f != nil && a.mk.isPinned(path) {
			kept = true
			continue
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) && first == nil {
			first = err
		}
	}
	clear(a.owned)
	a.files, a.runs, a.sealed, a.builder, a.open, a.unsorted, a.mem = nil, nil, nil, &batch{}, nil, nil, 0
	a.post, a.postOpen = nil, nil
	if a.dir != "" && !kept {
		if err := os.Remove(a.dir); err != nil && !errors.Is(err, os.ErrNotExist) && first == nil {
			first = err
		}
		a.dir = ""
	}
	return first
}
