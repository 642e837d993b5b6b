package pgas

import (
	"sync"
	"time"

	"github.com/gaspigo/gaspigo/obs"
	"github.com/gaspigo/gaspigo/transport"
)

// The runtime's hooks into package obs (metrics and trace spans). Each is
// a few atomic operations; see obs's contracts.

var (
	frameStatsMu sync.Mutex
	frameStats   = map[string]*obs.FrameStats{}
)

// frameCounters are the frame counters of a runtime's transport: one
// set labelled with its name, or, for a transport with two paths
// (transport.Paths), one set per path, chosen per peer.
type frameCounters struct {
	far, near *obs.FrameStats
	paths     transport.Paths // nil: one path
}

func framesOf(tr transport.Transport) frameCounters {
	if p, ok := tr.(transport.Paths); ok {
		near, far := p.PathNames()
		return frameCounters{far: framesNamed(far), near: framesNamed(near), paths: p}
	}
	return frameCounters{far: framesNamed(transport.NameOf(tr))}
}

// to returns the counters of the frames exchanged with peer.
func (f frameCounters) to(peer transport.Proc) *obs.FrameStats {
	if f.paths != nil && f.paths.IsNear(peer) {
		return f.near
	}
	return f.far
}

// framesNamed returns the process's frame counters labelled name, made
// once per name.
func framesNamed(name string) *obs.FrameStats {
	frameStatsMu.Lock()
	defer frameStatsMu.Unlock()
	if f := frameStats[name]; f != nil {
		return f
	}
	f := obs.NewFrameStats(name, frameKindName)
	frameStats[name] = f
	return f
}

var frameKindNames = [...]string{
	transport.FrameInvalid: "invalid", transport.FrameWrite: "write", transport.FrameNotify: "notify",
	transport.FrameAck: "ack", transport.FrameReadReq: "read_request", transport.FrameReadResp: "read_response",
	transport.FrameAtomicReq: "atomic_request", transport.FrameAtomicResp: "atomic_response",
	transport.FramePassive: "passive", transport.FrameColl: "collective", transport.FrameHeartbeat: "heartbeat",
	transport.FrameControl: "control",
}

func frameKindName(k uint8) string {
	if int(k) < len(frameKindNames) && frameKindNames[k] != "" {
		return frameKindNames[k]
	}
	return "other"
}

// opSeries are the series of one operation, looked up once: the hot path
// only adds to them (atomics, no lock, no allocation).
type opSeries struct {
	count *obs.Counter   // nil for one-sided operations
	time  *obs.Histogram // duration
}

var (
	collSeries     = map[string]opSeries{}
	oneSidedSeries = map[string]opSeries{}
)

func init() {
	for _, op := range []string{"barrier", "allreduce", "broadcast", "allgather"} {
		collSeries[op] = opSeries{obs.Collectives.With(op).Counter, obs.CollectiveTime.With(op).Histogram}
	}
	for _, op := range []string{"wait", "atomic"} {
		oneSidedSeries[op] = opSeries{time: obs.OneSided.With(op).Histogram}
	}
	waitSeries = oneSidedSeries["wait"]
}

// waitSeries is oneSidedSeries["wait"], for Wait, which times itself.
var waitSeries opSeries

// opTimer times one operation: defer collStart("barrier").done().
type opTimer struct {
	s  opSeries
	t0 time.Time
}

func (t opTimer) done() {
	if t.s.count != nil {
		t.s.count.Inc()
	}
	t.s.time.ObserveSince(t.t0)
}

// collStart begins a collective op (one of collSeries).
func collStart(op string) opTimer { return opTimer{collSeries[op], time.Now()} }

// oneSidedStart begins a one-sided operation op (one of oneSidedSeries).
func oneSidedStart(op string) opTimer { return opTimer{oneSidedSeries[op], time.Now()} }

// viewObserved records a view applied: the gauges, and a trace instant.
func (rt *Runtime) viewObserved(nv *view, failed []transport.Proc) {
	obs.Epoch.Gauge.Set(float64(nv.epoch))
	obs.Rank.Gauge.Set(float64(nv.rankOf[rt.self]))
	idle := len(nv.spares)
	obs.SparesAvailable.Gauge.Set(float64(idle))
	obs.Instant("membership", "view applied", "epoch", nv.epoch, "failed", failed)
}

// lostAt records when proc's connection was lost (the detection's start).
func (rt *Runtime) lostAt(proc transport.Proc) {
	rt.peers.get(proc).lostNanos.CompareAndSwap(0, time.Now().UnixNano())
}

// detected records a confirmed failure of proc.
func (rt *Runtime) detected(proc transport.Proc, reason string) {
	obs.FailuresDetected.Inc()
	start := time.Now()
	if pr := rt.peers.lookup(proc); pr != nil && pr.lostNanos.Load() != 0 {
		n := pr.lostNanos.Load()
		start = time.Unix(0, n)
	}
	obs.DetectionTime.ObserveSince(start)
	obs.Record("detection", "failure detection", start, "failed_proc", int(proc), "reason", reason)
}
