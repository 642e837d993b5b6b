package pgas

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gaspigo/gaspigo/health"
	"github.com/gaspigo/gaspigo/segments"
	"github.com/gaspigo/gaspigo/transport"
)

// view is an immutable picture of the membership: which process holds
// which rank in which epoch. The runtime swaps whole views atomically.
type view struct {
	epoch  uint32
	ranks  []transport.Proc // rank -> proc; transport.NoProc for a vacant rank
	rankOf []int            // proc -> rank, -1 for none
	failed []bool           // proc -> declared failed
	live   []int            // ranks held by a process, ascending: GroupAll's members
}

func newView(epoch uint32, ranks []transport.Proc, numProcs int, failed []bool) *view {
	v := &view{epoch: epoch, ranks: ranks, rankOf: make([]int, numProcs), failed: failed, live: make([]int, 0, len(ranks))}
	if v.failed == nil {
		v.failed = make([]bool, numProcs)
	}
	for i := range v.rankOf {
		v.rankOf[i] = -1
	}
	for r, p := range ranks {
		if p != transport.NoProc && int(p) < numProcs {
			v.rankOf[p] = r
			v.live = append(v.live, r)
		}
	}
	return v
}

// Runtime is one process's handle on the job. All methods are safe for
// concurrent use.
type Runtime struct {
	cfg  Config
	tr   transport.Transport
	self transport.Proc
	log  *slog.Logger

	view        atomic.Pointer[view]
	viewMu      sync.Mutex    // serialises applyView; guards the three below
	viewChanged chan struct{} // closed and replaced at each applied view
	viewErr     error         // the membership's verdict that the job cannot go on
	finished    bool
	halt        atomic.Pointer[error] // set once: this process must stop (fenced, or the membership gave up on it)
	appEpoch    atomic.Uint32         // the epoch the program acknowledged (Init, Recover)
	failEpoch   atomic.Uint64         // latest epoch in which this process saw a failure

	member Membership
	det    *health.Detector
	// launcher is Config.Launcher once Init has returned (nil before, and
	// without one): the membership watcher may apply a view while Init
	// runs, and the vacant ranks of the view Init returns in are reported
	// once, at its end.
	launcher atomic.Pointer[Launcher]

	segMu sync.RWMutex
	segs  map[segments.ID]*segInfo

	peers  []*peer
	queues []*queue

	reqMu   sync.Mutex
	reqs    map[uint64]*request
	nextReq atomic.Uint64

	mail    *mailbox
	passive *inbox

	groupOnce sync.Once
	all       *Group

	stats Stats

	wg        sync.WaitGroup
	closeOnce sync.Once
	closed    chan struct{}
	life      context.Context // ends at Close: bounds the runtime's own background calls
	endLife   context.CancelFunc
	closeErr  error
}

// segInfo is a local segment plus the sizes of the same segment on every
// rank, learnt at collective creation so that remote bounds are checked
// before anything is sent.
type segInfo struct {
	seg   *segments.Segment
	sizes []int64 // by rank; nil for a segment created locally only

	// use pins the memory: handlers that read or write it for a peer hold
	// it shared until they are done with it (a read reply until it is
	// sent); SegmentDelete takes it exclusively before freeing the memory.
	use     sync.RWMutex
	deleted bool // under use
}

// pinSeg returns local segment id with its memory pinned against
// SegmentDelete; the caller calls unpin when done with the memory.
func (rt *Runtime) pinSeg(id uint16) (seg *segments.Segment, unpin func(), err error) {
	rt.segMu.RLock()
	si := rt.segs[segments.ID(id)]
	rt.segMu.RUnlock()
	if si != nil {
		si.use.RLock()
		if !si.deleted {
			return si.seg, si.use.RUnlock, nil
		}
		si.use.RUnlock()
	}
	return nil, nil, fmt.Errorf("pgas: segment %d: %w", id, ErrNoSegment)
}

// Stats counts what the runtime did. Read it with (*Runtime).Stats.
type Stats struct {
	FramesRejected atomic.Uint64 // frames refused: stale epoch, unknown sender, bad segment
	// StaleApplied counts frames that finished applying after the program
	// had acknowledged a newer epoch than the one they were sent in. The
	// epoch check in admit makes it impossible by design; it is counted
	// (and logged as an error) so that tests can prove it stayed 0.
	StaleApplied atomic.Uint64
	RemoteErrors atomic.Uint64 // operations the target refused
	PeersDown    atomic.Uint64 // connections lost
}

