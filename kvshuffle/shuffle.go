package kvshuffle

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gaspigo/gaspigo/health"
	"github.com/gaspigo/gaspigo/pgas"
	"github.com/gaspigo/gaspigo/segments"
)

// Shuffle is one rank's handle on a key-value shuffle. See the package doc
// for the protocol and the rules on concurrency.
type Shuffle struct {
	born time.Time // New's start: the send phase's trace span
	rt   *pgas.Runtime
	cfg  Config
	log  *slog.Logger
	seg  *segments.Segment
	lay  layout
	rank int
	ord  order
	part func(key []byte, parts int) int

	oRanks, aRanks []int
	oIdx, aIdx     int // this rank's index in oRanks / aRanks, -1 when not a member

	o *oside // nil unless this rank is an O task
	a *aside // nil unless this rank is an A task

	gen atomic.Uint32 // frame generation, bumped by RollBack

	// opMu serialises the calls of the O task and the collectives: Send,
	// CloseSend, Checkpoint, RollBack, and Close's teardown.
	opMu     sync.Mutex
	lastCkpt uint64 // under opMu
	epoch    uint64 // the runtime's epoch when the segment was last created collectively; under opMu
	// ckMu serialises State and RollBack (and so the copies to holders).
	ckMu sync.Mutex
	// sent lists, per holder rank, the files that rank holds copies of
	// (Config.Holders); under ckMu, cleared by RollBack.
	sent   map[int]map[fileKey]bool
	copies *replicaStore // other ranks' files this rank holds
	keep   atomic.Uint64 // the last Release

	bad atomic.Bool // set with err, so that usable is one load when all is well

	// diskLost is closed by LoseSpillDir: every later creation in the
	// spill directory waits for ever, as I/O to a lost disk hangs.
	diskLost     chan struct{}
	diskLostOnce sync.Once

	mu      sync.Mutex // guards the fields below
	cancel  context.CancelFunc
	err     error            // first failure of a background goroutine
	failed  chan struct{}    // closed at the first failure
	recvErr error            // first error of Recv or Groups
	pending map[uint64]opart // checkpoints marked and not taken by State
	// watch closes when a rank of the shuffle may have failed (pgas
	// Runtime.Watch); renewed once it closed. Its goroutine ends with
	// watchCtx, which Close cancels.
	watch    <-chan struct{}
	watchCtx context.Context
	unwatch  context.CancelFunc

	wg        sync.WaitGroup // background goroutines of the current generation
	workers   atomic.Int32   // the pump, drain and merger running now
	closeOnce sync.Once
	closed    chan struct{}

	st stats
}

// layout places the rings, send buffers and notifications in the
// shuffle's segment.
//
// On an A rank, bytes [0, nSrc*slots*slot) are the receive rings: slot k
// of the ring of O task si is at (si*slots+k)*slot. On an O rank, the send
// buffers follow: buffer b of partition p at bufOff+(p*sendBufs+b)*slot,
// then one control frame (markers, end) at ctlOff.
//
// Notification IDs (the same numbering on every rank): data from O task
// si is si; the drain's wake-up is nSrc; credits from partition p are
// nSrc+1+p; the pump's wake-up is nSrc+1+nParts.
type layout struct {
	slot     int64
	slots    int
	sendBufs int
	nSrc     int
	nParts   int
	bufOff   int64
	ctlOff   int64
	size     int64
}

const ctlSize = 64

func newLayout(cfg *Config, nSrc, nParts int, isO, isA bool) layout {
	l := layout{slot: int64(cfg.SlotSize), slots: cfg.Slots, sendBufs: cfg.SendBuffers, nSrc: nSrc, nParts: nParts}
	if isA {
		l.bufOff = int64(nSrc) * int64(l.slots) * l.slot
	}
	l.ctlOff = l.bufOff
	if isO {
		l.ctlOff += int64(nParts) * int64(l.sendBufs) * l.slot
		l.size = l.ctlOff + ctlSize
	} else {
		l.size = l.ctlOff
	}
	l.size = max(l.size, ctlSize)
	return l
}

func (l *layout) ringOff(si, k int) int64 {
	return (int64(si)*int64(l.slots) + int64(k)) * l.slot
}

