package health

import (
	"fmt"
	"time"
)

// Config sets the detector's timing and fan-out. Durations are rounded up
// to whole Ticks when they are turned into a CoreConfig.
type Config struct {
	// Tick is the driver's clock resolution: the Core advances one tick per
	// Tick. Smaller is more precise and costs a wake-up per Tick. Ticks the
	// driver misses (a paused or starved process) are not replayed, so a
	// process that wakes from a pause does not suspect everybody at once;
	// the driver reports how many it missed (Core.Late), which raises the
	// local health score when it is half a heartbeat interval or more.
	Tick time.Duration
	// HeartbeatInterval is how often a process pings each of its ring
	// successors. Every process sends about 2×Successors messages per
	// interval (its pings and its answers to its predecessors).
	HeartbeatInterval time.Duration
	// SuspicionTimeout is how long a monitored successor may stay silent
	// (no Ack) before it is suspected. It must exceed two intervals, so
	// that one late or lost heartbeat never raises suspicion by itself.
	SuspicionTimeout time.Duration
	// ProbeTimeout is how long a helper waits for the suspect's answer to
	// its indirect probe before it reports a Nack. It bounds how long a
	// suspicion needs to be confirmed once it is raised.
	ProbeTimeout time.Duration
	// Successors (R) is how many ring successors each process monitors.
	// Each process is thus monitored by R predecessors; R ≥ 2 keeps a
	// process monitored when one of its monitors dies at the same time.
	Successors int
	// Helpers (P) is how many other processes an observer asks per round
	// to probe a suspect indirectly.
	Helpers int
	// Confirmations (C) is how many distinct helpers must report a Nack
	// before a suspicion is confirmed. It must not exceed Helpers. With
	// fewer than C+2 live members the requirement is capped at
	// members−2; with nobody to ask, see the package documentation.
	Confirmations int
	// MaxLocalHealth caps the local health score (Lifeguard's local health
	// multiplier). At score h the suspicion, probe and round timeouts are
	// multiplied by 1+h, so an observer that stalls itself, or hears from
	// its peers late or not at all, slows down rather than condemning
	// them. 0 disables the stretching (a stall still starts a catch-up).
	MaxLocalHealth int
	// MaxPendingProbes bounds how many indirect probes this process runs
	// for others at once; requests beyond it are dropped and counted.
	MaxPendingProbes int
	// SendTimeout bounds one SendHealth call made by the driver; a send
	// that takes longer is abandoned and counted.
	SendTimeout time.Duration
	// SendQueue is how many messages the driver queues per destination.
	// When a destination's queue is full, new messages to it are dropped
	// and counted: the tick loop never blocks on the network.
	SendQueue int
	// EventBuffer is the channel capacity given to each Subscribe call. A
	// subscriber that falls behind loses events (counted), never blocks
	// the detector.
	EventBuffer int
}

// DefaultConfig is aimed at loopback and LAN jobs. Its worst-case
// detection time at local health zero (see Config.DetectionBound) with a
// 1 ms network hop is 450 ms after a SIGKILL (the closed connection is
// strong evidence; when the helpers saw their connections close too it
// takes a few hops), under a p99 target of 500 ms, and 1.95 s for a silent
// failure (a SIGSTOPped or partitioned process).
func DefaultConfig() Config {
	return Config{
		Tick: 10 * time.Millisecond,
		// A SIGKILLed process is found through its closed connections
		// (strong evidence), whatever these are. The silent path (a
		// paused or partitioned process) waits long enough that a process
		// starved of CPU on a busy host is not condemned: on a 2-core
		// machine at load 11, healthy processes went unanswered for
		// 250 ms.
		HeartbeatInterval: 100 * time.Millisecond,
		SuspicionTimeout:  1500 * time.Millisecond,
		ProbeTimeout:      400 * time.Millisecond,
		Successors:        2,
		Helpers:           3,
		Confirmations:     2,
		MaxLocalHealth:    3,
		MaxPendingProbes:  256,
		SendTimeout:       200 * time.Millisecond,
		SendQueue:         16,
		EventBuffer:       64,
	}
}