// StatsSnapshot is a copy of Stats.
type StatsSnapshot struct {
	FramesRejected, RemoteErrors, PeersDown, StaleApplied uint64
}

// Init starts a runtime over cfg.Transport. Every process of the job calls
// it; a rank process returns at once. (Spare processes are handled by the
// membership layer; without one, Init returns ErrNotPromoted for them.)
func Init(ctx context.Context, cfg Config) (*Runtime, error) {
	if err := cfg.Validate(); err != nil {
		closeOwned(&cfg)
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	life, endLife := context.WithCancel(context.Background())
	rt := &Runtime{
		life:    life,
		endLife: endLife,
		cfg:     cfg,
		tr:      cfg.Transport,
		self:    cfg.Proc,
		segs:    make(map[segments.ID]*segInfo),
		reqs:    make(map[uint64]*request),
		closed:  make(chan struct{}),
		mail:    newMailbox(),
		passive: newInbox(64 << 20),
		member:  cfg.Membership,

		viewChanged: make(chan struct{}),
	}
	ranks := make([]transport.Proc, cfg.NumRanks)
	for r := range ranks {
		ranks[r] = transport.Proc(r)
	}
	rt.view.Store(newView(0, ranks, cfg.NumProcs, nil))
	rt.log = log.With("proc", int(cfg.Proc))
	rt.peers = make([]*peer, cfg.NumProcs)
	for i := range rt.peers {
		rt.peers[i] = newPeer(transport.Proc(i))
	}
	rt.queues = make([]*queue, cfg.NumQueues)
	for i := range rt.queues {
		rt.queues[i] = &queue{}
	}
	if cfg.Membership != nil {
		rt.applyView(cfg.Membership.Current())
	}
	if cfg.Health != nil {
		det, err := health.New(*cfg.Health, rt.self, rt.liveProcs(rt.view.Load()), rt, log.With("proc", int(cfg.Proc)))
		if err != nil {
			closeOwned(&cfg)
			return nil, fmt.Errorf("pgas: failure detector: %w", err)
		}
		rt.det = det
	}
	if err := rt.tr.Start(rt); err != nil {
		rt.closeDetector()
		closeOwned(&cfg)
		return nil, fmt.Errorf("pgas: start transport: %w", err)
	}
	if rt.det != nil {
		events := rt.det.Subscribe()
		rt.goFunc(func() { rt.watchDetector(events) })
	}
	if cfg.Membership != nil {
		rt.goFunc(func() { rt.watchMembership(cfg.Membership) })
		if rt.Rank() < 0 {
			if err := rt.waitPromotion(ctx); err != nil {
				rt.Close()
				return nil, err
			}
			rt.log.Info("spare promoted", "rank", rt.Rank(), "epoch", rt.Epoch())
		}
	} else if rt.Rank() < 0 {
		rt.Close()
		return nil, fmt.Errorf("pgas: init: proc %d is a spare and no membership can promote it: %w", cfg.Proc, ErrNotPromoted)
	}
	rt.appEpoch.Store(rt.view.Load().epoch)
	if cfg.Launcher != nil {
		rt.launcher.Store(&cfg.Launcher)
		rt.reportVacant(nil, rt.view.Load())
	}
	return rt, nil
}

// closeOwned closes the membership and the launcher that Init was given,
// those that can be closed.
func closeOwned(cfg *Config) {
	if c, ok := cfg.Membership.(io.Closer); ok {
		c.Close()
	}
	if c, ok := cfg.Launcher.(io.Closer); ok {
		c.Close()
	}
}

// Report sends a line of progress to the launcher, if there is one. It
// never blocks and never fails.
func (rt *Runtime) Report(text string) {
	if l := rt.launcher.Load(); l != nil {
		(*l).Event(rt.Rank(), rt.Epoch(), text)
	}
}

func (rt *Runtime) closeDetector() {
	if rt.det != nil {
		rt.det.Close()
	}
}

// Rank returns this process's rank in the current view, or -1 for a spare.
func (rt *Runtime) Rank() int { return rt.view.Load().rankOf[rt.self] }

// Size returns the number of ranks. It never changes, not even when the
// job shrinks: a lost rank then becomes vacant (see Vacant).
func (rt *Runtime) Size() int { return len(rt.view.Load().ranks) }

// Vacant reports whether rank r is vacant in the current view: it was lost
// with no spare left in a job that shrinks (spares.Config.Shrink), so no
// process holds it. Its work is the survivors' to share; GroupAll leaves
// it out, and one-sided operations on it fail with ErrVacant. Ranks
// outside 0..Size-1 are not vacant.
func (rt *Runtime) Vacant(r int) bool {
	v := rt.view.Load()
	return r >= 0 && r < len(v.ranks) && v.ranks[r] == transport.NoProc
}

// LiveRanks returns the ranks that are not vacant in the current view, in
// ascending order: all of 0..Size-1 unless the job shrank. The current
// view is the one the program recovered into, unless a newer one was
// committed since, in which case the next operation fails with
// ErrStaleEpoch and the program recovers (and asks again).
func (rt *Runtime) LiveRanks() []int { return slices.Clone(rt.view.Load().live) }

// Epoch returns the current membership epoch.
func (rt *Runtime) Epoch() uint64 { return uint64(rt.view.Load().epoch) }

// Proc returns this process's ID.
func (rt *Runtime) Proc() transport.Proc { return rt.self }

// Host returns the host label of the process holding rank r, or "" when
// host labels are unknown.
func (rt *Runtime) Host(r int) string {
	v := rt.view.Load()
	if rt.cfg.Hosts == nil || r < 0 || r >= len(v.ranks) || v.ranks[r] == transport.NoProc {
		return ""
	}
	return rt.cfg.Hosts[v.ranks[r]]
}

// HostLabels returns every process's host label, indexed by process ID
// (spares included), or nil when host labels are unknown.
func (rt *Runtime) HostLabels() []string { return slices.Clone(rt.cfg.Hosts) }

// Transport returns the transport the runtime runs over, for programs and
// tools that read its statistics (for example tcp.Stats: refused
// handshakes, bad frames).
func (rt *Runtime) Transport() transport.Transport { return rt.tr }

// Logger returns the runtime's logger, with proc and rank attributes.
func (rt *Runtime) Logger() *slog.Logger { return rt.log }

// Stats returns a copy of the runtime's counters.
func (rt *Runtime) Stats() StatsSnapshot {
	return StatsSnapshot{
		FramesRejected: rt.stats.FramesRejected.Load(),
		RemoteErrors:   rt.stats.RemoteErrors.Load(),
		PeersDown:      rt.stats.PeersDown.Load(),
		StaleApplied:   rt.stats.StaleApplied.Load(),
	}
}

// StateVector returns one entry per rank: HEALTHY or CORRUPT as the current
// view sees it, plus this process's local suspicion (a lost connection).
func (rt *Runtime) StateVector() []health.Entry {
	v := rt.view.Load()
	out := make([]health.Entry, len(v.ranks))
	for r, p := range v.ranks {
		if p == transport.NoProc || v.failed[p] {
			out[r].State = health.Corrupt
			continue
		}
		out[r].Suspect = rt.peers[p].isDown()
	}
	return out
}

// Close stops the runtime: the transport first, then every goroutine the
// runtime owns. Blocked calls return ErrClosed. Close is idempotent.
func (rt *Runtime) Close() error {
	rt.closeOnce.Do(func() {
		st := rt.Stats()
		rt.log.Info("runtime closed", "rank", rt.Rank(), "epoch", rt.Epoch(), "frames_rejected", st.FramesRejected,
			"remote_errors", st.RemoteErrors, "peers_down", st.PeersDown, "stale_applied", st.StaleApplied)
		rt.sayGoodbye()
		close(rt.closed)
		rt.endLife()
		rt.closeErr = rt.tr.Close()
		rt.closeDetector()
		closeOwned(&rt.cfg)
		for _, p := range rt.peers {
			p.fail(ErrClosed)
		}
		rt.failRequests(func(*request) bool { return true }, ErrClosed)
		rt.mail.close()
		rt.passive.close()
		rt.wg.Wait()
		rt.segMu.Lock()
		for id, si := range rt.segs {
			si.seg.Close()
			delete(rt.segs, id)
		}
		rt.segMu.Unlock()
	})
	return rt.closeErr
}

func (rt *Runtime) isClosed() bool {
	select {
	case <-rt.closed:
		return true
	default:
		return false
	}
}

// goFunc runs f in a goroutine owned by the runtime: Close waits for it.
func (rt *Runtime) goFunc(f func()) {
	rt.wg.Add(1)
	go func() {
		defer rt.wg.Done()
		f()
	}()
}

// procOf maps a rank to the process holding it in view v.
func (rt *Runtime) procOf(v *view, rank int, op string) (transport.Proc, error) {
	if rank < 0 || rank >= len(v.ranks) {
		return 0, fmt.Errorf("pgas: %s: rank %d outside 0..%d: %w", op, rank, len(v.ranks)-1, ErrInvalid)
	}
	p := v.ranks[rank]
	if p == transport.NoProc {
		// Not a failure to recover from: the view the program runs in
		// has no process for rank, and no later one will.
		return 0, fmt.Errorf("pgas: %s: rank %d: %w", op, rank, ErrVacant)
	}
	if v.failed[p] {
		return 0, &RankError{Rank: rank, Op: op, Err: ErrRankFailed}
	}
	return p, nil
}

// send sends one frame to p with the current epoch stamped in.
func (rt *Runtime) send(ctx context.Context, p transport.Proc, h *transport.Header, payload []byte) error {
	h.Epoch = rt.view.Load().epoch
	rt.stampAck(p, h)
	return rt.tr.Send(ctx, p, h, payload)
}

// sendErr turns a transport error on an operation addressed to rank, sent
// to its process proc, into what the caller sees.
func (rt *Runtime) sendErr(ctx context.Context, err error, rank int, proc transport.Proc, op string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, transport.ErrPeerDown):
		// As good as PeerDown, which may not have been delivered yet. The
		// process sent to, not the rank's holder in the current view: a
		// newer view may already give the rank to a healthy spare.
		rt.PeerDown(proc, err)
		return &RankError{Rank: rank, Op: op, Err: fmt.Errorf("%w: %v", ErrRankFailed, err)}
	case errors.Is(err, transport.ErrClosed):
		return ErrClosed
	case ctx.Err() != nil:
		return ctxError(ctx, op)
	}
	return fmt.Errorf("pgas: %s: rank %d: %w", op, rank, err)
}

