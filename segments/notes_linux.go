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
// processes of the host map (MapNotes) to set a slot with one store,
// without a frame. The area is laid out as:
//
//	offset   0  state (uint64): bit 63 set once the segment no longer uses
//	            this memory (moved or closed); the low bits count fences
//	offset  64  sleepers (uint32): the owner's waiters parked now
//	offset 128  the slots, 4 bytes each
//
// A writer stores a slot, then loads sleepers: if a waiter is parked, it
// must wake it (by a frame; the owner calls Segment.Wake). The owner's
// waiter adds itself to sleepers, then scans the slots once more before
// it parks. Both are sequentially consistent atomics, so either the scan
// sees the value or the writer sees the sleeper.
//
// A writer's Fence is an atomic add on state; the owner retires the area
// with an atomic or on the same word before it copies the slots away
// (RenewNotes, Close). So a fence that finds the area not retired is
// ordered before the retirement, and every store the writer made before
// it (slots and segment data) is seen by the copy: it was not lost.
const (
	noteState    = 0
	noteSleepers = 64
	noteSlots    = 128
	retiredBit   = uint64(1) << 63
)

const notesName = "gaspigo-notes"

// noteAreaSize is the memfd size of an area of n slots, whole pages.
func noteAreaSize(n int) int {
	return (noteSlots + 4*n + pageSize - 1) / pageSize * pageSize
}

// noteArea is the owner's mapping of its notification area.
type noteArea struct {
	mem []byte
	fd  int
}

func newNoteArea(n int) (*noteArea, error) {
	fd, err := unix.MemfdCreate(notesName, unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("segments: memfd_create: %w", err)
	}
	size := noteAreaSize(n)
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("segments: size notification area: %w", err)
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("segments: mmap notification area: %w", err)
	}
	return &noteArea{mem: mem, fd: fd}, nil
}

func stateOf(mem []byte) *atomic.Uint64 {
	return (*atomic.Uint64)(unsafe.Pointer(&mem[noteState]))
}

func sleepersOf(mem []byte) *atomic.Int32 {
	return (*atomic.Int32)(unsafe.Pointer(&mem[noteSleepers]))
}

func slotsOf(mem []byte, n int) []atomic.Uint32 {
	return unsafe.Slice((*atomic.Uint32)(unsafe.Pointer(&mem[noteSlots])), n)
}

// retire marks the area as no longer used, ordered after every fence
// that came before it.
func (a *noteArea) retire() { stateOf(a.mem).Or(retiredBit) }

// renew moves the slots to a fresh memfd mapped at the same address: the
// processes that map the old one set slots nobody reads any more, and
// their fences fail. No slot may be stored meanwhile (Segment.nmu).
func (a *noteArea) renew() error {
	if a.fd < 0 {
		return ErrClosed
	}
	a.retire()
	fd, err := unix.MemfdCreate(notesName, unix.MFD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("segments: memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(len(a.mem))); err != nil {
		unix.Close(fd)
		return fmt.Errorf("segments: size notification area: %w", err)
	}
	// Everything but the state word, which starts at zero in the new area.
	if _, err := unix.Pwrite(fd, a.mem[8:], 8); err != nil {
		unix.Close(fd)
		return fmt.Errorf("segments: copy notification area: %w", err)
	}
	if _, err := unix.MmapPtr(fd, 0, unsafe.Pointer(&a.mem[0]), uintptr(len(a.mem)),
		unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_FIXED); err != nil {
		unix.Close(fd)
		return fmt.Errorf("segments: map fresh notification area: %w", err)
	}
	unix.Close(a.fd)
	a.fd = fd
	return nil
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
// (a page for the default 1,024 slots) per segment deleted.
func (a *noteArea) free() {
	a.retire()
	unix.MmapPtr(-1, 0, unsafe.Pointer(&a.mem[0]), uintptr(len(a.mem)),
		unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON|unix.MAP_FIXED)
	unix.Close(a.fd)
	a.fd = -1
}

// PeerNotes is another process's notification area mapped here
// (MapNotes): Set stores a slot there, Fence says whether the stores made
// so far reached memory that its owner still uses.
type PeerNotes struct {
	mu    sync.RWMutex // held shared while the mapping is used; exclusively to unmap
	mem   []byte       // nil once unmapped
	slots []atomic.Uint32
}

// MapNotes maps a peer's notification area of n slots from fd (from
// Segment.DupNotes, received over a Unix socket). It fails when fd is not
// an area of that size. The caller still closes fd.
func MapNotes(fd int, n int) (*PeerNotes, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("segments: fstat: %w", err)
	}
	if n <= 0 || n > 1<<16 || st.Size != int64(noteAreaSize(n)) {
		return nil, fmt.Errorf("segments: descriptor of %d bytes for a notification area of %d slots, want %d", st.Size, n, noteAreaSize(n))
	}
	mem, err := unix.Mmap(fd, 0, noteAreaSize(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("segments: mmap notification area: %w", err)
	}
	return &PeerNotes{mem: mem, slots: slotsOf(mem, n)}, nil
}

// Len returns the number of slots.
func (p *PeerNotes) Len() int { return len(p.slots) }

// Set stores v into slot id of the peer's area, after every store this
// goroutine made before, and reports whether a waiter of the owner is
// parked and must be woken. It fails when the area is unmapped or id is
// out of range.
func (p *PeerNotes) Set(id NotificationID, v uint32) (wake bool, err error) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.mem == nil {
		return false, ErrClosed
	}
	if int(id) >= len(p.slots) {
		return false, ErrNotificationID
	}
	p.slots[id].Store(v)
	return sleepersOf(p.mem).Load() > 0, nil
}

// Store is Set for a caller that guarantees the area stays mapped (no
// Unmap runs meanwhile) and id is in range: no lock.
func (p *PeerNotes) Store(id NotificationID, v uint32) (wake bool) {
	p.slots[id].Store(v)
	return sleepersOf(p.mem).Load() > 0
}

// Fence reports whether every store this process made to the owner's
// segment and slots before it reached memory the owner still uses (the
// area is not retired). False also after Unmap.
func (p *PeerNotes) Fence() bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.mem == nil {
		return false
	}
	return stateOf(p.mem).Add(1)&retiredBit == 0
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

func (a *noteArea) sleepers() *atomic.Int32     { return sleepersOf(a.mem) }
func (a *noteArea) slots(n int) []atomic.Uint32 { return slotsOf(a.mem, n) }
