package segments

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Shared notification slots. With Options.ShareNotifications a segment's
// slots live in a memfd of their own, the notification area, which other
// processes of the host map (MapNotes) to set a slot with one atomic
// operation, without a frame. The area is laid out as:
//
//	offset   0  state (uint64): bit 63 set once the segment no longer uses
//	            this memory (closed)
//	offset   8  epoch (uint32): the owner's epoch (Segment.SetEpoch)
//	offset  64  sleepers (int32): the owner's waiters parked now
//	offset 128  the slots, 8 bytes each: the epoch a value was set in
//	            (high half) and the value (low half)
//	then        MaxWriters writer lines of 64 bytes: the copies a writer
//	            has under way (PeerNotes.Enter, EnterQueue; writers_linux.go)
//
// Fencing (docs/design.md §3) rests on the epoch, never on moving memory:
//
//   - A slot counts only while its epoch is not older than the owner's:
//     the owner raises its epoch before anything of its sees a new view,
//     so from then on nothing a process of an older epoch stores is read
//     (a process declared failed never gets the newer epoch). A writer
//     sets a slot by compare-and-swap and never over a value of a newer
//     epoch, so a stale writer cannot erase what a current one set.
//   - A writer's Fence loads the owner's epoch after its stores: both are
//     sequentially consistent, so a fence that passes was ordered before
//     the owner moved on, and its values were read in their epoch.
//   - Data has no tag. A writer announces each copy in its line (Enter),
//     then checks the owner's epoch; the owner raises its epoch, then
//     waits until the lines of the writers that may still copy are idle
//     (Segment.WriterBusy) before its program may use the memory again
//     (pgas Recover). Either the writer sees the new epoch and copies
//     nothing, or the owner sees its count and waits for the copy. (With
//     EnterQueue the announcement is a plain store and the owner's
//     SyncWriters supplies the order; writers_linux.go.)
//
// Waking: a writer sets a slot, then loads sleepers: if a waiter is
// parked, it must wake it (by a frame; the owner calls Segment.Wake). The
// owner's waiter adds itself to sleepers, then scans the slots once more
// before it parks. Both are sequentially consistent atomics, so either the
// scan sees the value or the writer sees the sleeper.
const (
	noteState    = 0
	noteEpoch    = 8
	noteSleepers = 64
	noteSlots    = 128
	writerLine   = 64
	retiredBit   = uint64(1) << 63
)

// MaxWriters is how many processes can be given one segment's
// notification area: each gets a line of its own (PeerNotes.Enter).
// 4,096 lines are 256 KiB of address space per shared segment, of which
// only the lines of processes that write take memory.
const MaxWriters = 4096

const notesName = "gaspigo-notes"

// writersAt is the offset of the first writer line of an area of n slots.
func writersAt(n int) int { return (noteSlots + 8*n + writerLine - 1) / writerLine * writerLine }

// noteAreaSize is the memfd size of an area of n slots, whole pages.
func noteAreaSize(n int) int {
	return (writersAt(n) + writerLine*MaxWriters + pageSize - 1) / pageSize * pageSize
}

// noteArea is the owner's mapping of its notification area.
type noteArea struct {
	mem []byte
	n   int
	fd  int
}

func newNoteArea(n int) (*noteArea, error) {
	size := noteAreaSize(n)
	fd, err := newSealedMemfd(notesName, size)
	if err != nil {
		return nil, fmt.Errorf("segments: notification area: %w", err)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("segments: mmap notification area: %w", err)
	}
	return &noteArea{mem: mem, n: n, fd: fd}, nil
}

func stateOf(mem []byte) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&mem[noteState]))
}

func epochOf(mem []byte) *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&mem[noteEpoch]))
}

func sleepersOf(mem []byte) *atomic.Int32 {
	return (*atomic.Int32)(unsafe.Pointer(&mem[noteSleepers]))
}

func slotsOf(mem []byte, n int) []atomic.Uint64 {
	return unsafe.Slice((*atomic.Uint64)(unsafe.Pointer(&mem[noteSlots])), n)
}