func (l *layout) bufAt(p, b int) int64 {
	return l.bufOff + (int64(p)*int64(l.sendBufs)+int64(b))*l.slot
}

func (l *layout) dataNotif(si int) segments.NotificationID { return segments.NotificationID(si) }
func (l *layout) drainWake() segments.NotificationID       { return segments.NotificationID(l.nSrc) }
func (l *layout) creditNotif(p int) segments.NotificationID {
	return segments.NotificationID(l.nSrc + 1 + p)
}
func (l *layout) pumpWake() segments.NotificationID {
	return segments.NotificationID(l.nSrc + 1 + l.nParts)
}
func (l *layout) notifications() int { return l.nSrc + l.nParts + 2 }

// New creates the shuffle on this rank. It is collective over all ranks
// of rt: every rank calls it with an equivalent cfg, and it returns once
// every rank has created the shuffle's segment, so sending may start at
// once. Background goroutines (the O side's pump, the A side's drain and
// merger) run until Close.
func New(ctx context.Context, rt *pgas.Runtime, cfg Config) (*Shuffle, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n := rt.Size()
	oRanks, err := resolveRanks("ORanks", cfg.ORanks, n)
	if err != nil {
		return nil, err
	}
	aRanks, err := resolveRanks("ARanks", cfg.ARanks, n)
	if err != nil {
		return nil, err
	}
	rank := rt.Rank()
	s := &Shuffle{
		born:     time.Now(),
		rt:       rt,
		cfg:      cfg,
		log:      cfg.Logger,
		rank:     rank,
		ord:      order{cmp: cfg.Compare, bytewise: cfg.Compare == nil},
		part:     cfg.Partition,
		oRanks:   oRanks,
		aRanks:   aRanks,
		oIdx:     slices.Index(oRanks, rank),
		aIdx:     slices.Index(aRanks, rank),
		failed:   make(chan struct{}),
		closed:   make(chan struct{}),
		sent:     make(map[int]map[fileKey]bool),
		pending:  make(map[uint64]opart),
		copies:   newReplicaStore(),
		diskLost: make(chan struct{}),
	}
	if s.log == nil {
		s.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s.log = s.log.With("component", "kvshuffle", "rank", rank)
	if s.ord.cmp == nil {
		s.ord.cmp = bytes.Compare
	}
	if s.part == nil {
		s.part = HashPartition
	}
	s.lay = newLayout(&cfg, len(oRanks), len(aRanks), s.oIdx >= 0, s.aIdx >= 0)
	if k := s.lay.notifications(); k > segments.DefaultNotifications {
		return nil, cfgErr("ORanks/ARanks", fmt.Sprintf("%d O and %d A ranks", len(oRanks), len(aRanks)),
			"needs %d notification slots, a segment has %d; use fewer ranks per shuffle (len(ORanks)+len(ARanks) <= %d)",
			k, segments.DefaultNotifications, segments.DefaultNotifications-2)
	}
	s.epoch = rt.Epoch()
	seg, err := rt.SegmentCreate(ctx, cfg.SegmentID, s.lay.size, nil)
	if err != nil {
		return nil, fmt.Errorf("kvshuffle: new: %w", err)
	}
	s.seg = seg
	if s.oIdx >= 0 {
		s.o = newOside(s)
	}
	if s.aIdx >= 0 {
		s.a = newAside(s)
	}
	s.start()
	s.log.Debug("shuffle created", "mode", cfg.Mode.String(), "o_tasks", len(oRanks), "a_tasks", len(aRanks),
		"segment_bytes", s.lay.size, "o", s.oIdx >= 0, "a", s.aIdx >= 0)
	return s, nil
}

// start launches the background goroutines of the current generation.
func (s *Shuffle) start() {
	ctx, cancel := context.WithCancel(context.Background())
	s.mu.Lock()
	s.cancel = cancel
	s.mu.Unlock()
	if s.o != nil {
		s.goWorker(ctx, "pump", s.o.pump)
	}
	if s.a != nil {
		s.goWorker(ctx, "drain", s.a.drain)
		s.goWorker(ctx, "merger", s.a.merger)
	}
}

// stop ends the background goroutines and waits for them.
func (s *Shuffle) stop() {
	s.mu.Lock()
	cancel := s.cancel
	s.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	s.wg.Wait()
}

// goWorker runs f as a goroutine owned by s: stop waits for it, and an
// error it returns (other than through its context ending) fails the
// shuffle.
func (s *Shuffle) goWorker(ctx context.Context, name string, f func(context.Context) error) {
	s.wg.Add(1)
	s.workers.Add(1)
	go func() {
		defer s.wg.Done()
		defer s.workers.Add(-1)
		if err := f(ctx); err != nil && ctx.Err() == nil {
			s.fail(fmt.Errorf("kvshuffle: %s: %w", name, err))
		}
	}()
}

// fail records the first background failure; every later call returns
// it. A failure that started here is announced to the peers (abortPeers)
// so that they stop waiting for this rank.
func (s *Shuffle) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return
	}
	s.err = err
	s.bad.Store(true)
	close(s.failed)
	if errors.Is(s.rt.Usable(), pgas.ErrClosed) {
		// The runtime closed under the goroutines (Finalize, or a
		// program ending before Close): a shutdown, not a failure.
		s.log.Debug("shuffle stopped: the runtime closed", "err", err)
		return
	}
	s.log.Error("shuffle failed", "err", err)
	var ae *AbortError
	if !errors.As(err, &ae) {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.abortPeers()
		}()
	}
}

