package health

import (
	"fmt"
	"time"

	"github.com/gaspigo/gaspigo/transport"
)

// EventKind says what an Event reports.
type EventKind uint8

// Event kinds.
const (
	// Suspected: a process stopped answering (or its connection closed) and
	// is being probed indirectly. A hint only, never a verdict.
	Suspected EventKind = iota + 1
	// Refuted: a suspected process answered, directly or through a helper.
	Refuted
	// Confirmed: enough independent helpers could not reach a suspected
	// process. This is what goes to the membership leader.
	Confirmed
)

func (k EventKind) String() string {
	switch k {
	case Suspected:
		return "suspected"
	case Refuted:
		return "refuted"
	case Confirmed:
		return "confirmed"
	}
	return fmt.Sprintf("event(%d)", uint8(k))
}

// Event is a change in this process's local view of another process.
type Event struct {
	Kind   EventKind
	Proc   transport.Proc // the process the event is about
	Tick   uint64         // the Core's tick when it happened
	Reason string         // human-readable evidence
	// At is the wall-clock time the Detector observed the event. The Core
	// has no clock and leaves it zero.
	At time.Time
}

func (e Event) String() string {
	return fmt.Sprintf("t=%d %v %d: %s", e.Tick, e.Kind, e.Proc, e.Reason)
}

// Outgoing is a message the Core wants sent.
type Outgoing struct {
	To  transport.Proc
	Msg Message
}

// Status is this process's local view of another process.
type Status uint8

// Statuses.
const (
	StatusAlive Status = iota
	StatusSuspected
	StatusConfirmed
)

func (s Status) String() string {
	switch s {
	case StatusAlive:
		return "alive"
	case StatusSuspected:
		return "suspected"
	case StatusConfirmed:
		return "confirmed"
	}
	return fmt.Sprintf("status(%d)", uint8(s))
}

// CoreStats counts what a Core did since it was created.
type CoreStats struct {
	Sent          uint64 // messages handed out through Ready
	Received      uint64 // messages given to Receive
	Ignored       uint64 // received messages that were stale, misdirected or unsolicited
	ProbesDropped uint64 // PingReqs not served because MaxPendingProbes were running
	Suspicions    uint64
	Refutations   uint64
	Confirmations uint64
	PeerDowns     uint64
	Hints         uint64
	Stalls        uint64 // driver stalls reported through Late (this process was starved)
	LateAcks      uint64 // heartbeat Acks that came two intervals later than the peer's quickest
}
