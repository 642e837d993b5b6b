package kvshuffle

import (
	"context"
	"fmt"
	"slices"

	"github.com/gaspigo/gaspigo/pgas"
	"github.com/gaspigo/gaspigo/segments"
)

// Checkpoint takes key-count checkpoint c (c > every earlier one) and
// returns this rank's state for it: Mark then State. It is collective
// over all ranks of the shuffle, called at the same point of every rank's
// sequence of Send, CloseSend and Checkpoint (or Mark) calls, and not
// concurrently with Send.
//
// The returned state records what this rank needs to come back to c: the
// O task's Consumed count, the in-memory data (sorted runs and unsorted
// batches, copied) or with CheckpointSpill none, and the names of the
// spill files (which stay on disk, pinned, until Release or Close). With
// Config.Holders, the spill files are also copied to the holders on other
// hosts before it returns (see the package doc). The state is this rank's
// part of the application checkpoint; store it with package ckpt or
// elsewhere and give it to RollBack.
//
// Checkpoint returns ErrState after Recv or Groups started, or for a c
// that does not increase. If it fails, the shuffle must be rolled back.
func (s *Shuffle) Checkpoint(ctx context.Context, c uint64) ([]byte, error) {
	defer phase("checkpoint", "shuffle checkpoint")()
	if err := s.Mark(ctx, c); err != nil {
		return nil, err
	}
	return s.State(ctx, c)
}

// Mark starts key-count checkpoint c (c > every earlier one) and returns
// without waiting for other ranks: the asynchronous checkpoint. Like
// Checkpoint it is collective, called at the same point of every rank's
// sequence of Send, CloseSend and Mark calls, and not concurrently with
// Send.
//
// The O side records Consumed, flushes its buffers (through Combine) and
// queues a marker carrying c behind its data to every partition; Send may
// go on at once, and its pairs follow the markers. On the A side the
// drain stops taking a source's frames once its marker c is in (later
// frames wait in the ring, and credits throttle that sender); when the
// markers of every O task are in, the pairs held are exactly those sent
// before c: the drain cuts there (the data held, the spill files, which
// streams had ended) and resumes every source at once. With
// CheckpointSpill the merger then spills the cut's in-memory data in the
// background, before any other work, without holding up the drain
// (except as MemoryBudget does); otherwise the cut's in-memory data is
// copied at the cut. State(c) waits for the cut to be complete and
// returns the state; call it once for every Mark, in order, from any
// goroutine (typically one that then commits the application checkpoint
// while this one sends on).
func (s *Shuffle) Mark(ctx context.Context, c uint64) error {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	if err := s.usable(); err != nil {
		return err
	}
	if c <= s.lastCkpt {
		return fmt.Errorf("kvshuffle: checkpoint %d: not above the last checkpoint %d: %w", c, s.lastCkpt, ErrState)
	}
	if a := s.a; a != nil {
		a.mu.Lock()
		started := a.recvStarted
		a.mu.Unlock()
		if started {
			return fmt.Errorf("kvshuffle: checkpoint %d: the received pairs are being read: %w", c, ErrState)
		}
	}
	var op opart
	if o := s.o; o != nil {
		op = opart{consumed: s.Consumed(), closed: o.endQueued}
		if err := o.queueMarkers(ctx, c); err != nil {
			return err
		}
	}
	s.mu.Lock()
	s.pending[c] = op
	s.mu.Unlock()
	s.lastCkpt = c
	return nil
}

// opart is the O task's part of a checkpoint state, taken by Mark.
type opart struct {
	consumed uint64
	closed   bool
}