// peer is the per-process state of the one-sided protocol.
type peer struct {
	proc transport.Proc

	// sendMu serialises frames that carry a sequence number, so that
	// sequence order is wire order and one cumulative ack covers a prefix.
	sendMu  sync.Mutex
	nextSeq uint64

	mu      sync.Mutex
	acked   uint64            // highest sequence the peer applied
	nacks   map[uint64]uint64 // seq -> error code, for refused operations
	downErr error             // set once the connection is lost
	changed chan struct{}     // closed and replaced when acked or downErr changes
	down    chan struct{}     // closed when downErr is set

	// landing is 1 + the epoch of the frame from this peer being applied
	// now (admitted, its payload maybe still arriving), 0 when none. Only
	// the peer's reader goroutine writes it; Recover waits until no frame
	// of an older epoch is landing before it lets the program go on.
	landing atomic.Uint64

	// inbound side, under ackMu
	ackMu    sync.Mutex
	applied  uint64      // highest sequence applied from this peer
	ackedOut uint64      // highest sequence acknowledged to it
	nacksOut [][2]uint64 // refused sequences and their codes, not yet sent
	ackDirty bool        // an ack job is queued
	ackForce bool        // the sender asked for an ack
	// nacksSending counts refusals taken by a flusher and not yet sent;
	// while it is non-zero no ack is piggybacked.
	nacksSending int
	flushMu      sync.Mutex // held by whoever sends acks to this peer (flushAcks)

	out outbox // replies to this peer, sent by a goroutine of their own

	departed   atomic.Bool // the peer said goodbye: its connection closing is no failure
	toldFenced atomic.Bool // this peer, declared failed, was told it is fenced
}

