package kvshuffle

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
)

// oside is the O task: per-destination send buffers in the segment, the
// queue of sealed frames per destination, and the pump that writes them
// into the receivers' rings as credits allow.
type oside struct {
	s          *Shuffle
	payloadCap int // SlotSize - frameHeader

	mu       sync.Mutex    // guards the fields below and dest's, except as noted
	changed  chan struct{} // closed and replaced when a frame is sent, a buffer freed, a credit returned or a flush ends
	dests    []dest
	strict   bool // flushing: serve destinations strictly in schedule order
	step     int  // current step of a strict pass
	cursor   int  // next destination of the work-conserving order (Diagonal)
	consumed uint64

	// Under Shuffle.opMu.
	sendClosed bool // CloseSend was called
	endQueued  bool // the end frames are queued
	stage      []stage
	vals       [][]byte
	sortTmp    []ent // scratch for sorting a Combine batch
}

// dest is the O task's state towards one partition. cur and fill belong
// to whoever holds Shuffle.opMu (the pump never reads them); the other
// fields are guarded by oside.mu.
type dest struct {
	rank  int    // the A rank receiving the partition
	cur   int    // buffer being filled, -1 for none
	fill  int    // payload bytes in cur
	free  []int  // free buffer numbers
	q     []item // sealed frames, in order
	sent  uint64 // frames written (pump)
	acked uint64 // frames the receiver has consumed (credits)
}

// item is one sealed frame waiting for the pump.
type item struct {
	buf  int // buffer number, -1 for a control frame
	kind frameKind
	n    int    // payload bytes
	val  uint64 // checkpoint ID of a marker
}

// stage is a batch of pairs for one destination waiting for Combine.
type stage struct {
	data []byte
	ents []ent
}

func newOside(s *Shuffle) *oside {
	o := &oside{
		s:          s,
		payloadCap: s.cfg.SlotSize - frameHeader,
		changed:    make(chan struct{}),
		dests:      make([]dest, len(s.aRanks)),
	}
	o.reset()
	if s.cfg.Combine != nil {
		o.stage = make([]stage, len(s.aRanks))
	}
	return o
}

// reset empties every queue and buffer. The pump must not be running.
func (o *oside) reset() {
	for p := range o.dests {
		free := make([]int, o.s.cfg.SendBuffers)
		for b := range free {
			free[b] = len(free) - 1 - b
		}
		o.dests[p] = dest{rank: o.s.aRanks[p], free: free, cur: -1}
	}
	for p := range o.stage {
		o.stage[p] = stage{}
	}
	o.strict, o.step = false, 0
	o.cursor = o.s.oIdx % len(o.dests)
	o.sendClosed, o.endQueued = false, false
}

func (o *oside) signalLocked() {
	close(o.changed)
	o.changed = make(chan struct{})
}

func (o *oside) wakePump() {
	o.s.seg.SetNotification(o.s.lay.pumpWake(), 1)
}

// Send hands one pair to the shuffle. There is no destination: the pair
// goes to partition Partition(key, Parts()). Send copies key and value
// into a send buffer and returns; when the buffers for that partition are
// all full or in flight it blocks until the pump frees one (a slow
// receiver throttles its senders). It returns ErrNotOperator on a rank
// outside ORanks, ErrSendClosed after CloseSend, ErrTooLarge,
// ErrPartition, an error wrapping pgas.ErrTimeout when ctx ends while it
// waits, ErrClosed, or the shuffle's failure.
func (s *Shuffle) Send(ctx context.Context, key, value []byte) error {
	o, err := s.startSend()
	if err != nil {
		return err
	}
	defer s.opMu.Unlock()
	size := PairSize(len(key), len(value))
	if err := s.checkSize(size, len(key), len(value)); err != nil {
		return err
	}
	p, err := s.partOf(key)
	if err != nil {
		return err
	}
	s.st.pairsSent.Add(1)
	s.st.bytesSent.Add(uint64(size))
	return o.put(ctx, p, key, value, size)
}