// State waits until checkpoint c, started by Mark, is complete on this
// rank and returns its state (see Checkpoint). On an A task that is once
// the markers of every O task are in and, with CheckpointSpill, the cut's
// data is spilled; with Config.Holders the files are then copied to the
// holders on other hosts (a collective session: every rank calls State
// for the same checkpoints in the same order). It must not run
// concurrently with another State or with RollBack; Send, CloseSend and
// Mark may run meanwhile. If it fails, the shuffle must be rolled back.
func (s *Shuffle) State(ctx context.Context, c uint64) ([]byte, error) {
	s.ckMu.Lock()
	defer s.ckMu.Unlock()
	s.mu.Lock()
	op, ok := s.pending[c]
	delete(s.pending, c)
	s.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("kvshuffle: state of checkpoint %d: not marked, or already taken: %w", c, ErrState)
	}
	st := s.newState(c)
	st.consumed, st.closed = op.consumed, op.closed
	var unsorted [][]byte
	if a := s.a; a != nil {
		cu, err := a.waitCut(ctx, c)
		if err != nil {
			return nil, err
		}
		copy(st.ended, cu.ended)
		for _, f := range cu.files {
			st.files = append(st.files, stateFile{path: f.path, size: f.size, pairs: f.pairs, crc: f.crc})
		}
		for _, r := range cu.runs {
			st.runs = append(st.runs, stateRun{sorted: true, data: r.data})
		}
		unsorted = cu.data
	}
	if s.cfg.Holders != nil {
		if err := s.replicate(ctx, st); err != nil {
			return nil, err
		}
	}
	out := st.encode(unsorted)
	s.log.Info("checkpoint taken", "checkpoint", c, "consumed", st.consumed, "state_bytes", len(out), "spill_files", len(st.files))
	return out, nil
}

// cut is an A task's checkpoint: what it held when the markers of every O
// task were in.
type cut struct {
	c     uint64
	ended []bool
	files []*spillFile // pinned under c
	// In-memory data. With CheckpointSpill: batches and runs the merger
	// still has to spill (the cut is complete once they are files);
	// otherwise runs (immutable) and copies of the batches' data.
	batches []*batch
	runs    []*memRun
	data    [][]byte
}

func (cu *cut) complete() bool { return len(cu.batches) == 0 && len(cu.runs) == 0 || cu.data != nil }

// cutLocked takes checkpoint c of the A task (every marker c is in) and
// lets every source flow again.
func (a *aside) cutLocked(c uint64) {
	a.sealLocked()
	cu := &cut{c: c, ended: slices.Clone(a.ended), files: slices.Clone(a.files), batches: slices.Clone(a.sealed), runs: slices.Clone(a.runs)}
	for _, f := range cu.files {
		a.mk.pin(c, f.path)
	}
	if !a.s.cfg.CheckpointSpill || a.s.cfg.SpillDir == "" {
		// The state carries the data: copy the batches (their blocks are
		// reused once spilled); runs never change.
		cu.data = [][]byte{}
		for _, b := range cu.batches {
			for _, ch := range b.chunks {
				cu.data = append(cu.data, slices.Clone(ch.data))
			}
		}
		cu.batches = nil
	}
	a.cuts = append(a.cuts, cu)
	a.takePostLocked() // what arrived after the markers is the first of the new data
	a.mk.resume()
	a.signalLocked()
}

// cutSpillLocked returns the first cut whose in-memory data the merger
// must spill, or nil.
func (a *aside) cutSpillLocked() *cut {
	for _, cu := range a.cuts {
		if !cu.complete() {
			return cu
		}
	}
	return nil
}

// cutReplaceLocked records, in every pending cut that held all of a
// finished task's in-memory inputs, the task's output instead.
func (a *aside) cutReplaceLocked(t *task, run *memRun, file *spillFile) error {
	if len(t.batches) == 0 && len(t.runs) == 0 {
		return nil
	}
	for _, cu := range a.cuts {
		if cu.data != nil {
			continue
		}
		in := 0
		for _, b := range t.batches {
			if slices.Contains(cu.batches, b) {
				in++
			}
		}
		for _, r := range t.runs {
			if slices.Contains(cu.runs, r) {
				in++
			}
		}
		if in == 0 {
			continue
		}
		if in != len(t.batches)+len(t.runs) {
			return fmt.Errorf("kvshuffle: checkpoint %d: a merge mixed data before and after the checkpoint: %w", cu.c, ErrState)
		}
		cu.batches = slices.DeleteFunc(cu.batches, func(b *batch) bool { return slices.Contains(t.batches, b) })
		cu.runs = slices.DeleteFunc(cu.runs, func(r *memRun) bool { return slices.Contains(t.runs, r) })
		if run != nil {
			cu.runs = append(cu.runs, run)
		}
		if file != nil {
			cu.files = append(cu.files, file)
			a.mk.pin(cu.c, file.path)
		}
	}
	return nil
}