// Stretched returns c with its timing (Tick, the heartbeat interval, the
// suspicion, probe and send timeouts) multiplied by f, for a host with
// more processes than its cores serve at the default rates: every process
// wakes once per Tick, and hundreds of processes ticking every 10 ms on a
// few cores spend the machine on wake-ups. The counts stay as they are.
// The tick grows faster, by f², up to a quarter of the stretched heartbeat
// interval: an idle process wakes for its detector about four times per
// interval instead of ten, and what the coarser tick costs is precision
// in timeouts that are long on such a host anyway (evidence, a closed
// connection or a message, is acted on when it comes, not at a tick).
func (c Config) Stretched(f int) Config {
	if f <= 1 {
		return c
	}
	for _, d := range []*time.Duration{&c.Tick, &c.HeartbeatInterval, &c.SuspicionTimeout, &c.ProbeTimeout, &c.SendTimeout} {
		*d *= time.Duration(f)
	}
	c.Tick = max(c.Tick, min(c.Tick*time.Duration(f), c.HeartbeatInterval/stretchedTicksPerInterval))
	return c
}

// stretchedTicksPerInterval is how many ticks a heartbeat interval keeps,
// at least, once Stretched coarsened the tick.
const stretchedTicksPerInterval = 4

// LocalConfig is a faster profile for in-process tests (under
// testing/synctest or transport/mem) and small loopback jobs on an idle
// machine. On a loaded machine prefer DefaultConfig: shorter timeouts are
// more sensitive to scheduling and GC pauses.
func LocalConfig() Config {
	c := DefaultConfig()
	c.Tick = 2 * time.Millisecond
	c.HeartbeatInterval = 10 * time.Millisecond
	c.SuspicionTimeout = 30 * time.Millisecond
	c.ProbeTimeout = 20 * time.Millisecond
	c.SendTimeout = 50 * time.Millisecond
	return c
}