// SendKeys sends each size-byte piece of keys as the key of a pair with
// an empty value: what Send(ctx, keys[i*size:(i+1)*size], nil) does for
// every i in turn, in one call (one lock and one check of the shuffle's
// state for the lot), for a stream of fixed-size records such as
// TeraSort's. It returns the number of keys sent; after an error, the
// keys before that number were sent, as by that many calls to Send.
// len(keys) must be a multiple of size.
func (s *Shuffle) SendKeys(ctx context.Context, keys []byte, size int) (int, error) {
	if size <= 0 || len(keys)%size != 0 {
		return 0, fmt.Errorf("kvshuffle: SendKeys: %d bytes of keys are not a whole number of %d-byte keys", len(keys), size)
	}
	o, err := s.startSend()
	if err != nil {
		return 0, err
	}
	defer s.opMu.Unlock()
	pair := PairSize(size, 0)
	if err := s.checkSize(pair, size, 0); err != nil {
		return 0, err
	}
	sent := 0
	defer func() {
		s.st.pairsSent.Add(uint64(sent))
		s.st.bytesSent.Add(uint64(sent * pair))
	}()
	for off := 0; off < len(keys); off += size {
		key := keys[off : off+size : off+size]
		p, err := s.partOf(key)
		if err != nil {
			return sent, err
		}
		if err := o.put(ctx, p, key, nil, pair); err != nil {
			return sent, err
		}
		sent++
	}
	return sent, nil
}

// startSend takes Shuffle.opMu for a send and checks that one may be made;
// on success the caller unlocks.
func (s *Shuffle) startSend() (*oside, error) {
	o := s.o
	if o == nil {
		return nil, fmt.Errorf("kvshuffle: send on rank %d: %w", s.rank, ErrNotOperator)
	}
	s.opMu.Lock()
	if err := s.usable(); err != nil {
		s.opMu.Unlock()
		return nil, err
	}
	if o.sendClosed {
		s.opMu.Unlock()
		return nil, ErrSendClosed
	}
	return o, nil
}

func (s *Shuffle) checkSize(size, key, value int) error {
	if size > s.cfg.MaxPairSize {
		return fmt.Errorf("kvshuffle: send: pair of %d bytes (key %d, value %d) above MaxPairSize %d: %w",
			size, key, value, s.cfg.MaxPairSize, ErrTooLarge)
	}
	return nil
}

// partOf is key's partition, checked.
func (s *Shuffle) partOf(key []byte) (int, error) {
	p := s.part(key, len(s.aRanks))
	if p < 0 || p >= len(s.aRanks) {
		return 0, fmt.Errorf("kvshuffle: send: Partition returned %d for %d partitions: %w", p, len(s.aRanks), ErrPartition)
	}
	return p, nil
}

// put hands a checked pair of partition p to Combine's stage or to the
// send buffers. Called under Shuffle.opMu.
func (o *oside) put(ctx context.Context, p int, key, value []byte, size int) error {
	if o.stage != nil && size <= o.payloadCap {
		return o.stagePair(ctx, p, key, value, size)
	}
	return o.emit(ctx, p, key, value, size)
}

// emit appends a framed pair to partition p's current buffer. Called
// under Shuffle.opMu; the common case takes no other lock.
func (o *oside) emit(ctx context.Context, p int, key, value []byte, size int) error {
	if size > o.payloadCap {
		return o.emitLarge(ctx, p, key, value, size)
	}
	d := &o.dests[p]
	if d.cur >= 0 && d.fill+size > o.payloadCap {
		o.seal(p, frameData)
	}
	if d.cur < 0 {
		if err := o.take(ctx, p); err != nil {
			return err
		}
	}
	off := o.s.lay.bufAt(p, d.cur) + frameHeader + int64(d.fill)
	putPair(o.s.seg.Bytes()[off:], key, value)
	d.fill += size
	if d.fill+2 > o.payloadCap { // not even an empty pair fits any more
		o.seal(p, frameData)
	}
	return nil
}

// emitLarge carries a pair larger than a frame's payload as consecutive
// frameLarge pieces ending with a frameLargeLast. Once the first piece is
// queued the rest must follow or the stream would be broken, so from then
// on only a failure or Close (not ctx) stops it.
func (o *oside) emitLarge(ctx context.Context, p int, key, value []byte, size int) error {
	d := &o.dests[p]
	o.release(p)
	var hb [2 * binary.MaxVarintLen64]byte
	h := binary.PutUvarint(hb[:], uint64(len(key)))
	h += binary.PutUvarint(hb[h:], uint64(len(value)))
	pieces := [3][]byte{hb[:h], key, value}
	for written := 0; written < size; {
		if err := o.take(ctx, p); err != nil {
			return err
		}
		ctx = context.WithoutCancel(ctx)
		n := min(o.payloadCap, size-written)
		off := o.s.lay.bufAt(p, d.cur) + frameHeader
		copyPieces(o.s.seg.Bytes()[off:off+int64(n)], pieces[:], written)
		written += n
		d.fill = n
		kind := frameLarge
		if written == size {
			kind = frameLargeLast
		}
		o.seal(p, kind)
	}
	return nil
}