func (a *noteArea) dup() (int, error) {
	if a.fd < 0 {
		return -1, ErrClosed
	}
	nfd, err := unix.FcntlInt(uintptr(a.fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("segments: dup notification area: %w", err)
	}
	return nfd, nil
}

// free retires the area and puts private zeroed memory in its place,
// which stays mapped: a waiter still polling the slots of a closed
// segment reads zeros instead of faulting. That leaves one small mapping
// per segment deleted.
func (a *noteArea) free() {
	stateOf(a.mem).Or(retiredBit)
	unix.MmapPtr(-1, 0, unsafe.Pointer(&a.mem[0]), uintptr(len(a.mem)),
		unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON|unix.MAP_FIXED)
	unix.Close(a.fd)
	a.fd = -1
}

func (a *noteArea) epoch() *atomic.Uint32   { return epochOf(a.mem) }
func (a *noteArea) sleepers() *atomic.Int32 { return sleepersOf(a.mem) }
func (a *noteArea) slots() []atomic.Uint64  { return slotsOf(a.mem, a.n) }
func (a *noteArea) writerBusy(w int) bool   { return lineOf(a.mem, a.n, w).busy() }

// PeerNotes is another process's notification area mapped here
// (MapNotes), with the writer line its owner gave this process: Set and
// Store set a slot there, Enter and Exit bracket a copy into the owner's
// segment, Fence says whether what was set so far is read.
type PeerNotes struct {
	mu    sync.RWMutex // held shared while the mapping is used; exclusively to unmap
	mem   []byte       // nil once unmapped
	slots []atomic.Uint64
	epoch *atomic.Uint32
	line  writerAt
	fast  bool // EnterQueue may use the line's queue words
}

// MapNotes maps a peer's notification area of n slots from fd (from
// Segment.DupNotes, received over a Unix socket), writing through line
// writer (the one the owner gave this process). It fails when fd is not
// an area of that size, or one that its owner could not rely on keeping
// that size (not sealed against shrinking). The caller still closes fd.
func MapNotes(fd int, n, writer int) (*PeerNotes, error) {
	if n <= 0 || n > 1<<16 || writer < 0 || writer >= MaxWriters {
		return nil, fmt.Errorf("segments: notification area of %d slots, writer line %d: out of range", n, writer)
	}
	if err := checkSealed(fd, noteAreaSize(n)); err != nil {
		return nil, fmt.Errorf("segments: notification area of %d slots: %w", n, err)
	}
	mem, err := unix.Mmap(fd, 0, noteAreaSize(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("segments: mmap notification area: %w", err)
	}
	return &PeerNotes{mem: mem, slots: slotsOf(mem, n), epoch: epochOf(mem), line: lineOf(mem, n, writer), fast: asymmetricFences()}, nil
}

// Len returns the number of slots.
func (p *PeerNotes) Len() int { return len(p.slots) }

// Set stores v into slot id of the peer's area as set in epoch e, after
// every store this goroutine made before, unless the slot holds a value
// of a newer epoch (set is false then). wake reports whether a waiter of
// the owner is parked and must be woken. It fails when the area is
// unmapped or id is out of range.
func (p *PeerNotes) Set(id NotificationID, v, e uint32) (wake, set bool, err error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.mem == nil {
		return false, false, ErrClosed
	}
	if int(id) >= len(p.slots) {
		return false, false, ErrNotificationID
	}
	wake, set = p.Store(id, v, e)
	return wake, set, nil
}

// Store is Set for a caller that guarantees the area stays mapped (no
// Unmap runs meanwhile) and id is in range: no lock.
func (p *PeerNotes) Store(id NotificationID, v, e uint32) (wake, set bool) {
	if !setSlot(&p.slots[id], v, e) {
		return false, false
	}
	return sleepersOf(p.mem).Load() > 0, true
}

// Enter announces a copy into the owner's segment made in epoch e, and
// reports whether the owner is still in an epoch that admits it (not
// newer than e, the segment not closed). Only then may the caller copy,
// and it calls Exit once done; on false it has nothing to undo. The
// caller guarantees the area stays mapped until Exit.
func (p *PeerNotes) Enter(e uint32) bool {
	p.line.count().Add(1)
	if p.epoch.Load() > e || stateOf(p.mem).Load()&retiredBit != 0 {
		p.line.count().Add(-1)
		return false
	}
	return true
}

// Exit ends a copy that Enter admitted.
func (p *PeerNotes) Exit() { p.line.count().Add(-1) }

// Fence reports whether the slots this process set so far in epoch e,
// and the data it copied before them, are read by their owner: the owner
// is in no newer epoch and still uses the area. False also after Unmap.
func (p *PeerNotes) Fence(e uint32) bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.mem == nil {
		return false
	}
	return p.epoch.Load() <= e && stateOf(p.mem).Load()&retiredBit == 0
}

// Unmap releases the mapping; Set and Fence fail from then on.
func (p *PeerNotes) Unmap() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mem != nil {
		unix.Munmap(p.mem)
		p.mem, p.slots = nil, nil
	}
}
