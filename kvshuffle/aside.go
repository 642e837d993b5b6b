package kvshuffle

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
)

// aside is the A task: the drain that empties the receive rings into
// batches and returns credits, the merger that sorts batches into runs,
// merges runs and spills them, and the final merge that Recv reads.
type aside struct {
	s     *Shuffle
	names []string // "frame from rank r", per source, for errors

	// Owned by the drain goroutine.
	avail    []uint64 // frames written into each ring (from notifications)
	consumed []uint64 // frames taken out of each ring
	asm      []byte   // a large pair being reassembled
	asmFrom  int      // its source, -1 for none
	gotEnd   []bool   // the source's end frame was taken
	cursor   int
	scratch  []ent

	mu          sync.Mutex
	changed     chan struct{} // closed and replaced at every change below
	mk          *markers      // checkpoint markers per source, and the files checkpoints pin
	ended       []bool
	nEnded      int
	builder     *batch
	open        *chunk   // the builder's block being filled by the drain (not in unsorted)
	post        *batch   // pairs sent after the checkpoint being cut, before the cut (addPost)
	postOpen    *chunk   // post's last block, being filled
	unsorted    []*chunk // sealed chunks whose index the merger has not sorted yet
	sealed      []*batch
	runs        []*memRun
	files       []*spillFile
	mem, maxMem int64
	pressure    bool // the drain waits for memory
	final       bool // everything ended and the merger prepared the final merge
	recvStarted bool
	owned       map[string]*spillFile // every file created or adopted and not removed
	dir         string                // spill directory of this shuffle, created at the first spill
	cuts        []*cut                // checkpoints cut and not taken by State, in order
	freeData    [][]byte              // blocks to reuse: their pages are already mapped
	freeEnts    [][]ent

	wbuf    []byte      // the merger's spill write buffer
	sortTmp []ent       // the merger's scratch for sorting a block's index
	bsort   blockSorter // the merger's scratch for moving a block into key order
}

func newAside(s *Shuffle) *aside {
	n := len(s.oRanks)
	a := &aside{
		s:       s,
		names:   make([]string, n),
		changed: make(chan struct{}),
		owned:   make(map[string]*spillFile),
		mk:      newMarkers(n),
	}
	for i, r := range s.oRanks {
		a.names[i] = fmt.Sprintf("frame from rank %d", r)
	}
	a.resetStreams()
	a.builder = &batch{}
	return a
}

// resetStreams forgets the state of every incoming stream. The drain must
// not be running.
func (a *aside) resetStreams() {
	n := len(a.s.oRanks)
	a.avail, a.consumed, a.gotEnd = make([]uint64, n), make([]uint64, n), make([]bool, n)
	a.asm, a.asmFrom, a.cursor = nil, -1, a.s.aIdx%n
	a.mk.resetStreams(n)
	a.ended = make([]bool, n)
	a.nEnded = 0
}

func (a *aside) signalLocked() {
	close(a.changed)
	a.changed = make(chan struct{})
}

func (a *aside) addMemLocked(d int64) {
	noteMem(d)
	a.mem += d
	a.maxMem = max(a.maxMem, a.mem)
}

// drain takes frames out of the receive rings in arrival order per source,
// copies data into the current batch, returns credits, and records
// markers and ends. It owns the rings and Config.CreditQueue.
func (a *aside) drain(ctx context.Context) error {
	s := a.s
	n := len(s.oRanks)
	posted := 0
	for {
		if err := a.absorb(); err != nil {
			return err
		}
		if si := a.asmFrom; si >= 0 {
			got, err := a.drainSource(ctx, si, &posted)
			if err != nil {
				return err
			}
			if got == 0 && a.asmFrom == si {
				if _, err := s.rt.NotifyWaitSome(ctx, s.cfg.SegmentID, s.lay.dataNotif(si), 1); err != nil {
					return err
				}
			}
			continue
		}
		progress := false
		for k := range n {
			si := (a.cursor + k) % n
			got, err := a.drainSource(ctx, si, &posted)
			if err != nil {
				return err
			}
			progress = progress || got > 0
			if a.asmFrom >= 0 {
				break
			}
		}
		a.cursor = (a.cursor + 1) % n
		if !progress && a.asmFrom < 0 {
			if _, err := s.rt.NotifyWaitSome(ctx, s.cfg.SegmentID, 0, n+1); err != nil {
				return err
			}
		}
	}
}