// abortValue is a notification value with the top bit clear, which no
// count carries: it tells the reader that the writer's shuffle failed.
const abortValue = 1

// abortPeers tells, best effort and briefly, every receiver this O task
// sends to and every sender this A task receives from that this rank's
// shuffle failed.
func (s *Shuffle) abortPeers() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	q := s.cfg.Queue
	if s.o != nil {
		for _, r := range s.aRanks {
			s.rt.Notify(ctx, q, r, s.cfg.SegmentID, s.lay.dataNotif(s.oIdx), abortValue)
		}
	}
	if s.a != nil {
		for _, r := range s.oRanks {
			s.rt.Notify(ctx, q, r, s.cfg.SegmentID, s.lay.creditNotif(s.aIdx), abortValue)
		}
	}
	s.rt.Wait(ctx, q)
}

// usable returns the error every call gives after Close or a failure.
func (s *Shuffle) usable() error {
	select {
	case <-s.closed:
		return ErrClosed
	default:
	}
	if !s.bad.Load() {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

func (s *Shuffle) failedChan() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failed
}

// waitOn waits for ch to close, for the caller to re-check its condition.
// It returns early with an error when ctx ends (wrapping pgas.ErrTimeout),
// when the shuffle fails or closes, or when a rank of the shuffle failed
// (its process lost, a newer view): the runtime's failure watch wakes it,
// no timer.
func (s *Shuffle) waitOn(ctx context.Context, ch <-chan struct{}, op string) error {
	w, fresh := s.failures()
	if fresh {
		// A new watch misses what happened before it.
		if err := s.checkRanks(op); err != nil {
			return err
		}
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("kvshuffle: %s: %w: %w", op, pgas.ErrTimeout, context.Cause(ctx))
	case <-s.failedChan():
		return s.usable()
	case <-s.closed:
		return ErrClosed
	case <-w:
		return s.checkRanks(op)
	}
}

// failures returns the shuffle's failure watch over its ranks, and
// whether it was made now. A watch that closed is replaced: it fired, and
// the caller's check said what it meant.
func (s *Shuffle) failures() (<-chan struct{}, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.closed:
		return s.closed, false
	default:
	}
	if s.watch != nil {
		select {
		case <-s.watch:
		default:
			return s.watch, false
		}
	}
	if s.watchCtx == nil {
		s.watchCtx, s.unwatch = context.WithCancel(context.Background())
	}
	s.watch = s.rt.Watch(s.watchCtx, append(slices.Clone(s.oRanks), s.aRanks...))
	return s.watch, true
}