// waitCut waits until checkpoint c's cut is complete and takes it (with
// the cuts before it, which nobody asked for).
func (a *aside) waitCut(ctx context.Context, c uint64) (*cut, error) {
	for {
		a.mu.Lock()
		for i, cu := range a.cuts {
			if cu.c == c && cu.complete() {
				a.cuts = slices.Delete(a.cuts, 0, i+1)
				a.signalLocked()
				a.mu.Unlock()
				return cu, nil
			}
		}
		ch := a.changed
		a.mu.Unlock()
		if err := a.s.waitOn(ctx, ch, "checkpoint"); err != nil {
			return nil, err
		}
	}
}

// Release lets the shuffle delete spill files that only checkpoints older
// than keep refer to. Call it once checkpoint keep is committed.
func (s *Shuffle) Release(keep uint64) {
	s.keep.Store(max(s.keep.Load(), keep))
	a := s.a
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.unpinLocked(func(id uint64) bool { return id < keep })
}

// unpinLocked drops the pins of the checkpoints for which drop holds and
// removes the files that were kept for them alone.
func (a *aside) unpinLocked(drop func(id uint64) bool) {
	for _, path := range a.mk.release(drop) {
		if f := a.owned[path]; f != nil {
			a.gcFileLocked(f)
		}
	}
}

// RollBack returns the shuffle to the checkpoint that state describes (a
// nil or empty state means the start, before any Send). It is collective
// over all ranks, which must all roll back to the same checkpoint; call it
// after pgas Recover when a rank was replaced, or to abandon the work
// since a checkpoint.
//
// Everything sent or received after the checkpoint is discarded: buffered
// and in-flight frames, runs, spill files not named by the state. The A
// side gets back exactly the data of the state; the O side's Consumed
// returns the count of the state, and the program resumes its input at
// that record and sends again. The frame generation is raised on every
// rank so that nothing from before can be taken for new data.
//
// After a rank was replaced (pgas Recover, a new epoch), the promoted
// spare calls New and then RollBack with the replaced rank's state, while
// the survivors call only RollBack: a survivor whose epoch changed since
// its segment was created first joins the spare's collective segment
// creation (keeping its memory), so the two sequences pair up; it stops
// its goroutines before that rejoin, where without a replacement they run
// until the ranks have agreed.
//
// It returns ErrMismatch when ranks disagree or the state belongs to
// another rank or shape, ErrCorrupt for a damaged state or spill file,
// and pgas errors from its collectives. A RollBack that failed may be
// called again.
func (s *Shuffle) RollBack(ctx context.Context, state []byte) error {
	defer phase("recovery", "shuffle roll back")()
	s.opMu.Lock()
	defer s.opMu.Unlock()
	s.ckMu.Lock()
	defer s.ckMu.Unlock()
	select {
	case <-s.closed:
		return ErrClosed
	default:
	}
	if err := s.rejoinIfReplaced(ctx); err != nil {
		return err
	}
	ag, err := s.agreeOnState(ctx, state)
	if err != nil {
		return err
	}
	st := ag.st
	if err := s.quiesce(ctx); err != nil {
		return err
	}
	s.gen.Store(ag.gen + 1)
	// Copies: the abandoned timeline's go, and holders may have changed.
	s.copies.rollBack(st.c)
	clear(s.sent)
	if ag.mostMissing > 0 {
		if err := s.fetch(ctx, st, ag.missing, ag.mostMissing); err != nil {
			return fmt.Errorf("kvshuffle: roll back: %w", err)
		}
	}
	if err := s.resetTo(st); err != nil {
		return err
	}
	// After this barrier every rank has reset: new frames may flow.
	if err := s.rt.Barrier(ctx, nil); err != nil {
		return fmt.Errorf("kvshuffle: roll back: %w", err)
	}
	s.start()
	s.log.Info("rolled back", "checkpoint", st.c, "consumed", st.consumed, "generation", s.gen.Load())
	return nil
}

// rejoinIfReplaced is RollBack's first step after a rank was replaced
// (the epoch changed since the segment was created): the rejoin of the
// segment (the runtime maps the peers' memory of it anew) must not run
// beside this rank's pump writing through the old mappings or its drain
// reading the rings, so the previous generation's goroutines stop first.
// No rank waits for them any more: the new epoch ended every wait on
// another rank (the failure watch). A RollBack that fails later leaves
// them stopped; the next one, or Close, finds nothing to stop, and start
// restarts them at the end.
func (s *Shuffle) rejoinIfReplaced(ctx context.Context) error {
	e := s.rt.Epoch()
	if e == s.epoch {
		return nil
	}
	s.stop()
	if testHookRejoin != nil {
		testHookRejoin(s)
	}
	if _, err := s.rt.SegmentCreate(ctx, s.cfg.SegmentID, s.lay.size, nil); err != nil {
		return fmt.Errorf("kvshuffle: roll back: rejoin the segment: %w", err)
	}
	s.epoch = e
	return nil
}