// absorb reads the data notifications: each carries the sender's
// cumulative count of frames written into its ring.
func (a *aside) absorb() error {
	s := a.s
	s.seg.ResetNotification(s.lay.drainWake())
	for si := range a.avail {
		v, _ := s.seg.ResetNotification(s.lay.dataNotif(si))
		if v == 0 {
			continue
		}
		if v&0x8000_0000 == 0 {
			return &AbortError{Rank: s.oRanks[si]}
		}
		c := extendCount(a.consumed[si], v)
		if c > a.consumed[si]+uint64(s.cfg.Slots) {
			return corrupt(a.names[si], 0, "notification claims %d frames, %d consumed and only %d ring slots", c, a.consumed[si], s.cfg.Slots)
		}
		a.avail[si] = max(a.avail[si], c)
	}
	return nil
}

// drainSource consumes the available frames of source si, unless it is
// paused at a marker, then returns the credits. It returns how many frames
// it consumed.
func (a *aside) drainSource(ctx context.Context, si int, posted *int) (int, error) {
	s := a.s
	start := a.consumed[si]
	endSeen := false
	for a.consumed[si] < a.avail[si] {
		seq := a.consumed[si] + 1
		h, payload, err := a.nextFrame(ctx, si, seq)
		if err != nil {
			return 0, err
		}
		a.mu.Lock()
		paused := a.mk.isPaused(si)
		a.mu.Unlock()
		if paused {
			// Past its marker, before the cut: data frames go aside while
			// they fit (the sender is not held up), anything else waits.
			took, err := a.setAside(si, h, payload)
			if err != nil {
				return 0, err
			}
			if !took {
				break
			}
		} else {
			end, err := a.applyFrame(ctx, si, h, payload)
			if err != nil {
				return 0, err
			}
			endSeen = endSeen || end
		}
		a.consumed[si] = seq
		s.st.framesRecv.Add(1)
	}
	got := int(a.consumed[si] - start)
	if got > 0 {
		if err := a.credit(ctx, si, posted); err != nil {
			return 0, err
		}
	}
	if endSeen {
		if err := a.sourceEnded(ctx, si, posted); err != nil {
			return 0, err
		}
	}
	return got, nil
}

// nextFrame reads frame number seq of source si from its ring slot (after
// the test's drain gate, if any), checking its generation and number.
func (a *aside) nextFrame(ctx context.Context, si int, seq uint64) (frameHdr, []byte, error) {
	s := a.s
	if g := s.cfg.drainGate; g != nil {
		select {
		case <-g:
		case <-ctx.Done():
			return frameHdr{}, nil, ctx.Err()
		}
	}
	off := s.lay.ringOff(si, int(a.consumed[si]%uint64(s.cfg.Slots)))
	slot := s.seg.Bytes()[off : off+s.lay.slot]
	h, err := decodeFrameHeader(slot, s.cfg.SlotSize, a.names[si])
	if err != nil {
		return frameHdr{}, nil, err
	}
	if h.gen != s.gen.Load() || h.seq != uint32(seq) {
		return frameHdr{}, nil, corrupt(a.names[si], 8, "frame of generation %d, number %d; expected generation %d, number %d", h.gen, h.seq, s.gen.Load(), uint32(seq))
	}
	return h, slot[frameHeader : frameHeader+h.len], nil
}