// Validate checks every field and the relations between them. It never
// changes c. Errors are *ConfigError wrapping ErrConfig.
func (c Config) Validate() error {
	bad := func(field string, v any, format string, args ...any) error {
		return &ConfigError{Field: field, Value: fmt.Sprint(v), Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case c.Tick <= 0:
		return bad("Tick", c.Tick, "must be positive (e.g. 10ms)")
	case c.HeartbeatInterval < c.Tick:
		return bad("HeartbeatInterval", c.HeartbeatInterval, "must be at least Tick (%v)", c.Tick)
	case c.SuspicionTimeout <= 2*c.HeartbeatInterval:
		return bad("SuspicionTimeout", c.SuspicionTimeout,
			"must exceed 2 × HeartbeatInterval (2 × %v = %v) so one late heartbeat is not a suspicion",
			c.HeartbeatInterval, 2*c.HeartbeatInterval)
	case c.ProbeTimeout < c.Tick:
		return bad("ProbeTimeout", c.ProbeTimeout, "must be at least Tick (%v)", c.Tick)
	case c.SendTimeout <= 0:
		return bad("SendTimeout", c.SendTimeout, "must be positive (e.g. 200ms)")
	case c.SendQueue < 1:
		return bad("SendQueue", c.SendQueue, "must be at least 1")
	case c.EventBuffer < 1:
		return bad("EventBuffer", c.EventBuffer, "must be at least 1")
	}
	return c.counts().Validate()
}

// counts returns a CoreConfig with only the count fields set, with tick
// fields that always validate, so that Validate can share the checks.
func (c Config) counts() CoreConfig {
	return CoreConfig{
		IntervalTicks: 1, SuspectTicks: 3, ProbeTicks: 1, RoundTicks: 1,
		Successors: c.Successors, Helpers: c.Helpers, Confirmations: c.Confirmations,
		MaxLocalHealth: c.MaxLocalHealth, MaxPendingProbes: c.MaxPendingProbes,
	}
}

// ticks converts d to whole ticks, rounding up.
func (c Config) ticks(d time.Duration) int {
	return int((d + c.Tick - 1) / c.Tick)
}

// Core converts c to the tick-based configuration of the Core. Every
// duration is rounded up to whole ticks. The observer's round timeout is
// ProbeTimeout plus two heartbeat intervals: time for the PingReq to reach
// a helper, for the helper's probe to time out, and for its answer to come
// back.
func (c Config) Core() CoreConfig {
	cc := c.counts()
	cc.IntervalTicks = c.ticks(c.HeartbeatInterval)
	cc.SuspectTicks = c.ticks(c.SuspicionTimeout)
	cc.ProbeTicks = c.ticks(c.ProbeTimeout)
	cc.RoundTicks = cc.ProbeTicks + 2*cc.IntervalTicks
	return cc
}

// DetectionBound is the worst-case time from a failure to its
// confirmation by a healthy observer, when a network hop takes at most hop
// and local health scores are zero. strong says whether the observer gets
// a PeerDown (a SIGKILL closes the connection) rather than silence.
func (c Config) DetectionBound(hop time.Duration, strong bool) time.Duration {
	return time.Duration(c.Core().DetectionBound(c.ticks(hop), strong)) * c.Tick
}

// CoreConfig is the Core's configuration in abstract ticks. Build it with
// Config.Core, or directly in tests.
type CoreConfig struct {
	IntervalTicks    int // ticks between two pings to one successor
	SuspectTicks     int // ticks without an Ack before a successor is suspected; > 2×IntervalTicks
	ProbeTicks       int // ticks a helper waits for the suspect's Ack before it reports a Nack
	RoundTicks       int // ticks an observer waits for its helpers before it asks again
	Successors       int // R: successors monitored by each process
	Helpers          int // P: helpers asked per round
	Confirmations    int // C: distinct helper Nacks that confirm a suspicion; ≤ Helpers
	MaxLocalHealth   int // cap of the local health score; timeouts scale by 1+score
	MaxPendingProbes int // cap on indirect probes run for others at once
}

// maxLocalHealth caps MaxLocalHealth: beyond it, timeouts are so long that
// the detector is effectively off.
const maxLocalHealth = 16

// Validate checks the fields and their relations without changing c.
// Errors are *ConfigError wrapping ErrConfig.
func (c CoreConfig) Validate() error {
	bad := func(field string, v int, format string, args ...any) error {
		return &ConfigError{Field: field, Value: fmt.Sprint(v), Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case c.IntervalTicks < 1:
		return bad("IntervalTicks", c.IntervalTicks, "must be at least 1")
	case c.SuspectTicks <= 2*c.IntervalTicks:
		return bad("SuspectTicks", c.SuspectTicks, "must exceed 2 × IntervalTicks (2 × %d)", c.IntervalTicks)
	case c.ProbeTicks < 1:
		return bad("ProbeTicks", c.ProbeTicks, "must be at least 1")
	case c.RoundTicks < c.ProbeTicks:
		return bad("RoundTicks", c.RoundTicks, "must be at least ProbeTicks (%d): helpers need that long to answer", c.ProbeTicks)
	case c.Successors < 1:
		return bad("Successors", c.Successors, "must be at least 1 (2 is usual)")
	case c.Helpers < 1:
		return bad("Helpers", c.Helpers, "must be at least 1: suspicions are confirmed by helpers")
	case c.Confirmations < 1:
		return bad("Confirmations", c.Confirmations, "must be at least 1: an observer never confirms on its own word")
	case c.Confirmations > c.Helpers:
		return bad("Confirmations", c.Confirmations, "must not exceed Helpers (%d): at most that many answer per round", c.Helpers)
	case c.MaxLocalHealth < 0 || c.MaxLocalHealth > maxLocalHealth:
		return bad("MaxLocalHealth", c.MaxLocalHealth, "must be in 0..%d", maxLocalHealth)
	case c.MaxPendingProbes < 1:
		return bad("MaxPendingProbes", c.MaxPendingProbes, "must be at least 1")
	}
	return nil
}

// DetectionBound is the worst-case number of ticks from a failure to its
// first confirmation, when a message takes at most hop ticks and local
// health scores are zero.
//
// Silent failure (strong false): the target's last Ack reaches its monitor
// at most hop ticks after the failure; SuspectTicks later the monitor
// suspects; its PingReq takes hop, the helper's probe ProbeTicks, the
// helper's Nack hop. Two ticks cover the phase of the tick loops.
//
// Strong evidence (strong true): PeerDown reaches the monitor within hop
// and it suspects at once, so SuspectTicks drop out. A helper that has seen
// the connection close itself answers at once; the bound assumes it has
// not.
func (c CoreConfig) DetectionBound(hop int, strong bool) int {
	b := 3*hop + c.ProbeTicks + 2
	if !strong {
		b += c.SuspectTicks
	}
	return b
}