// FrameControl.A values.
const (
	// ctlGoodbye: the sender is closing its runtime.
	ctlGoodbye = 1
	// ctlFenced: the sender's committed view declares the receiver failed.
	ctlFenced = 2
)

// spareSeesEnd: an idle spare that has heard goodbye from every rank's
// process knows the job is over even if the membership can no longer say
// so (the ranks' processes were most of its voters and have left).
func (rt *Runtime) spareSeesEnd() {
	v := rt.view.Load()
	if v.rankOf[rt.self] >= 0 {
		return
	}
	for _, p := range v.ranks {
		if p != transport.NoProc && !rt.peers[p].departed.Load() {
			return
		}
	}
	rt.viewMu.Lock()
	if rt.finished {
		rt.viewMu.Unlock()
		return
	}
	rt.finished = true
	ch := rt.viewChanged
	rt.viewChanged = make(chan struct{})
	rt.viewMu.Unlock()
	close(ch)
	rt.log.Info("every rank said goodbye: the job is over for this spare")
}

// sayGoodbye tells every live peer, briefly, that this process is leaving
// on purpose, so that its connections closing is not taken for a failure.
// The goodbye is sequenced and acknowledged: a transport may drop frames
// still in flight when it closes, and an idle spare counts goodbyes.
func (rt *Runtime) sayGoodbye() {
	if rt.halted() != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	var sent []pendingOp
	for _, p := range rt.peers {
		if p.proc == rt.self || p.isDown() {
			continue
		}
		// Acks of what this process applied go first: the peer may wait
		// for them, and the outbox is abandoned once Close goes on.
		rt.flushAcks(ctx, p)
		h := transport.Header{Type: transport.FrameControl, Flags: transport.FlagAck, A: ctlGoodbye}
		p.sendMu.Lock()
		p.nextSeq++
		h.Seq = p.nextSeq
		err := rt.send(ctx, p.proc, &h, nil)
		p.sendMu.Unlock()
		if err == nil {
			sent = append(sent, pendingOp{rank: -1, peer: p, seq: h.Seq, op: "goodbye"})
		}
	}
	for _, op := range sent {
		rt.waitAck(ctx, op) // best effort: a peer that does not answer is left
	}
}