// setAside takes a frame of source si, which is paused at its marker: a
// data frame goes aside while it fits; took is false for anything else,
// which waits for the cut.
func (a *aside) setAside(si int, h frameHdr, payload []byte) (took bool, err error) {
	if h.kind != frameData || a.asmFrom >= 0 {
		return false, nil
	}
	return a.addPost(payload, si)
}

// applyFrame applies a frame of source si: data to the batch, a piece of
// a large pair to its reassembly, a marker to the checkpoint it starts;
// end says that it was the end of the stream.
func (a *aside) applyFrame(ctx context.Context, si int, h frameHdr, payload []byte) (end bool, err error) {
	if a.asmFrom >= 0 && h.kind != frameLarge && h.kind != frameLargeLast {
		return false, corrupt(a.names[si], 0, "frame kind %d inside a large pair", h.kind)
	}
	if a.gotEnd[si] && h.kind != frameMarker {
		return false, corrupt(a.names[si], 0, "frame kind %d after the end of the stream", h.kind)
	}
	switch h.kind {
	case frameData:
		return false, a.addData(ctx, payload, si, false)
	case frameLarge, frameLargeLast:
		return false, a.addLarge(ctx, si, h.kind == frameLargeLast, payload)
	case frameMarker:
		return false, a.arriveMarker(si, payload)
	case frameEnd:
		a.gotEnd[si] = true
		return true, nil
	}
	return false, nil
}

// addLarge appends a piece of a large pair from source si; the last piece
// adds the reassembled pair to the batch.
func (a *aside) addLarge(ctx context.Context, si int, last bool, payload []byte) error {
	s := a.s
	if len(a.asm)+len(payload) > s.cfg.MaxPairSize {
		return corrupt(a.names[si], 4, "large pair grows past MaxPairSize %d", s.cfg.MaxPairSize)
	}
	a.asm = append(a.asm, payload...)
	a.asmFrom = si
	if !last {
		return nil
	}
	if _, _, n, err := DecodePair(a.asm); err != nil || n != len(a.asm) {
		return corrupt(a.names[si], 0, "reassembled large pair of %d bytes does not frame one pair (%v)", len(a.asm), err)
	}
	if err := a.addData(ctx, a.asm, si, true); err != nil {
		return err
	}
	a.asm, a.asmFrom = nil, -1
	return nil
}

// arriveMarker records source si's marker of the checkpoint in payload,
// and cuts the checkpoint once every source's marker is in.
func (a *aside) arriveMarker(si int, payload []byte) error {
	c := binary.LittleEndian.Uint64(payload)
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.mk.arrive(si, c); err != nil {
		return corrupt(a.names[si], frameHeader, "%s", err.Error())
	}
	done, late, err := a.mk.complete(c)
	if err != nil {
		return fmt.Errorf("kvshuffle: checkpoint %d: rank %d %v: %w", c, a.s.oRanks[late], err, ErrState)
	}
	if done {
		a.cutLocked(c)
	}
	a.signalLocked()
	return nil
}

// credit tells source si how many of its frames are consumed, first
// waiting for the credits posted before when MaxPosted are in flight.
func (a *aside) credit(ctx context.Context, si int, posted *int) error {
	s := a.s
	if *posted >= s.cfg.MaxPosted {
		if err := s.rt.Wait(ctx, s.cfg.CreditQueue); err != nil {
			return err
		}
		*posted = 0
	}
	err := s.rt.Notify(ctx, s.cfg.CreditQueue, s.oRanks[si], s.cfg.SegmentID, s.lay.creditNotif(s.aIdx), encodeCount(a.consumed[si]))
	if err != nil {
		return fmt.Errorf("credit to rank %d: %w", s.oRanks[si], err)
	}
	*posted++
	return nil
}

// sourceEnded marks source si ended once its last credit is applied: the
// sender's CloseSend waits for that credit, which must be in place there
// before Recv can return and the program exit.
func (a *aside) sourceEnded(ctx context.Context, si int, posted *int) error {
	s := a.s
	if err := s.rt.Wait(ctx, s.cfg.CreditQueue); err != nil {
		return err
	}
	*posted = 0
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.ended[si] {
		a.ended[si] = true
		a.nEnded++
	}
	a.signalLocked()
	return nil
}