// checkRanks returns a *pgas.RankError for the first rank of the shuffle
// that the runtime sees as failed or lost, or the runtime's error once a
// newer epoch is committed: by then a failed rank's slot in the state
// vector is held by its healthy replacement, and only the epoch tells.
func (s *Shuffle) checkRanks(op string) error {
	if err := s.rt.Usable(); err != nil {
		return fmt.Errorf("kvshuffle: %s: %w", op, err)
	}
	sv := s.rt.StateVector()
	for _, set := range [][]int{s.oRanks, s.aRanks} {
		for _, r := range set {
			if r < len(sv) && (sv[r].State == health.Corrupt || sv[r].Suspect) {
				return &pgas.RankError{Rank: r, Op: "kvshuffle " + op, Err: pgas.ErrRankFailed}
			}
		}
	}
	return nil
}

// Rank returns this rank.
func (s *Shuffle) Rank() int { return s.rank }

// IsO reports whether this rank is an O (operation, sending) task.
func (s *Shuffle) IsO() bool { return s.o != nil }

// IsA reports whether this rank is an A (aggregation, receiving) task.
func (s *Shuffle) IsA() bool { return s.a != nil }

// Parts returns the number of partitions: the size of the A communicator.
func (s *Shuffle) Parts() int { return len(s.aRanks) }

// Partition returns the partition this rank receives, or -1 when it is
// not an A task.
func (s *Shuffle) Partition() int { return s.aIdx }