func newPeer(p transport.Proc) *peer {
	return &peer{proc: p, changed: make(chan struct{}), down: make(chan struct{})}
}

func (p *peer) isDown() bool {
	select {
	case <-p.down:
		return true
	default:
		return false
	}
}

func (p *peer) fail(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.downErr != nil {
		return
	}
	p.downErr = err
	close(p.down)
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *peer) ack(seq uint64) {
	p.mu.Lock()
	if seq > p.acked {
		p.acked = seq
		close(p.changed)
		p.changed = make(chan struct{})
	}
	p.mu.Unlock()
}

func (p *peer) nack(seq, code uint64) {
	p.mu.Lock()
	if p.nacks == nil {
		p.nacks = make(map[uint64]uint64)
	}
	p.nacks[seq] = code
	p.acked = max(p.acked, seq-1) // the target applied everything before it
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
}

// HandleFrame implements transport.Handler. It runs on the transport's
// reader goroutine for from, so it never blocks on a send: replies go
// through the peer's outbox.
func (rt *Runtime) HandleFrame(from transport.Proc, h *transport.Header, p transport.Payload) error {
	if int(from) >= len(rt.peers) {
		rt.stats.FramesRejected.Add(1)
		p.Discard()
		return fmt.Errorf("pgas: frame from unknown proc %d", from)
	}
	if h.Ack != 0 && h.Type != transport.FrameAck && !rt.view.Load().failed[from] {
		rt.peers[from].ack(h.Ack) // a cumulative ack riding on this frame
	}
	if err := rt.admit(from, h); err != nil {
		rt.stats.FramesRejected.Add(1)
		p.Discard()
		if errors.Is(err, ErrFenced) && rt.peers[from].toldFenced.CompareAndSwap(false, true) {
			// A replaced process may never hear it from the membership (it
			// left the Raft configuration) and its unacknowledged frames
			// are dropped silently: tell it once.
			rt.reply(from, transport.Header{Type: transport.FrameControl, A: ctlFenced}, nil)
		}
		switch {
		case h.Flags&transport.FlagAck != 0:
			rt.queueNack(from, h.Seq, codeOf(err))
		case h.Type == transport.FrameReadReq:
			rt.reply(from, transport.Header{Type: transport.FrameReadResp, Seq: h.Seq, A: codeOf(err)}, nil)
		case h.Type == transport.FrameAtomicReq:
			rt.reply(from, transport.Header{Type: transport.FrameAtomicResp, Seq: h.Seq, B: codeOf(err)}, nil)
		}
		return err
	}
	pr := rt.peers[from]
	pr.landing.Store(uint64(h.Epoch) + 1)
	defer pr.landing.Store(0)
	switch h.Type {
	case transport.FrameWrite:
		return rt.handleWrite(from, h, p)
	case transport.FrameNotify:
		seg, err := rt.notifyTarget(h.Seg, h.A, h.B)
		rt.appliedNotify(from, h, seg, err)
		return err
	case transport.FrameAck:
		peer := rt.peers[from]
		if h.Flags&transport.FlagAck != 0 {
			rt.requestedAck(from)
			return p.Discard()
		}
		if h.A == codeFenced {
			// The target's committed view says this process was replaced.
			rt.fence(fmt.Sprintf("proc %d refused a frame: this process is declared failed", from))
		}
		if h.A != codeOK {
			rt.stats.RemoteErrors.Add(1)
			peer.nack(h.Seq, h.A)
		} else {
			peer.ack(h.Seq)
		}
		return p.Discard()
	case transport.FrameReadReq:
		rt.handleReadReq(from, h)
		return p.Discard()
	case transport.FrameReadResp, transport.FrameAtomicResp:
		return rt.handleResponse(from, h, p)
	case transport.FrameAtomicReq:
		old, err := rt.localAtomic(h.Seg, int64(h.Off), h.Flags, h.A, h.B)
		resp := transport.Header{Type: transport.FrameAtomicResp, Seq: h.Seq, A: old, B: codeOf(err)}
		rt.reply(from, resp, nil)
		return p.Discard()
	case transport.FramePassive:
		return rt.handlePassive(from, h, p)
	case transport.FrameColl:
		return rt.mail.deliver(from, h, p)
	case transport.FrameHeartbeat:
		return rt.handleHeartbeat(from, p)
	case transport.FrameControl:
		switch h.A {
		case ctlGoodbye:
			rt.peers[from].departed.Store(true)
			rt.spareSeesEnd()
		case ctlFenced:
			rt.fence(fmt.Sprintf("proc %d refused a frame: its committed view declares this process failed", from))
			return p.Discard()
		}
		rt.applied(from, h, nil)
		return p.Discard()
	}
	rt.stats.FramesRejected.Add(1)
	p.Discard()
	return fmt.Errorf("pgas: unexpected frame type %d from proc %d", h.Type, from)
}