// rollBackAgreement is what the ranks agreed on in RollBack.
type rollBackAgreement struct {
	st          *state // this rank's state (empty for checkpoint 0)
	missing     []int  // files of st to fetch from a holder
	gen         uint32 // the highest frame generation of any rank
	mostMissing int    // the most files any rank misses
}

// agreeOnState decodes and checks this rank's state and has every rank
// agree that all states are usable and of one checkpoint.
func (s *Shuffle) agreeOnState(ctx context.Context, state []byte) (rollBackAgreement, error) {
	st := s.newState(0)
	var bad error
	var missing []int
	if len(state) > 0 {
		if dec, err := decodeState(state); err != nil {
			bad = err
		} else if missing, bad = s.checkState(dec); bad == nil {
			st = dec
		}
	}
	flag := uint64(0)
	if bad != nil {
		flag = 1
	}
	agree := []uint64{st.c, ^st.c, uint64(s.gen.Load()), flag, uint64(len(missing))}
	if err := pgas.Allreduce(ctx, s.rt, nil, agree, pgas.OpMax); err != nil {
		return rollBackAgreement{}, fmt.Errorf("kvshuffle: roll back: %w", err)
	}
	switch {
	case bad != nil:
		return rollBackAgreement{}, fmt.Errorf("kvshuffle: roll back: %w", bad)
	case agree[3] != 0:
		return rollBackAgreement{}, fmt.Errorf("kvshuffle: roll back: another rank's state is unusable: %w", ErrMismatch)
	case agree[0] != st.c || ^agree[1] != st.c:
		return rollBackAgreement{}, fmt.Errorf("kvshuffle: roll back to checkpoint %d: ranks roll back to checkpoints %d..%d: %w", st.c, ^agree[1], agree[0], ErrMismatch)
	}
	return rollBackAgreement{st: st, missing: missing, gen: uint32(agree[2]), mostMissing: int(agree[4])}, nil
}

// quiesce stops this rank's goroutines and waits until nothing of the old
// generation is in flight on any rank, then clears the notifications.
//
// In the same epoch (a roll back the program chose) the goroutines ran
// until here: a rank may have been waiting in CloseSend or Send for this
// rank's drain until it too entered RollBack, which the agreement proves.
// What ran beside them (the state's decoding, the check of its spill files
// on disk, the Allreduce) touches nothing they use.
func (s *Shuffle) quiesce(ctx context.Context) error {
	s.stop()
	for _, q := range []pgas.Queue{s.cfg.Queue, s.cfg.CreditQueue} {
		if err := s.rt.Wait(ctx, q); err != nil {
			s.log.Debug("roll back: frames of the old generation", "queue", q, "err", err)
		}
	}
	// After this barrier nothing of the old generation is in flight.
	if err := s.rt.Barrier(ctx, nil); err != nil {
		return fmt.Errorf("kvshuffle: roll back: %w", err)
	}
	for id := range s.lay.notifications() {
		s.seg.ResetNotification(segments.NotificationID(id))
	}
	return nil
}

// resetTo sets both sides to st (the O side's count and end, the A side's
// data) and clears the error of the abandoned timeline.
func (s *Shuffle) resetTo(st *state) error {
	if o := s.o; o != nil {
		o.mu.Lock()
		o.reset()
		o.consumed = st.consumed
		o.sendClosed, o.endQueued = st.closed, st.closed
		o.mu.Unlock()
	}
	if a := s.a; a != nil {
		if err := a.load(st); err != nil {
			return fmt.Errorf("kvshuffle: roll back: %w", err)
		}
	}
	s.mu.Lock()
	if s.err != nil {
		s.err = nil
		s.bad.Store(false)
		s.failed = make(chan struct{})
	}
	s.recvErr = nil
	clear(s.pending)
	s.mu.Unlock()
	s.lastCkpt = st.c
	return nil
}