// addData adds a run of whole pairs to the current batch, waiting while
// that would exceed the memory budget. The payload is copied into the
// open block (a new one when it does not fit), unless own says that it is
// a large pair the batch may keep as a chunk of its own.
func (a *aside) addData(ctx context.Context, payload []byte, si int, own bool) error {
	s := a.s
	var err error
	a.scratch, err = indexRun(payload, a.scratch[:0], 0, a.names[si])
	if err != nil {
		return err
	}
	n := int64(len(a.scratch))
	a.mu.Lock()
	defer a.mu.Unlock()
	need := func() int64 {
		if !own && a.open != nil && len(a.open.data)+len(payload) > cap(a.open.data) {
			a.sealLocked() // the block is full
		}
		switch {
		case own:
			return int64(len(payload)) + entSize*n
		case a.open == nil:
			return int64(s.cfg.RunSize) + entSize*n
		}
		return entSize * n
	}
	for a.mem > 0 && a.mem+need() > s.cfg.MemoryBudget {
		if s.cfg.SpillDir == "" {
			return fmt.Errorf("%w: holding %d bytes, %d more arrived, MemoryBudget is %d: set SpillDir or raise MemoryBudget",
				ErrBudget, a.mem, len(payload), s.cfg.MemoryBudget)
		}
		a.pressure = true
		a.signalLocked()
		ch := a.changed
		a.mu.Unlock()
		s.st.budgetWaits.Add(1)
		select {
		case <-ch:
		case <-ctx.Done():
			a.mu.Lock()
			return ctx.Err()
		}
		a.mu.Lock()
	}
	b := a.builder
	if own {
		c := &chunk{data: payload, ents: slices.Clone(a.scratch), charge: int64(len(payload))}
		b.chunks = append(b.chunks, c)
		b.charge += c.charge
		a.unsorted = append(a.unsorted, c)
		a.addMemLocked(c.charge)
	} else {
		if a.open == nil {
			a.open = a.takeBlockLocked()
			b.chunks = append(b.chunks, a.open)
			b.charge += a.open.charge
			a.addMemLocked(a.open.charge)
		}
		c := a.open
		base := uint32(len(c.data))
		c.data = append(c.data, payload...)
		for _, e := range a.scratch {
			e.kstart, e.kend, e.end = e.kstart+base, e.kend+base, e.end+base
			c.ents = append(c.ents, e)
		}
	}
	b.bytes += int64(len(payload))
	b.pairs += n
	a.addMemLocked(entSize * n)
	if b.bytes >= s.cfg.RunSize {
		a.sealLocked()
	}
	s.st.pairsRecv.Add(uint64(n))
	s.st.bytesRecv.Add(uint64(len(payload)))
	return nil
}

// addPost takes a data frame from a source whose checkpoint marker is in
// while others are still awaited: its pairs come after the checkpoint, so
// they go to post blocks, which join the data after the cut. It returns
// false, taking nothing, when a new post block would leave no room in the
// budget for one more block of data from before the checkpoint (which the
// merger can always spill): the frame then waits in its ring.
func (a *aside) addPost(payload []byte, si int) (bool, error) {
	s := a.s
	var err error
	a.scratch, err = indexRun(payload, a.scratch[:0], 0, a.names[si])
	if err != nil {
		return false, err
	}
	n := int64(len(a.scratch))
	a.mu.Lock()
	defer a.mu.Unlock()
	c := a.postOpen
	fresh := c == nil || len(c.data)+len(payload) > cap(c.data)
	need := entSize * n
	if fresh {
		need += s.cfg.RunSize
	}
	if a.mem+need+a.blockCost() > s.cfg.MemoryBudget {
		return false, nil
	}
	if fresh {
		c = a.takeBlockLocked()
		if a.post == nil {
			a.post = &batch{}
		}
		a.post.chunks = append(a.post.chunks, c)
		a.postOpen = c
		a.addMemLocked(c.charge)
	}
	base := uint32(len(c.data))
	c.data = append(c.data, payload...)
	for _, e := range a.scratch {
		e.kstart, e.kend, e.end = e.kstart+base, e.kend+base, e.end+base
		c.ents = append(c.ents, e)
	}
	a.addMemLocked(entSize * n)
	s.st.pairsRecv.Add(uint64(n))
	s.st.bytesRecv.Add(uint64(len(payload)))
	return true, nil
}