// admit decides whether a frame may be applied. Epoch fencing lives here:
// nothing from a process declared failed, and nothing sequenced from an
// older epoch, is ever applied. Detector traffic is exempt from the epoch
// check (it is what finds out about epochs), not from the failed check.
func (rt *Runtime) admit(from transport.Proc, h *transport.Header) error {
	v := rt.view.Load()
	if v.failed[from] {
		return fmt.Errorf("pgas: frame from proc %d, declared failed: %w", from, ErrFenced)
	}
	if h.Epoch < v.epoch && h.Type != transport.FrameHeartbeat && h.Type != transport.FrameAck {
		return fmt.Errorf("pgas: frame from proc %d with epoch %d < %d: %w", from, h.Epoch, v.epoch, ErrStaleEpoch)
	}
	// A sender ahead of us applied a newer view first: fine, ours follows.
	return nil
}

func (rt *Runtime) localSeg(id uint16) (*segments.Segment, error) {
	rt.segMu.RLock()
	si := rt.segs[segments.ID(id)]
	rt.segMu.RUnlock()
	if si == nil {
		return nil, fmt.Errorf("pgas: segment %d: %w", id, ErrNoSegment)
	}
	return si.seg, nil
}

func (rt *Runtime) handleWrite(from transport.Proc, h *transport.Header, p transport.Payload) error {
	seg, unpin, err := rt.pinSeg(h.Seg)
	var dst []byte
	if err == nil {
		defer unpin()
		dst, err = seg.Slice(int64(h.Off), int64(h.Len))
		if err != nil || h.Off > 1<<62 {
			err = fmt.Errorf("pgas: write from proc %d: %w: %v", from, ErrBounds, err)
		}
	}
	if err != nil {
		p.Discard()
		rt.stats.FramesRejected.Add(1)
		rt.applied(from, h, err)
		return err
	}
	if err := p.ReadInto(dst); err != nil {
		return err // the connection is failing; PeerDown follows
	}
	var nseg *segments.Segment
	if h.Flags&transport.FlagNotify != 0 {
		nseg, err = rt.notifyTarget(h.Seg, h.A, h.B)
	}
	rt.appliedNotify(from, h, nseg, err)
	return err
}

// notifyTarget checks a notification before it is set and returns its
// segment.
func (rt *Runtime) notifyTarget(segID uint16, id, val uint64) (*segments.Segment, error) {
	seg, err := rt.localSeg(segID)
	if err != nil {
		return nil, err
	}
	if id >= uint64(seg.NumNotifications()) || val > 0xffffffff {
		return nil, fmt.Errorf("pgas: notification %d=%d: %w", id, val, ErrInvalid)
	}
	return seg, nil
}

// appliedNotify records a sequenced frame as applied (or refused with
// err), then sets its notification (seg non-nil), then schedules the ack.
// Recording first means that a process which sees the notification and
// closes at once still acknowledges the frame (see sayGoodbye).
func (rt *Runtime) appliedNotify(from transport.Proc, h *transport.Header, seg *segments.Segment, err error) {
	start := rt.recordApplied(from, h, err)
	if seg != nil && err == nil {
		seg.SetNotification(segments.NotificationID(h.A), uint32(h.B))
	}
	if start {
		rt.enqueue(from, outJob{ack: true})
	}
}

