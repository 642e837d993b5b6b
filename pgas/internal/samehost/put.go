package samehost

import (
	"github.com/gaspigo/gaspigo/segments"
	"github.com/gaspigo/gaspigo/transport"
)

// Op is one operation to a same-host peer's segment: a write of Data
// (maybe empty) at Off, then, when Notify, notification ID set to Val.
type Op struct {
	Off    int64
	Data   []byte
	Notify bool
	ID     int
	Val    uint32
}

// State is what the runtime knows, when it decides, of the peer an
// operation goes to and of the queue it is posted on.
type State struct {
	// Quiet: nothing the caller sent the peer is still on its way (every
	// sequenced frame has its outcome, every request its answer). Order
	// (docs/design.md §2.3) is kept by doing an operation in memory only
	// then; otherwise it goes by frame, data and all, behind what is on
	// its way. Operations in memory are complete when the call returns,
	// so a frame sent after them is behind them too.
	Quiet bool
	Down  bool // the peer's connection is lost
	Full  bool // the queue holds as many operations as it may
	// Held: the runtime may not post in memory now (closed, halted, or
	// the program not yet in the epoch of the view the target is of).
	Held bool
}

// InMemory is the one answer to "memory or frame?" for an operation to
// a same-host peer whose memory is m: memory when m is mapped and still
// the peer's, its notification area mapped, op in range of both, the
// peer quiet and not down, and the queue and runtime free to post. The
// epoch is asked last, by Put (the peer's admit): only an announced copy
// may look at it.
func InMemory(m Mem, op Op, s State) bool {
	switch {
	case m.Mem == nil || m.Notes == nil || s.Down || s.Full || s.Held:
		return false
	case op.Notify && (op.ID < 0 || op.ID >= m.Notes.Len()):
		return false
	case op.Off < 0 || op.Off > int64(len(m.Mem)) || int64(len(op.Data)) > int64(len(m.Mem))-op.Off:
		return false // the target checks the range and refuses it
	case !s.Quiet:
		return false // behind the frames on their way
	case segments.Retired(m.Mem):
		return false // the target deleted or moved it: send the data
	}
	return true
}

// Put does op in m in epoch e, when InMemory says so and the peer admits
// the epoch: it announces the copy in this process's writer line (for
// queue q under the queue's lock, through its own word; q < 0 for any
// goroutine), copies the data, stores the notification, and ends the
// announcement. done is false, with nothing done, when the operation
// must go by frame. wake reports that a waiter of the peer is parked and
// must be woken (by a frame); set is false when the slot held a value of
// a newer epoch, so the notification was not set and Wait must fail.
// The caller guarantees that m stays mapped meanwhile (Seg.Get's hold,
// or the lock under which Seg.Retire is called).
func Put(m Mem, op Op, s State, q int, e uint32) (done, wake, set bool) {
	if !InMemory(m, op, s) {
		return false, false, false
	}
	if q < 0 {
		if !m.Notes.Enter(e) {
			return false, false, false // the peer is in a newer epoch: its admit says so
		}
	} else if !m.Notes.EnterQueue(q, e) {
		return false, false, false // the peer is in a newer epoch: the frame's way says so
	}
	Copy(m.Mem[op.Off:], op.Data)
	set = true
	if op.Notify {
		wake, set = m.Notes.Store(segments.NotificationID(op.ID), op.Val, e)
	}
	if q < 0 {
		m.Notes.Exit()
	} else {
		m.Notes.ExitQueue(q)
	}
	return true, wake, set
}

// Target is a peer's memory that operations were done in: enough for the
// next ones to the same place to skip every lookup. Its owner (a queue)
// keeps it under a lock that Seg.Retire's caller takes too, so that the
// memory stays mapped while it is used.
type Target struct {
	Seg  *Seg
	Mem  Mem
	Proc transport.Proc
}

// Live reports whether t holds memory not retired since.
func (t *Target) Live() bool { return t.Seg != nil && !t.Seg.Gone() }

// chunk is the most Copy copies in one call of copy.
const chunk = 64 << 10

// Copy copies src into a peer's memory (dst) in pieces of 64 KiB.
// One copy of a megabyte or more ran at 18-19 GB/s into a same-host
// peer's segment (the CPU's string move for large sizes, which streams
// past the caches), pieces of 16-256 KiB at 27-32 GB/s (gaspibench, 1 and
// 4 MiB writes, 2 ranks on the 2-core development host, load below 1).
func Copy(dst, src []byte) {
	for len(src) > chunk {
		copy(dst[:chunk], src[:chunk])
		dst, src = dst[chunk:], src[chunk:]
	}
	copy(dst, src)
}