// takePostLocked makes the post blocks the first data after a cut: the
// full ones a sealed batch, the last one the open block.
func (a *aside) takePostLocked() {
	if a.post == nil {
		return
	}
	batchOf := func(cs []*chunk) *batch {
		b := &batch{chunks: cs}
		for _, c := range cs {
			b.bytes += int64(len(c.data))
			b.pairs += int64(len(c.ents))
			b.charge += c.charge
		}
		return b
	}
	k := len(a.post.chunks) - 1
	if k > 0 {
		full := a.post.chunks[:k:k]
		a.sealed = append(a.sealed, batchOf(full))
		a.unsorted = append(a.unsorted, full...)
	}
	a.builder, a.open = batchOf([]*chunk{a.post.chunks[k]}), a.postOpen
	a.post, a.postOpen = nil, nil
}

// takeBlockLocked returns an empty block of RunSize bytes, from the pool
// when it has one.
func (a *aside) takeBlockLocked() *chunk {
	c := &chunk{pooled: true}
	if k := len(a.freeData); k > 0 {
		c.data, a.freeData = a.freeData[k-1][:0], a.freeData[:k-1]
	} else {
		c.data = make([]byte, 0, a.s.cfg.RunSize)
		a.s.st.blocks.Add(1)
	}
	if k := len(a.freeEnts); k > 0 {
		c.ents, a.freeEnts = a.freeEnts[k-1][:0], a.freeEnts[:k-1]
	} else {
		// Room for the index of a full block at the pair size seen so
		// far (64 bytes a pair before any), so that it rarely grows.
		per := int64(64)
		if p := a.s.st.pairsRecv.Load(); p > 0 {
			per = max(int64(a.s.st.bytesRecv.Load())/int64(p), 1)
		}
		c.ents = make([]ent, 0, a.s.cfg.RunSize/per+1)
	}
	c.charge = int64(cap(c.data))
	return c
}

// recycleLocked frees the chunks of bs: blocks go back to the pool (at
// most as many as the budget holds), so that their memory is reused
// instead of faulted in again.
func (a *aside) recycleLocked(bs []*batch) {
	most := int(a.s.cfg.MemoryBudget/a.s.cfg.RunSize) + 1
	for _, b := range bs {
		for _, c := range b.chunks {
			if c.pooled && len(a.freeData) < most {
				a.freeData = append(a.freeData, c.data[:0])
				a.freeEnts = append(a.freeEnts, c.ents[:0])
			}
			c.data, c.ents = nil, nil
		}
	}
}

// blockCost estimates what a full block costs against the budget: its
// bytes and the index of the pairs it holds.
func (a *aside) blockCost() int64 {
	k := a.s.cfg.RunSize
	if by := a.s.st.bytesRecv.Load(); by > 0 {
		k += entSize * a.s.cfg.RunSize * int64(a.s.st.pairsRecv.Load()) / int64(by)
	}
	return k
}

// sealLocked hands the current batch to the merger.
func (a *aside) sealLocked() {
	if len(a.builder.chunks) == 0 {
		return
	}
	if a.open != nil {
		a.unsorted = append(a.unsorted, a.open)
		a.open = nil
	}
	a.sealed = append(a.sealed, a.builder)
	a.builder = &batch{}
	a.signalLocked()
}