func (rt *Runtime) setNotification(segID uint16, id, val uint64) error {
	seg, err := rt.localSeg(segID)
	if err != nil {
		return err
	}
	if id > 0xffff || val > 0xffffffff {
		return fmt.Errorf("pgas: notification %d=%d: %w", id, val, ErrInvalid)
	}
	if err := seg.SetNotification(segments.NotificationID(id), uint32(val)); err != nil {
		return fmt.Errorf("pgas: notification %d: %w: %v", id, ErrInvalid, err)
	}
	return nil
}

// applied records that a sequenced frame from a peer was applied (or
// refused with err) and schedules the acknowledgement. Refusals are queued
// in the same state as the cumulative ack and flushed before it, so the
// sender always learns of a refused sequence before any ack that covers it.
func (rt *Runtime) applied(from transport.Proc, h *transport.Header, err error) {
	if rt.recordApplied(from, h, err) {
		rt.enqueue(from, outJob{ack: true})
	}
}

// recordApplied is applied without scheduling: it reports whether an ack
// job must be queued.
func (rt *Runtime) recordApplied(from transport.Proc, h *transport.Header, err error) bool {
	if err == nil && h.Epoch < rt.appEpoch.Load() {
		rt.stats.StaleApplied.Add(1)
		rt.log.Error("applied a frame from a stale epoch", "from", uint32(from), "type", h.Type,
			"frame_epoch", h.Epoch, "program_epoch", rt.appEpoch.Load())
	}
	if h.Flags&transport.FlagAck == 0 {
		return false
	}
	pr := rt.peers[from]
	pr.ackMu.Lock()
	defer pr.ackMu.Unlock()
	if err == nil {
		// No ack frame of its own: the cumulative ack rides on the next
		// frame going back, or answers the sender's request when it waits.
		pr.applied = h.Seq
		return false
	}
	// A refusal goes out at once, ahead of any ack that covers it.
	pr.nacksOut = append(pr.nacksOut, [2]uint64{h.Seq, codeOf(err)})
	start := !pr.ackDirty
	pr.ackDirty = true
	return start
}

// requestedAck handles a sender's request (it waits in Wait): answer with
// the cumulative ack even if one was already carried by a frame, since
// that frame may have been cut.
func (rt *Runtime) requestedAck(from transport.Proc) {
	pr := rt.peers[from]
	pr.ackMu.Lock()
	pr.ackForce = true
	start := !pr.ackDirty
	pr.ackDirty = true
	pr.ackMu.Unlock()
	if start {
		rt.enqueue(from, outJob{ack: true})
	}
}

// stampAck puts the cumulative ack of what this process applied from p on
// a frame going to p, unless a refusal for p is still unsent: an ack must
// never reach the sender ahead of the refusal of a sequence it covers.
func (rt *Runtime) stampAck(p transport.Proc, h *transport.Header) {
	if h.Type == transport.FrameAck || int(p) >= len(rt.peers) {
		return
	}
	pr := rt.peers[p]
	pr.ackMu.Lock()
	if len(pr.nacksOut) == 0 && pr.nacksSending == 0 && pr.applied > 0 {
		h.Ack = pr.applied
		pr.ackedOut = max(pr.ackedOut, pr.applied)
	}
	pr.ackMu.Unlock()
}

// requestAck asks p for its cumulative ack: sent by a waiter whose
// operations are not acknowledged yet. It follows them on the wire, so the
// answer covers them.
func (rt *Runtime) requestAck(ctx context.Context, pr *peer) {
	h := transport.Header{Type: transport.FrameAck, Flags: transport.FlagAck}
	rt.send(ctx, pr.proc, &h, nil)
}

func (rt *Runtime) queueNack(from transport.Proc, seq, code uint64) {
	h := transport.Header{Type: transport.FrameWrite, Flags: transport.FlagAck, Seq: seq}
	rt.applied(from, &h, errOf(code))
}

// PeerDown implements transport.Handler: the connection to proc was lost.
func (rt *Runtime) PeerDown(proc transport.Proc, err error) {
	if int(proc) >= len(rt.peers) {
		return
	}
	rt.stats.PeersDown.Add(1)
	rt.noteFailure(proc)
	rt.cutOff(proc, err)
}

