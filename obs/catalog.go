package obs

import "sync/atomic"

// The process's metrics. docs/observability.md lists them; every layer
// records into these, and nothing else registers into Default.
var (
	framesSent = Default.Counter("gaspigo_frames_sent_total",
		"Frames sent, by frame kind and transport.", "transport", "kind")
	bytesSent = Default.Counter("gaspigo_frame_bytes_sent_total",
		"Payload bytes sent in frames, by frame kind and transport.", "transport", "kind")
	framesRecv = Default.Counter("gaspigo_frames_received_total",
		"Frames received, by frame kind and transport.", "transport", "kind")
	bytesRecv = Default.Counter("gaspigo_frame_bytes_received_total",
		"Payload bytes received in frames, by frame kind and transport.", "transport", "kind")

	// OneSided is the latency of one-sided operations, from the call to
	// its completion: op is read, atomic or wait (the remote completion
	// of a queue's writes and notifications).
	OneSided = Default.Histogram("gaspigo_onesided_latency_seconds",
		"Latency of one-sided operations from the call to their completion, by operation.", LatencyBuckets, "op")
	// DirectOps counts what a process did straight in a same-host peer's
	// memory, without a frame: kind write (data copied), notify (a slot
	// stored), wake (a frame sent because a waiter there was parked).
	DirectOps = Default.Counter("gaspigo_direct_operations_total",
		"Operations done straight in a same-host peer's memory, by kind: write, notify, and wake (a frame to a parked waiter).", "kind")
	// WaitSpin is how long a wait for a notification in shared memory
	// polls before it parks, as the runtime chose it: 0 when the host has
	// more ranks than usable CPUs.
	WaitSpin = Default.Gauge("gaspigo_wait_spin_seconds",
		"How long a wait for a shared-memory notification polls before it parks (0: parks at once, the host is oversubscribed).").With().Gauge
	// WaitYields is 1 when such a wait gives the CPU to the operating
	// system between polls (a host with more ranks than CPUs).
	WaitYields = Default.Gauge("gaspigo_wait_spin_yields",
		"1 when a wait for a shared-memory notification gives the CPU away between polls (more ranks than CPUs on the host), else 0.").With().Gauge
	// Collectives counts collectives by operation; CollectiveTime is
	// their duration.
	Collectives = Default.Counter("gaspigo_collectives_total",
		"Collectives completed, by operation.", "op")
	CollectiveTime = Default.Histogram("gaspigo_collective_duration_seconds",
		"Duration of collectives on this rank, by operation.", LatencyBuckets, "op")

	// Epoch is the epoch of the view this process applied last; Rank the
	// rank it holds in it (-1: an idle spare); SparesAvailable the idle
	// spares that view leaves.
	Epoch           = Default.Gauge("gaspigo_epoch", "Epoch of the membership view this process applied last.").With()
	Rank            = Default.Gauge("gaspigo_rank", "Rank this process holds (-1: an idle spare).").With()
	SparesAvailable = Default.Gauge("gaspigo_spares_available", "Idle spare processes left in the current view.").With()
	// SparesJoined counts the processes that joined the running job
	// (AddSpare committed) as this process applied them, through Raft or
	// the membership's tree: the job's count is the largest among its
	// processes (one that joined later counts only what it applied).
	SparesJoined = Default.Counter("gaspigo_spares_joined_total", "Processes that joined the running job, as this process applied them.").With().Counter
	// FailuresDetected counts the failures this process's detector
	// confirmed; DetectionTime is the time from the first sign of each
	// (a lost connection, or missed heartbeats) to its confirmation.
	FailuresDetected = Default.Counter("gaspigo_failures_detected_total",
		"Failures of other processes confirmed by this process's detector.").With().Counter
	DetectionTime = Default.Histogram("gaspigo_failure_detection_seconds",
		"Time from losing a peer to confirming its failure.", LatencyBuckets).With().Histogram
	// Recoveries counts the recoveries this process finished;
	// RecoveryPhase times their phases: membership (the wait for the new
	// view), restore (rolling back to the checkpoint) and total.
	Recoveries = Default.Counter("gaspigo_recoveries_total",
		"Recoveries this process completed (new view applied and checkpoint restored).").With().Counter
	RecoveryPhase = Default.Histogram("gaspigo_recovery_phase_seconds",
		"Duration of recovery phases: membership (wait for the new view), restore, total.", LatencyBuckets, "phase")
	LastRecovery = Default.Gauge("gaspigo_last_recovery_seconds",
		"Duration of this process's last recovery, from the failure noticed to the checkpoint restored.").With().Gauge

	// Checkpoint metrics: phases (start: the local copy; commit: the
	// agreement that every rank has one), bytes, commits, and the window
	// after a failure during which a rank's checkpoint had fewer mirrors
	// than asked for.
	CheckpointPhase = Default.Histogram("gaspigo_checkpoint_phase_seconds",
		"Duration of checkpoint phases on this rank: start, commit, push (mirror copy).", LatencyBuckets, "phase")
	CheckpointBytes = Default.Counter("gaspigo_checkpoint_bytes_total",
		"Bytes of this rank's checkpoints copied to mirror holders (pushes and rebuilds).").With().Counter
	CheckpointsCommitted = Default.Counter("gaspigo_checkpoints_committed_total",
		"Checkpoints committed by this rank.").With().Counter
	Unprotected = Default.Histogram("gaspigo_checkpoint_unprotected_seconds",
		"Time a restored checkpoint had fewer mirrors than configured, until rebuilt.", LatencyBuckets).With().Histogram

	// Shuffle metrics.
	ShuffleSpills = Default.Counter("gaspigo_shuffle_spills_total",
		"Spill files the key-value shuffle wrote.").With().Counter
	ShuffleSpillBytes = Default.Counter("gaspigo_shuffle_spill_bytes_total",
		"Bytes the key-value shuffle spilled to disk.").With().Counter
	ShuffleMemory = Default.Gauge("gaspigo_shuffle_memory_bytes",
		"Bytes of records the key-value shuffle holds in memory.").With().Gauge

	traceDropped = Default.Counter("gaspigo_trace_events_dropped_total",
		"Trace events dropped because the bounded trace buffer was full.").With().Counter
)