// Err returns the first error of the shuffle's background work, or of the
// last Recv, Groups or typed iteration; nil if there was none. Check it
// after ranging over Recv or Groups.
func (s *Shuffle) Err() error {
	if err := s.usable(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.recvErr
}

func (s *Shuffle) setRecvErr(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.recvErr == nil {
		s.recvErr = err
	}
}

// Close stops the background goroutines, deletes every spill file the
// shuffle created or adopted (including those pinned by checkpoint
// states), and frees the segment. Calls blocked in the shuffle return
// ErrClosed. It is idempotent and not collective.
func (s *Shuffle) Close() error {
	var err error
	s.closeOnce.Do(func() {
		s.mu.Lock()
		close(s.closed)
		if s.unwatch != nil {
			s.unwatch()
		}
		s.mu.Unlock()
		s.stop()
		s.opMu.Lock() // a Send in progress finishes touching the segment
		defer s.opMu.Unlock()
		if s.a != nil {
			// A process replaced by a newer epoch leaves the files its
			// checkpoints name: its successor restores from them.
			err = s.a.removeAll(s.rt.Fenced())
		}
		if cerr := s.copies.removeAll(); err == nil {
			err = cerr
		}
		if derr := s.rt.SegmentDelete(s.cfg.SegmentID); derr != nil {
			s.log.Debug("segment not deleted", "err", derr) // the runtime was closed first
		}
	})
	return err
}

// stats are the counters behind Stats.
type stats struct {
	pairsSent, bytesSent, framesSent, sendWaits, creditWaits atomic.Uint64
	maxInFlight                                              atomic.Int64
	pairsRecv, bytesRecv, framesRecv, budgetWaits            atomic.Uint64
	spills, spillBytes, merges                               atomic.Uint64
	blockSpills                                              atomic.Uint64 // spills of one block as it lies (spillBlock)
	blocks                                                   atomic.Uint64 // receive blocks allocated (takeBlockLocked)
	copyBytes, copyFiles, fetchBytes, fetchFiles             atomic.Uint64
}

// Stats counts what a shuffle did on this rank.
type Stats struct {
	PairsSent   uint64 // pairs passed to Send
	BytesSent   uint64 // framed bytes of those pairs
	FramesSent  uint64 // frames written to receivers (data, pieces, markers, ends)
	SendWaits   uint64 // times Send waited for a free send buffer (backpressure)
	CreditWaits uint64 // times the pump had data but no credit left
	MaxInFlight int64  // most frames ever outstanding to one receiver (at most Slots)

	PairsReceived  uint64 // pairs taken out of the receive rings
	BytesReceived  uint64 // their framed bytes
	FramesReceived uint64 // frames consumed from the rings
	BudgetWaits    uint64 // times the drain waited for memory under MemoryBudget
	MemoryPeak     int64  // most bytes held against MemoryBudget
	Memory         int64  // bytes held now
	Spills         uint64 // spill files written (spills and on-disk merge passes)
	SpillBytes     uint64 // bytes written to spill files
	SpillFiles     int    // spill files live now
	Merges         uint64 // in-memory sorts and merges
	Blocks         uint64 // receive blocks allocated; the others were reused from the pool

	CopiedBytes  uint64 // bytes of checkpoint spill files sent to holders on other hosts
	CopiedFiles  uint64
	HeldBytes    int64  // bytes of other ranks' files this rank holds copies of now
	FetchedBytes uint64 // bytes of checkpoint spill files fetched from holders by RollBack
	FetchedFiles uint64
}

// Stats returns a snapshot of the counters.
func (s *Shuffle) Stats() Stats {
	st := Stats{
		PairsSent:      s.st.pairsSent.Load(),
		BytesSent:      s.st.bytesSent.Load(),
		FramesSent:     s.st.framesSent.Load(),
		SendWaits:      s.st.sendWaits.Load(),
		CreditWaits:    s.st.creditWaits.Load(),
		MaxInFlight:    s.st.maxInFlight.Load(),
		PairsReceived:  s.st.pairsRecv.Load(),
		BytesReceived:  s.st.bytesRecv.Load(),
		FramesReceived: s.st.framesRecv.Load(),
		BudgetWaits:    s.st.budgetWaits.Load(),
		Spills:         s.st.spills.Load(),
		SpillBytes:     s.st.spillBytes.Load(),
		Merges:         s.st.merges.Load(),
		Blocks:         s.st.blocks.Load(),
		CopiedBytes:    s.st.copyBytes.Load(),
		CopiedFiles:    s.st.copyFiles.Load(),
		FetchedBytes:   s.st.fetchBytes.Load(),
		FetchedFiles:   s.st.fetchFiles.Load(),
	}
	s.copies.mu.Lock()
	st.HeldBytes = s.copies.bytes
	s.copies.mu.Unlock()
	if s.a != nil {
		s.a.mu.Lock()
		st.MemoryPeak, st.Memory, st.SpillFiles = s.a.maxMem, s.a.mem, len(s.a.files)
		s.a.mu.Unlock()
	}
	return st
}

func maxInto(a *atomic.Int64, v int64) {
	for {
		cur := a.Load()
		if v <= cur || a.CompareAndSwap(cur, v) {
			return
		}
	}
}

// LoseSpillDir is for failure injection: it removes this rank's spill
// directory (Config.SpillDir) as the loss of its host's disk would, and
// from then on every spill, merge or copy that would create a file there
// waits for ever, as I/O to a lost disk hangs, so that nothing of this
// rank brings the directory back. The caller must end the process next
// (the injection SIGKILLs it); the shuffle is unusable after the call.
func (s *Shuffle) LoseSpillDir() error {
	if s.cfg.SpillDir == "" {
		return fmt.Errorf("kvshuffle: no SpillDir to lose: %w", ErrState)
	}
	s.diskLostOnce.Do(func() { close(s.diskLost) })
	// Wait out a creation in progress: each holds its lock while it makes
	// a directory, and every later one sees diskLost first.
	if s.a != nil {
		s.a.mu.Lock()
		s.a.mu.Unlock() //nolint:staticcheck // an empty critical section: a barrier
	}
	s.copies.mu.Lock()
	s.copies.mu.Unlock() //nolint:staticcheck // as above
	// A merge that had its directory before the barrier may still create a
	// file in it while RemoveAll runs: remove until the directory is gone.
	var err error
	for range 100 {
		if err = os.RemoveAll(s.cfg.SpillDir); err == nil {
			if _, serr := os.Lstat(s.cfg.SpillDir); errors.Is(serr, fs.ErrNotExist) {
				return nil
			}
		}
	}
	return fmt.Errorf("kvshuffle: spill directory %s still there after 100 removals: %v", s.cfg.SpillDir, err)
}

// waitIfDiskLost never returns once LoseSpillDir was called: it unlocks
// mu, which the caller holds, and blocks, as I/O to a lost disk would.
func (s *Shuffle) waitIfDiskLost(mu *sync.Mutex) {
	select {
	case <-s.diskLost:
		mu.Unlock()
		select {}
	default:
	}
}