// abandonedLocked lists the batches that hold the aside's blocks: the
// sealed ones, the builder (unless sealed) and the post blocks.
func (a *aside) abandonedLocked() []*batch {
	bs := slices.Clone(a.sealed)
	if a.builder != nil && !slices.Contains(bs, a.builder) {
		bs = append(bs, a.builder)
	}
	if a.post != nil {
		bs = append(bs, a.post)
	}
	return bs
}

// testHookRejoin, when set (by tests), is called by RollBack right before
// it rejoins the segment in a new epoch.
var testHookRejoin func(*Shuffle)

// checkState checks that st fits this rank and that its spill files are
// intact. With Config.Holders set, it returns the files it cannot read or
// finds damaged, for RollBack to fetch from their holders.
func (s *Shuffle) checkState(st *state) ([]int, error) {
	want := s.newState(st.c)
	if st.rank != want.rank || st.size != want.size || st.nSrc != want.nSrc || st.nParts != want.nParts || st.flags != want.flags {
		return nil, fmt.Errorf("state of rank %d in a job of %d ranks (%d O, %d A, roles %d) for rank %d of %d (%d O, %d A, roles %d): %w",
			st.rank, st.size, st.nSrc, st.nParts, st.flags, want.rank, want.size, want.nSrc, want.nParts, want.flags, ErrMismatch)
	}
	var missing []int
	for i, f := range st.files {
		h, err := checkSpill(&spillFile{path: f.path, size: f.size, pairs: f.pairs, crc: f.crc})
		if err == nil {
			h.Close()
			continue
		}
		if s.cfg.Holders == nil {
			return nil, fmt.Errorf("spill file of checkpoint %d: %w (a rank taken over on another host needs Config.Holders, so that its files are copied)", st.c, err)
		}
		missing = append(missing, i)
	}
	return missing, nil
}

// load replaces the A task's data with st's. The drain and merger must not
// be running.
func (a *aside) load(st *state) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.resetStreams()
	for si, e := range st.ended {
		if e {
			a.ended[si], a.gotEnd[si] = true, true
			a.nEnded++
		}
	}
	// Spill files: the state's become the live set, pinned under st.c so a
	// second roll back to the same checkpoint finds them again.
	old := a.files
	a.files = nil
	for _, sf := range st.files {
		f := a.owned[sf.path]
		if f == nil {
			f = &spillFile{path: sf.path, size: sf.size, pairs: sf.pairs, crc: sf.crc}
			a.owned[f.path] = f
		} else if f.size != sf.size || f.pairs != sf.pairs || f.crc != sf.crc {
			return corrupt("spill file "+sf.path, 0, "the state and the shuffle disagree on its size, pairs or checksum")
		}
		f.live = true
		a.files = append(a.files, f)
		if st.c > 0 {
			a.mk.pin(st.c, f.path)
		}
	}
	for _, f := range old {
		if !slices.Contains(a.files, f) {
			f.live = false
			a.gcFileLocked(f)
		}
	}
	a.unpinLocked(func(id uint64) bool { return id > st.c })
	// In-memory data. The abandoned timeline's blocks go back to the pool
	// (its workers have stopped): dropped, they would be collected and
	// their memory zeroed again, all of it resident, for the next blocks.
	// Not after Recv began: an iterator not run to its end may still read
	// them (the garbage collector keeps them for it).
	if !a.recvStarted {
		a.recycleLocked(a.abandonedLocked())
	}
	a.runs, a.sealed, a.builder, a.open, a.unsorted, a.mem, a.cuts = nil, nil, &batch{}, nil, nil, 0, nil
	a.post, a.postOpen = nil, nil
	for _, r := range st.runs {
		data := slices.Clone(r.data)
		if r.sorted {
			a.runs = append(a.runs, &memRun{data: data, pairs: r.pairs})
			a.addMemLocked(int64(len(data)))
			continue
		}
		es, err := indexRun(data, nil, 0, "state")
		if err != nil {
			return err
		}
		c := &chunk{data: data, ents: es}
		c.charge = int64(len(data))
		b := &batch{chunks: []*chunk{c}, bytes: int64(len(data)), pairs: int64(len(es)), charge: c.charge}
		a.sealed = append(a.sealed, b)
		a.unsorted = append(a.unsorted, c)
		a.addMemLocked(b.cost())
	}
	a.final, a.recvStarted = false, false
	a.pressure = a.mem > a.s.cfg.MemoryBudget
	a.signalLocked()
	return nil
}
