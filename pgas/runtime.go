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
	"unsafe"
	"weak"

	"github.com/gaspigo/gaspigo/health"
	"github.com/gaspigo/gaspigo/pgas/internal/samehost"
	"github.com/gaspigo/gaspigo/segments"
	"github.com/gaspigo/gaspigo/transport"
)

// Runtime is one process's handle on the job. All methods are safe for
// concurrent use.
type Runtime struct {
	cfg  Config
	tr   transport.Transport
	self transport.Proc
	log  *slog.Logger

	frames frameCounters // the transport's frame counters (package obs)

	view        atomic.Pointer[view]
	viewMu      sync.Mutex            // serialises view changes; guards viewChanged
	viewChanged chan struct{}         // closed and replaced at each applied view
	halt        atomic.Pointer[error] // set once: this process must stop (fenced, or the membership gave up on it)
	appEpoch    atomic.Uint32         // the epoch the program acknowledged (Init, Recover)
	failEpoch   atomic.Uint64         // latest epoch in which this process saw a failure
	aheadEpoch  atomic.Uint64         // newest epoch a peer's frame carried (admit): committed, so Recover waits for it
	// joiners holds the address of every process that joined the job
	// that a view listed (learnJoiners), and noPeerAdder that the
	// transport could not be given one; both under viewMu.
	joiners     map[transport.Proc]string
	noPeerAdder bool

	member Membership
	det    *health.Detector
	// launcher is Config.Launcher once Init has returned (nil before, and
	// without one): the membership watcher may apply a view while Init
	// runs, and the vacant ranks of the view Init returns in are reported
	// once, at its end.
	launcher atomic.Pointer[Launcher]

	segMu sync.RWMutex
	segs  map[segments.ID]*segInfo
	// segGen numbers segment memories (segInfo.gen; direct.go).
	segGen     atomic.Uint32
	mapRefused atomic.Bool // a peer's shared segment could not be mapped (said once)

	peers  *peerTable
	queues []*queue

	reqMu   sync.Mutex
	reqs    map[uint64]*request
	nextReq atomic.Uint64

	mail    *mailbox
	passive *inbox

	groupOnce sync.Once
	all       *Group

	stats Stats
	// notePoll is how NotifyWaitSome polls shared slots before it parks,
	// and a collective its area (chooseSpin).
	notePoll segments.WaitPolicy
	lastSeg  atomic.Pointer[segInfo] // lookupSeg's cache
	coll     samehost.Areas          // the collective areas this process owns, and no-area marks (collshm.go)

	wg        sync.WaitGroup
	closeOnce sync.Once
	closing   atomic.Bool // set when Close begins: a peer lost from then on is the job ending
	closed    chan struct{}
	isShut    atomic.Bool     // set as closed is closed: isClosed, on every operation, reads it
	life      context.Context // ends at Close: bounds the runtime's own background calls
	endLife   context.CancelFunc
	closeErr  error
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
	// DirectWrites counts writes copied straight into a same-host peer's
	// segment (Config.DirectShm).
	DirectWrites atomic.Uint64
	// DirectNotes counts notifications stored straight into a same-host
	// peer's slot, and Wakes the frames sent to wake a waiter parked
	// there (directnote.go).
	DirectNotes atomic.Uint64
	Wakes       atomic.Uint64
	// ShmCollectives counts collectives run in a collective area in
	// shared memory (collshm.go).
	ShmCollectives atomic.Uint64
}