// noteFailure records that proc was seen failing in the current epoch, so
// that Recover waits for a view that replaces it. A proc the current view
// already declared failed needs no newer view.
func (rt *Runtime) noteFailure(proc transport.Proc) {
	v := rt.view.Load()
	if int(proc) < len(v.failed) && v.failed[proc] {
		return
	}
	for {
		old := rt.failEpoch.Load()
		if uint64(v.epoch) <= old || rt.failEpoch.CompareAndSwap(old, uint64(v.epoch)) {
			return
		}
	}
}

// cutOff fails everything that waits on proc and tells the detector.
func (rt *Runtime) cutOff(proc transport.Proc, err error) {
	if rt.peers[proc].isDown() {
		return
	}
	departed := rt.peers[proc].departed.Load()
	if departed {
		rt.log.Debug("peer left", "peer_proc", int(proc))
	} else {
		rt.log.Warn("peer lost", "peer_proc", int(proc), "err", err)
	}
	rt.peers[proc].fail(fmt.Errorf("%w: %v", ErrRankFailed, err))
	if rt.det != nil && !departed {
		rt.det.PeerDown(proc)
	}
	rt.failRequests(func(r *request) bool { return r.proc == proc }, ErrRankFailed)
}

// outJob is one reply queued for a peer.
type outJob struct {
	ack     bool // send the peer's latest applied sequence
	h       transport.Header
	payload []byte
	done    func() // called once the job is sent or dropped (unpins a read reply's segment)
}

// outbox is an unbounded FIFO of replies with at most one goroutine
// draining it. Unbounded, because a bounded one could make reader goroutines
// on two processes wait on each other.
type outbox struct {
	mu      sync.Mutex
	jobs    []outJob
	running bool
}

func (rt *Runtime) reply(to transport.Proc, h transport.Header, payload []byte) {
	rt.enqueue(to, outJob{h: h, payload: payload})
}

func (rt *Runtime) enqueue(to transport.Proc, j outJob) {
	pr := rt.peers[to]
	ob := &pr.out
	ob.mu.Lock()
	ob.jobs = append(ob.jobs, j)
	start := !ob.running
	ob.running = true
	ob.mu.Unlock()
	if start {
		if rt.isClosed() {
			return
		}
		rt.goFunc(func() { rt.drain(pr) })
	}
}

func (rt *Runtime) drain(pr *peer) {
	ob := &pr.out
	ctx := context.Background()
	for {
		ob.mu.Lock()
		if len(ob.jobs) == 0 || rt.isClosed() {
			for _, j := range ob.jobs {
				if j.done != nil {
					j.done()
				}
			}
			ob.jobs = nil
			ob.running = false
			ob.mu.Unlock()
			return
		}
		j := ob.jobs[0]
		ob.jobs[0] = outJob{}
		ob.jobs = ob.jobs[1:]
		ob.mu.Unlock()
		if j.ack {
			rt.flushAcks(ctx, pr)
			continue
		}
		h := j.h
		if err := rt.send(ctx, pr.proc, &h, j.payload); err != nil {
			rt.log.Debug("reply dropped", "peer_proc", int(pr.proc), "err", err)
		}
		if j.done != nil {
			j.done()
		}
	}
}

// flushAcks sends the refusals queued for pr, then one cumulative ack.
func (rt *Runtime) flushAcks(ctx context.Context, pr *peer) {
	// One flusher at a time, so that a refusal is never overtaken by an
	// ack covering it from another flusher (Close's and the outbox's).
	pr.flushMu.Lock()
	defer pr.flushMu.Unlock()
	pr.ackMu.Lock()
	nacks := pr.nacksOut
	pr.nacksOut = nil
	pr.nacksSending += len(nacks) // no piggybacked ack until they are out
	applied := pr.applied
	send := applied > pr.ackedOut || (pr.ackForce && applied > 0)
	pr.ackedOut = max(pr.ackedOut, applied)
	pr.ackDirty, pr.ackForce = false, false
	pr.ackMu.Unlock()
	defer func() {
		pr.ackMu.Lock()
		pr.nacksSending -= len(nacks)
		pr.ackMu.Unlock()
	}()
	for _, n := range nacks {
		h := transport.Header{Type: transport.FrameAck, Seq: n[0], A: n[1]}
		if err := rt.send(ctx, pr.proc, &h, nil); err != nil {
			return
		}
	}
	if send {
		h := transport.Header{Type: transport.FrameAck, Seq: applied}
		rt.send(ctx, pr.proc, &h, nil)
	}
}