// copyPieces fills dst with the bytes of the concatenation of pieces
// starting at offset from.
func copyPieces(dst []byte, pieces [][]byte, from int) {
	for _, pc := range pieces {
		if from >= len(pc) {
			from -= len(pc)
			continue
		}
		n := copy(dst, pc[from:])
		dst = dst[n:]
		from = 0
		if len(dst) == 0 {
			return
		}
	}
}

// take makes a free buffer partition p's current one, waiting for the
// pump to free one if needed.
func (o *oside) take(ctx context.Context, p int) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	d := &o.dests[p]
	for len(d.free) == 0 {
		ch := o.changed
		o.mu.Unlock()
		o.s.st.sendWaits.Add(1)
		err := o.s.waitOn(ctx, ch, "send")
		o.mu.Lock()
		if err != nil {
			return err
		}
	}
	d.cur = d.free[len(d.free)-1]
	d.free = d.free[:len(d.free)-1]
	d.fill = 0
	return nil
}

// seal queues partition p's current buffer as a frame of kind.
func (o *oside) seal(p int, kind frameKind) {
	d := &o.dests[p]
	buf := o.s.seg.Bytes()[o.s.lay.bufAt(p, d.cur):]
	putFrameHeader(buf, frameHdr{kind: kind, len: d.fill, gen: o.s.gen.Load()})
	o.mu.Lock()
	d.q = append(d.q, item{buf: d.cur, kind: kind, n: d.fill})
	o.mu.Unlock()
	d.cur, d.fill = -1, 0
	o.wakePump()
}

// release seals partition p's current buffer if it holds data and gives
// it back otherwise.
func (o *oside) release(p int) {
	d := &o.dests[p]
	if d.cur < 0 {
		return
	}
	if d.fill > 0 {
		o.seal(p, frameData)
		return
	}
	o.mu.Lock()
	d.free = append(d.free, d.cur)
	o.mu.Unlock()
	d.cur = -1
}

// stagePair adds a pair to partition p's Combine batch, combining and
// emitting the batch first when the pair does not fit.
func (o *oside) stagePair(ctx context.Context, p int, key, value []byte, size int) error {
	st := &o.stage[p]
	if len(st.data)+size > o.payloadCap {
		if err := o.combineFlush(ctx, p); err != nil {
			return err
		}
	}
	if st.data == nil {
		st.data = make([]byte, 0, o.payloadCap)
	}
	start := len(st.data)
	st.data = AppendPair(st.data, key, value)
	ks := start + uvarintLen(uint64(len(key))) + uvarintLen(uint64(len(value)))
	st.ents = append(st.ents, ent{pre: KeyPrefix(key), kstart: uint32(ks), kend: uint32(ks + len(key)), end: uint32(len(st.data))})
	return nil
}

// combineFlush sorts partition p's batch, applies Combine to each run of
// equal keys, and emits the result.
func (o *oside) combineFlush(ctx context.Context, p int) error {
	st := &o.stage[p]
	if len(st.ents) == 0 {
		return nil
	}
	o.s.ord.sortEnts(st.data, st.ents, &o.sortTmp)
	for i := 0; i < len(st.ents); {
		key := st.ents[i].key(st.data)
		j := i + 1
		for j < len(st.ents) && o.s.ord.compare(st.ents[j].key(st.data), key) == 0 {
			j++
		}
		o.vals = o.vals[:0]
		for _, e := range st.ents[i:j] {
			o.vals = append(o.vals, e.value(st.data))
		}
		for _, v := range o.s.cfg.Combine(key, o.vals) {
			size := PairSize(len(key), len(v))
			if size > o.s.cfg.MaxPairSize {
				return fmt.Errorf("kvshuffle: send: Combine returned a pair of %d bytes, above MaxPairSize %d: %w", size, o.s.cfg.MaxPairSize, ErrTooLarge)
			}
			if err := o.emit(ctx, p, key, v, size); err != nil {
				return err
			}
		}
		i = j
	}
	clear(o.vals)
	st.data, st.ents = st.data[:0], st.ents[:0]
	return nil
}