// StatsSnapshot is a copy of Stats.
type StatsSnapshot struct {
	FramesRejected, RemoteErrors, PeersDown, StaleApplied uint64
	DirectWrites, DirectNotes, Wakes, ShmCollectives      uint64
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
		frames:  framesOf(cfg.Transport),
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
	// A process that joined the job (Proc >= NumProcs) has its own id in
	// its tables from the start; the membership's view, applied next,
	// lists it among the joined processes.
	size := max(cfg.NumProcs, int(cfg.Proc)+1)
	rt.view.Store(firstView(cfg.NumRanks, cfg.NumProcs, size))
	rt.log = log.With("proc", int(cfg.Proc))
	rt.peers = newPeerTable(size)
	rt.queues = make([]*queue, cfg.NumQueues)
	for i := range rt.queues {
		rt.queues[i] = &queue{}
	}
	if cfg.Membership != nil {
		cur := cfg.Membership.Current()
		if err := cfg.joinedIn(cur); err != nil {
			closeOwned(&cfg)
			return nil, err
		}
		rt.applyView(cur)
	}
	if cfg.Health != nil {
		det, err := health.New(*cfg.Health, rt.self, rt.view.Load().liveProcs(), callbacks{rt}, log.With("proc", int(cfg.Proc)))
		if err != nil {
			closeOwned(&cfg)
			return nil, fmt.Errorf("pgas: failure detector: %w", err)
		}
		rt.det = det
	}
	if rt.directOn() {
		rt.tr.(transport.MemorySharer).ShareMemory(rt.provideMemory)
		segments.PrepareWriter()
	}
	rt.notePoll = rt.chooseSpin()
	if err := rt.tr.Start(callbacks{rt}); err != nil {
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
		}
		// Also a spare whose promotion committed before Init read the
		// view (a joiner on a busy machine) was promoted: say so.
		if rt.StartedAsSpare() {
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
// host labels are unknown. For a process that joined the job it is the
// label the membership's view gives it (Joiner.Host), for placing data on
// other hosts than a rank's; collectives place it on a host of its own
// all the same (it shares no memory with anyone).
func (rt *Runtime) Host(r int) string {
	v := rt.view.Load()
	if rt.cfg.Hosts == nil || r < 0 || r >= len(v.ranks) || v.ranks[r] == transport.NoProc {
		return ""
	}
	return rt.hostOf(v, v.ranks[r])
}

// hostOf returns p's host label in view v: Config.Hosts for the job's
// first processes, the view's Joiner.Host for a process that joined,
// "" otherwise.
func (rt *Runtime) hostOf(v *view, p transport.Proc) string {
	if int64(p) < int64(len(rt.cfg.Hosts)) {
		return rt.cfg.Hosts[p]
	}
	if j, ok := v.joiner(p); ok {
		return j.Host
	}
	return ""
}

// Placement names what LiveRanks and Host answer now: two runtimes of one
// process with equal Placements (the same view, built once per content,
// and the same Config.Hosts) give the same answers for every rank. It is
// for the callers that derive a table from those answers, so that the
// runtimes of a simulation of thousands of ranks in one process derive
// it once and not once each, at O(N) apiece. It holds nothing alive.
type Placement struct {
	v     weak.Pointer[view]
	hosts *string
	n     int
}

// Placement returns the current view's Placement.
func (rt *Runtime) Placement() Placement {
	return Placement{v: weak.Make(rt.view.Load()), hosts: unsafe.SliceData(rt.cfg.Hosts), n: len(rt.cfg.Hosts)}
}

// HostLabels returns every process's host label, indexed by process ID
// (spares included, and the processes that joined the job in the current
// view: "" for an id that never joined), or nil when host labels are
// unknown.
func (rt *Runtime) HostLabels() []string {
	if rt.cfg.Hosts == nil {
		return nil
	}
	v := rt.view.Load()
	out := slices.Grow(slices.Clone(rt.cfg.Hosts), max(0, v.size()-len(rt.cfg.Hosts)))
	for p := len(rt.cfg.Hosts); p < v.size(); p++ {
		out = append(out, rt.hostOf(v, transport.Proc(p)))
	}
	return out
}

// Transport returns the transport the runtime runs over, for programs and
// tools that read its statistics (for example tcp.Stats: refused
// handshakes, bad frames).
func (rt *Runtime) Transport() transport.Transport { return rt.tr }

// Logger returns the runtime's logger, with proc and rank attributes.
func (rt *Runtime) Logger() *slog.Logger { return rt.log }

// Stats returns a copy of the runtime's counters.
func (rt *Runtime) Stats() StatsSnapshot {
	for _, qu := range rt.queues {
		qu.mu.Lock()
		rt.flushCounts(qu)
		qu.mu.Unlock()
	}
	return StatsSnapshot{
		FramesRejected: rt.stats.FramesRejected.Load(),
		RemoteErrors:   rt.stats.RemoteErrors.Load(),
		PeersDown:      rt.stats.PeersDown.Load(),
		StaleApplied:   rt.stats.StaleApplied.Load(),
		DirectWrites:   rt.stats.DirectWrites.Load(),
		DirectNotes:    rt.stats.DirectNotes.Load(),
		Wakes:          rt.stats.Wakes.Load(),
		ShmCollectives: rt.stats.ShmCollectives.Load(),
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
		out[r].Suspect = rt.peers.isDown(p)
	}
	return out
}

// Close stops the runtime: the failure detector, the goodbyes to the
// peers (at most goodbyeTimeout), the transport, the membership (whose
// Close is bounded too: spares.Config.ShutdownTimeout), then every
// goroutine the runtime owns. Blocked calls return ErrClosed. Close is
// idempotent.
func (rt *Runtime) Close() error {
	rt.closeOnce.Do(func() {
		rt.closing.Store(true)
		st := rt.Stats()
		rt.log.Info("runtime closed", "rank", rt.Rank(), "epoch", rt.Epoch(), "frames_rejected", st.FramesRejected,
			"remote_errors", st.RemoteErrors, "peers_down", st.PeersDown, "stale_applied", st.StaleApplied, "direct_writes", st.DirectWrites, "direct_notes", st.DirectNotes, "wakes", st.Wakes)
		// The detector stops first: a process that is leaving must not
		// suspect, report or vouch about peers that leave around it, nor
		// keep probing while its own goodbyes go out.
		rt.closeDetector()
		rt.sayGoodbye()
		rt.isShut.Store(true)
		close(rt.closed)
		rt.endLife()
		rt.closeErr = rt.tr.Close()
		closeOwned(&rt.cfg)
		rt.peers.failAll(ErrClosed)
		rt.failRequests(func(*request) bool { return true }, ErrClosed)
		rt.mail.close()
		rt.passive.close()
		if !rt.waitGoroutines(closeWait) {
			rt.log.Warn("runtime goroutines still running after the transport closed; left to the process's exit with the segments they may use",
				"waited", closeWait)
			return
		}
		rt.coll.Retire(^uint32(0))
		if g := rt.GroupAll(); g != nil {
			g.mu.Lock()
			if g.shm != nil && g.shm.area != nil {
				g.shm.area.Retire()
			}
			g.mu.Unlock()
		}
		rt.segMu.Lock()
		for id, si := range rt.segs {
			si.gone.Store(true)
			rt.dropDirect(si)
			si.seg.Close()
			delete(rt.segs, id)
		}
		rt.segMu.Unlock()
	})
	return rt.closeErr
}

// closeWait bounds Close's wait for the runtime's goroutines once the
// transport is closed. They end as soon as their sends fail, which a
// transport's Close promises; one that breaks the promise must not hang
// the process at exit. Goroutines still running after it are left to the
// process's exit, and so are the segments they may still use.
const closeWait = 5 * time.Second

// waitGoroutines waits up to d for the goroutines the runtime owns.
func (rt *Runtime) waitGoroutines(d time.Duration) bool {
	done := make(chan struct{})
	go func() {
		rt.wg.Wait()
		close(done)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

func (rt *Runtime) isClosed() bool { return rt.isShut.Load() }

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
	if v.isFailed(p) {
		return 0, &RankError{Rank: rank, Op: op, Err: ErrRankFailed}
	}
	return p, nil
}

// send sends one frame to p with the current epoch stamped in.
func (rt *Runtime) send(ctx context.Context, p transport.Proc, h *transport.Header, payload []byte) error {
	h.Epoch = rt.view.Load().epoch
	rt.stampAck(p, h)
	rt.frames.to(p).Sent(uint8(h.Type), len(payload))
	if l, ok := rt.tr.(Lingerer); ok && mayLinger(h) {
		return l.SendLater(ctx, p, h, payload)
	}
	return rt.tr.Send(ctx, p, h, payload)
}

// mayLinger reports whether a frame may wait in the transport for the
// next one to the same process: a write that sets no notification and
// rings no doorbell. Nothing waits for it until a Wait asks for its
// acknowledgement, and that request, a frame of its own, takes it along;
// a notification after it does too, and the transport's linger bounds
// the wait of one that nothing follows (a program polling its memory).
func mayLinger(h *transport.Header) bool {
	return h.Type == transport.FrameWrite && h.Flags&(transport.FlagNotify|transport.FlagDirect) == 0
}

// sendErr turns a transport error on an operation addressed to rank, sent
// to its process proc, into what the caller sees.
func (rt *Runtime) sendErr(ctx context.Context, err error, rank int, proc transport.Proc, op string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, transport.ErrPeerDown):
		// As good as peerDown, which may not have been delivered yet. The
		// process sent to, not the rank's holder in the current view: a
		// newer view may already give the rank to a healthy spare.
		rt.peerDown(proc, err)
		return &RankError{Rank: rank, Op: op, Err: fmt.Errorf("%w: %v", ErrRankFailed, err)}
	case errors.Is(err, transport.ErrClosed):
		return ErrClosed
	case ctx.Err() != nil:
		return ctxError(ctx, op)
	}
	return fmt.Errorf("pgas: %s: rank %d: %w", op, rank, err)
}