// FrameStats counts one transport's frames by kind. Its methods are
// atomic adds once a kind has been seen.
type FrameStats struct {
	transport string
	name      func(kind uint8) string
	kinds     [256]atomic.Pointer[frameKind]
}

type frameKind struct{ frames, bytes, framesIn, bytesIn *Counter }

// NewFrameStats returns the frame counters of transport, naming kinds
// with name.
func NewFrameStats(transport string, name func(kind uint8) string) *FrameStats {
	return &FrameStats{transport: transport, name: name}
}

func (f *FrameStats) kind(k uint8) *frameKind {
	if c := f.kinds[k].Load(); c != nil {
		return c
	}
	n := f.name(k)
	c := &frameKind{
		frames:   framesSent.With(f.transport, n).Counter,
		bytes:    bytesSent.With(f.transport, n).Counter,
		framesIn: framesRecv.With(f.transport, n).Counter,
		bytesIn:  bytesRecv.With(f.transport, n).Counter,
	}
	f.kinds[k].Store(c)
	return c
}

// Sent counts a frame of kind with n payload bytes sent.
func (f *FrameStats) Sent(kind uint8, n int) {
	c := f.kind(kind)
	c.frames.Inc()
	c.bytes.Add(uint64(n))
}

// Received counts a frame of kind with n payload bytes received.
func (f *FrameStats) Received(kind uint8, n int) {
	c := f.kind(kind)
	c.framesIn.Inc()
	c.bytesIn.Add(uint64(n))
}