// flush seals every buffer, queues a control frame of kind to every
// destination, and waits until the pump has written all of it, serving
// destinations strictly in schedule order. Called under Shuffle.opMu.
func (o *oside) flush(ctx context.Context, kind frameKind, val uint64, queued *bool, op string) error {
	if !*queued {
		for p := range o.stage {
			if err := o.combineFlush(ctx, p); err != nil {
				return err
			}
		}
		for p := range o.dests {
			o.release(p)
		}
		o.mu.Lock()
		for p := range o.dests {
			d := &o.dests[p]
			n := 0
			if kind == frameMarker {
				n = 8
			}
			d.q = append(d.q, item{buf: -1, kind: kind, n: n, val: val})
		}
		o.strict, o.step = true, 0
		*queued = true
		o.mu.Unlock()
		o.wakePump()
	}
	for {
		o.mu.Lock()
		done := !o.strict
		for p := range o.dests {
			done = done && len(o.dests[p].q) == 0
		}
		ch := o.changed
		o.mu.Unlock()
		if done {
			return nil
		}
		if err := o.s.waitOn(ctx, ch, op); err != nil {
			return err
		}
	}
}

// queueMarkers seals every buffer (through Combine) and queues marker c
// behind each destination's data, without waiting for the pump: Send goes
// on at once and its frames follow the markers. Called under
// Shuffle.opMu.
func (o *oside) queueMarkers(ctx context.Context, c uint64) error {
	for p := range o.stage {
		if err := o.combineFlush(ctx, p); err != nil {
			return err
		}
	}
	for p := range o.dests {
		o.release(p)
	}
	o.mu.Lock()
	for p := range o.dests {
		d := &o.dests[p]
		d.q = append(d.q, item{buf: -1, kind: frameMarker, n: 8, val: c})
	}
	o.mu.Unlock()
	o.wakePump()
	return nil
}

// CloseSend ends this O task's stream: it flushes every buffer (through
// Combine when set), sends an end frame to every partition in schedule
// order, and waits until every receiver has consumed everything this task
// sent. Send afterwards returns ErrSendClosed. If it fails (ctx), it may be
// called again to finish.
func (s *Shuffle) CloseSend(ctx context.Context) error {
	o := s.o
	if o == nil {
		return fmt.Errorf("kvshuffle: close send on rank %d: %w", s.rank, ErrNotOperator)
	}
	s.opMu.Lock()
	defer s.opMu.Unlock()
	defer sendPhaseDone(s.born, s.rank)
	if err := s.usable(); err != nil {
		return err
	}
	o.sendClosed = true
	if err := o.flush(ctx, frameEnd, 0, &o.endQueued, "close send"); err != nil {
		return err
	}
	for {
		o.mu.Lock()
		done := true
		for p := range o.dests {
			done = done && o.dests[p].acked == o.dests[p].sent
		}
		ch := o.changed
		o.mu.Unlock()
		if done {
			return nil
		}
		if err := s.waitOn(ctx, ch, "close send"); err != nil {
			return err
		}
	}
}

// Consumed returns the number of input records this O task has marked
// consumed (MarkConsumed), or restored by RollBack.
func (s *Shuffle) Consumed() uint64 {
	if s.o == nil {
		return 0
	}
	s.o.mu.Lock()
	defer s.o.mu.Unlock()
	return s.o.consumed
}

// MarkConsumed records that this O task has consumed its first n input
// records and has sent every pair derived from them. A checkpoint stores
// the count; after RollBack the task resumes its input at record
// Consumed(). n must not decrease (ErrState).
func (s *Shuffle) MarkConsumed(n uint64) error {
	if s.o == nil {
		return fmt.Errorf("kvshuffle: mark consumed on rank %d: %w", s.rank, ErrNotOperator)
	}
	s.o.mu.Lock()
	defer s.o.mu.Unlock()
	if n < s.o.consumed {
		return fmt.Errorf("kvshuffle: mark consumed: %d is below the %d already marked: %w", n, s.o.consumed, ErrState)
	}
	s.o.consumed = n
	return nil
}
