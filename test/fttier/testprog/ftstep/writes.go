package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"github.com/gaspigo/gaspigo/pgas"
	"github.com/gaspigo/gaspigo/segments"
)

// With -writes D, every rank also writes, every D, a 24-byte record
// (epoch, proc, count) into its right neighbour's segment 1, at the slot
// of its process (so no other process ever writes that slot), and checks
// its own segment after every step: once this rank has looked at its
// segment in an epoch, a slot that changes while holding an older epoch
// is a write of a replaced process applied in the new epoch, and the run
// fails. With PGAS_SHM_SEGMENTS=1 the writes of same-host ranks are
// direct copies into the neighbour's memory.

const (
	writesSeg  = segments.ID(1)
	recordSize = 24
)

type writer struct {
	rt    *pgas.Runtime
	every time.Duration

	// mu is held by the writer for one write and by the program while it
	// recovers, so that nothing is copied into the segment while it moves.
	mu sync.Mutex

	epoch    uint64         // of the snapshot
	snapshot map[int][]byte // slot -> record, taken at the first check of epoch
	refused  int            // direct copies whose doorbell was refused (fenced)
}

func newWriter(rt *pgas.Runtime, every time.Duration) *writer {
	if every <= 0 {
		return nil
	}
	return &writer{rt: rt, every: every}
}

// create creates the segment (collective): at start, and after every
// recovery (where a survivor keeps its contents).
func (w *writer) create(ctx context.Context) error {
	if w == nil {
		return nil
	}
	_, err := w.rt.SegmentCreate(ctx, writesSeg, int64(recordSize*(w.procs()+1)), nil)
	return err
}

// procs bounds the process IDs: ranks plus the spares the launcher gives.
func (w *writer) procs() int { return 64 }

// run writes until ctx ends.
func (w *writer) run(ctx context.Context, proc int) {
	tick := time.NewTicker(w.every)
	defer tick.Stop()
	for count := uint64(1); ; count++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		w.writeOnce(ctx, proc, count)
	}
}

func (w *writer) writeOnce(ctx context.Context, proc int, count uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	rt := w.rt
	rank, size := rt.Rank(), rt.Size()
	if rank < 0 || size < 2 {
		return
	}
	seg, err := rt.Segment(writesSeg)
	if err != nil {
		return
	}
	scratch := int64(recordSize * w.procs())
	rec := seg.Bytes()[scratch : scratch+recordSize]
	binary.LittleEndian.PutUint64(rec[0:], uint64(rt.Epoch()))
	binary.LittleEndian.PutUint64(rec[8:], uint64(proc))
	binary.LittleEndian.PutUint64(rec[16:], count)
	wctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	before := rt.Stats().DirectWrites
	err = rt.Write(wctx, 1, (rank+1)%size, pgas.Loc{Seg: writesSeg, Off: int64(recordSize * proc)}, pgas.Loc{Seg: writesSeg, Off: scratch}, recordSize)
	if err == nil {
		err = rt.Wait(wctx, 1)
	}
	if err != nil && rt.Stats().DirectWrites > before {
		w.refused++
		if w.refused == 1 {
			fmt.Printf("writer proc=%d: a direct copy's doorbell was refused: %v\n", proc, err)
		}
	}
}

// check compares the segment with the snapshot of this epoch.
func (w *writer) check() error {
	if w == nil {
		return nil
	}
	seg, err := w.rt.Segment(writesSeg)
	if err != nil {
		return err
	}
	epoch := w.rt.Epoch()
	if w.snapshot == nil || w.epoch != epoch {
		w.epoch, w.snapshot = epoch, map[int][]byte{}
		for p := range w.procs() {
			w.snapshot[p] = append([]byte(nil), seg.Bytes()[p*recordSize:(p+1)*recordSize]...)
		}
		return nil
	}
	for p := range w.procs() {
		rec := seg.Bytes()[p*recordSize : (p+1)*recordSize]
		e := binary.LittleEndian.Uint64(rec)
		if e < epoch && string(rec) != string(w.snapshot[p]) {
			return fmt.Errorf("stale write applied: slot of proc %d changed in epoch %d to a record of epoch %d (count %d)",
				p, epoch, e, binary.LittleEndian.Uint64(rec[16:]))
		}
	}
	return nil
}
