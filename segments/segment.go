package segments

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ID names a segment. IDs are chosen by the program and are the same on
// every rank for a collectively created segment.
type ID uint16

// NotificationID names a notification slot of a segment.
type NotificationID uint16

// MaxSize is the largest segment size accepted (1 TiB).
const MaxSize = 1 << 40

// DefaultNotifications is the number of notification slots a segment gets
// when Options.Notifications is zero.
const DefaultNotifications = 1024

// Options tunes a segment. The zero value is usable.
type Options struct {
	// Backing provides the memory; nil means AnonBacking.
	Backing Backing
	// Notifications is the number of notification slots; 0 means
	// DefaultNotifications.
	Notifications int
	// ShareNotifications puts the slots in a memfd of their own, which
	// other processes of the host map (DupNotes, MapNotes) to set a slot
	// with one store (notes_linux.go). Linux only.
	ShareNotifications bool
}

// Segment is a region of memory with notification slots.
type Segment struct {
	id      ID
	mem     []byte
	backing Backing
	notif   []atomic.Uint64 // epoch << 32 | value (slots.go)
	epoch   *atomic.Uint32  // the owner's epoch: slots set in older ones do not count
	notes   *noteArea       // the slots' memory when shared, else nil
	nmu     sync.RWMutex    // held shared to use the shared slots, exclusively to free them (Close)
	own     atomic.Uint32   // the epoch when the slots are not shared

	mu      sync.Mutex
	changed chan struct{} // closed and replaced whenever a slot is set
	closed  bool
}

// New allocates a zeroed segment of size bytes.
func New(id ID, size int64, opt Options) (*Segment, error) {
	if size <= 0 || size > MaxSize {
		return nil, ErrSize
	}
	b := opt.Backing
	if b == nil {
		b = AnonBacking{}
	}
	n := opt.Notifications
	if n <= 0 {
		n = DefaultNotifications
	}
	if n > 1<<16 {
		n = 1 << 16
	}
	mem, err := b.Alloc(int(size))
	if err != nil {
		return nil, err
	}
	s := &Segment{id: id, mem: mem, backing: b, changed: make(chan struct{})}
	if opt.ShareNotifications {
		if s.notes, err = newNoteArea(n); err != nil {
			b.Free(mem)
			return nil, err
		}
		s.notif, s.epoch = s.notes.slots(), s.notes.epoch()
	} else {
		s.notif, s.epoch = make([]atomic.Uint64, n), &s.own
	}
	return s, nil
}

// SharedNotes reports whether the slots live in a notification area that
// other processes of the host may map.
func (s *Segment) SharedNotes() bool { return s.notes != nil }

// DupNotes returns a new descriptor of the notification area's memfd,
// close-on-exec, for another process of the host (MapNotes). The caller
// closes it.
func (s *Segment) DupNotes() (int, error) {
	if s.notes == nil {
		return -1, ErrNotShared
	}
	s.nmu.RLock()
	defer s.nmu.RUnlock()
	return s.notes.dup()
}

// SetEpoch raises the segment's epoch to e (never lowers it) and wakes
// its parked waiters to look again. From then on a slot set in an older
// epoch reads as not set, whoever set it, and a process of an older epoch
// neither sets a slot (PeerNotes.Set) nor is admitted to copy
// (PeerNotes.Enter). The runtime raises it before anything of its sees a
// newer view (docs/design.md §3).
func (s *Segment) SetEpoch(e uint32) {
	s.nmu.RLock()
	raise(s.epoch, e)
	s.nmu.RUnlock()
	s.Wake()
}

// Epoch returns the segment's epoch (SetEpoch).
func (s *Segment) Epoch() uint32 {
	s.nmu.RLock()
	defer s.nmu.RUnlock()
	return s.epoch.Load()
}

// WriterBusy reports whether the process given writer line w of the
// notification area (DupNotes) has a copy into the segment under way
// that PeerNotes.Enter or EnterQueue admitted. After raising the epoch,
// call SyncWriters before asking.
func (s *Segment) WriterBusy(w int) bool {
	if s.notes == nil || w < 0 || w >= MaxWriters {
		return false
	}
	s.nmu.RLock()
	defer s.nmu.RUnlock()
	return !s.isClosed() && s.notes.writerBusy(w)
}

// Wake wakes the segment's parked waiters, so that they look at the slots
// again: another process set one of them directly and saw a sleeper, a
// peer was lost, or the epoch changed.
func (s *Segment) Wake() {
	s.mu.Lock()
	if !s.closed {
		close(s.changed)
		s.changed = make(chan struct{})
	}
	s.mu.Unlock()
}

// ID returns the segment's ID.
func (s *Segment) ID() ID { return s.id }

// Size returns the segment's size in bytes.
func (s *Segment) Size() int64 { return int64(len(s.mem)) }

// NumNotifications returns the number of notification slots.
func (s *Segment) NumNotifications() int { return len(s.notif) }

// Bytes returns the whole segment memory. It aliases the segment.
func (s *Segment) Bytes() []byte { return s.mem }

// Sparse tells the kernel that most of the segment's memory is never
// touched, so that it backs it with small pages only: a segment from
// HugePageThreshold up asks for transparent huge pages, and then a touch
// of a few bytes costs 2 MiB. (The checkpoint's local segment holds a
// board of records for every rank, which only rank 0 reads and only with
// a disk level: at 32,768 ranks huge pages made it 4 MiB of memory per
// rank for a few bytes used.) Advisory; a memory renewed for sharing
// (MemfdBacking.Renew) is shared memory, which the kernel backs with
// small pages unless the host's shmem setting says otherwise.
func (s *Segment) Sparse() { _ = unix.Madvise(s.mem, unix.MADV_NOHUGEPAGE) }

// Close releases the memory and wakes every waiter with ErrClosed. The
// segment must not be used afterwards; Close is idempotent.
func (s *Segment) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.changed)
	s.mu.Unlock()
	if s.notes != nil {
		s.nmu.Lock()
		s.notes.free()
		s.nmu.Unlock()
	}
	mem := s.mem
	s.mem = nil
	return s.backing.Free(mem)
}

// Check reports whether [off, off+n) lies inside the segment.
func (s *Segment) Check(off, n int64) error {
	if off < 0 || n < 0 || off > int64(len(s.mem)) || n > int64(len(s.mem))-off {
		return &RangeError{ID: s.id, Off: off, Len: n, Size: int64(len(s.mem))}
	}
	return nil
}

// Slice returns the segment bytes [off, off+n), aliasing the segment.
func (s *Segment) Slice(off, n int64) ([]byte, error) {
	if err := s.Check(off, n); err != nil {
		return nil, err
	}
	return s.mem[off : off+n : off+n], nil
}

// CopyIn copies src into the segment at off.
func (s *Segment) CopyIn(off int64, src []byte) error {
	dst, err := s.Slice(off, int64(len(src)))
	if err != nil {
		return err
	}
	copy(dst, src)
	return nil
}

// CopyOut copies len(dst) bytes from the segment at off into dst.
func (s *Segment) CopyOut(off int64, dst []byte) error {
	src, err := s.Slice(off, int64(len(dst)))
	if err != nil {
		return err
	}
	copy(dst, src)
	return nil
}

func view[T any](s *Segment, off int64, n int) ([]T, error) {
	var zero T
	size := int64(unsafe.Sizeof(zero))
	if n < 0 {
		return nil, &RangeError{ID: s.id, Off: off, Len: int64(n), Size: int64(len(s.mem))}
	}
	b, err := s.Slice(off, int64(n)*size)
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return []T{}, nil
	}
	if uintptr(unsafe.Pointer(&b[0]))%uintptr(size) != 0 {
		return nil, ErrAlign
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), n), nil
}

// Float64s returns n float64 values starting at byte offset off, aliasing
// the segment (no copy). off must be 8-byte aligned.
func (s *Segment) Float64s(off int64, n int) ([]float64, error) { return view[float64](s, off, n) }

// Uint64s returns n uint64 values starting at byte offset off, aliasing the
// segment. off must be 8-byte aligned.
func (s *Segment) Uint64s(off int64, n int) ([]uint64, error) { return view[uint64](s, off, n) }

// Int64s returns n int64 values starting at byte offset off, aliasing the
// segment. off must be 8-byte aligned.
func (s *Segment) Int64s(off int64, n int) ([]int64, error) { return view[int64](s, off, n) }

// Word returns the aligned 8-byte word at off for atomic access.
func (s *Segment) Word(off int64) (*atomic.Uint64, error) {
	w, err := view[uint64](s, off, 1)
	if err != nil {
		return nil, err
	}
	return (*atomic.Uint64)(unsafe.Pointer(&w[0])), nil
}

// SetNotification stores v (which should be non-zero to be seen) into slot
// id in the segment's epoch and wakes waiters. Stores made before the call
// are visible to whoever observes the value.
func (s *Segment) SetNotification(id NotificationID, v uint32) error {
	_, err := s.SetNotificationIn(id, v, s.Epoch())
	return err
}

// SetNotificationIn is SetNotification for a value set in epoch e (the
// epoch of the frame that carried it): it is seen while the segment is in
// no newer epoch, and it is not stored over a value of a newer epoch (set
// is false then).
func (s *Segment) SetNotificationIn(id NotificationID, v, e uint32) (set bool, err error) {
	if int(id) >= len(s.notif) {
		return false, ErrNotificationID
	}
	s.nmu.RLock()
	set = setSlot(&s.notif[id], v, e)
	s.nmu.RUnlock()
	if set {
		s.Wake()
	}
	return set, nil
}

// Notification returns the current value of slot id without consuming it:
// 0 when it was set in an epoch older than the segment's.
func (s *Segment) Notification(id NotificationID) (uint32, error) {
	if int(id) >= len(s.notif) {
		return 0, ErrNotificationID
	}
	s.nmu.RLock()
	defer s.nmu.RUnlock()
	return slotValue(s.notif[id].Load(), s.epoch.Load()), nil
}

// ResetNotification atomically reads slot id and sets it to zero, returning
// the value it had (0 when it was set in an older epoch).
func (s *Segment) ResetNotification(id NotificationID) (uint32, error) {
	if int(id) >= len(s.notif) {
		return 0, ErrNotificationID
	}
	s.nmu.RLock()
	defer s.nmu.RUnlock()
	return resetSlot(&s.notif[id], s.epoch.Load()), nil
}

// WaitPolicy says how WaitSome waits before it parks.
type WaitPolicy struct {
	// Spin is how long to poll the slots before parking on a channel. Polling
	// cuts wake-up latency at the price of a busy core; 0 parks at once.
	Spin time.Duration
	// Yield gives the CPU to the operating system between polls, for a
	// host with more processes than CPUs: the process that will set the
	// slot may need this CPU. Without it, a poller gives way only to the
	// other goroutines of its process, now and then.
	Yield bool
}

// maxSpins bounds Poll's polls whatever the clock says.
const maxSpins = 1 << 16

// Poll calls ready until it reports true or p.Spin is over, and reports
// whether it did. It is WaitSome's polling, for other waits on memory
// that another process stores into.
func Poll(p WaitPolicy, ready func() bool) bool {
	if p.Spin <= 0 {
		return false
	}
	// Bounded by time, and by a count too: where time stands still while
	// goroutines run (a test's bubble), the count ends it.
	deadline := time.Now().Add(p.Spin)
	for spins := 0; spins < maxSpins; spins++ {
		if ready() {
			return true
		}
		if p.Yield {
			// The clock after every yield: on a host with more runnable
			// threads than CPUs one yield can last a time slice of
			// another process, milliseconds, and a look every 16 let a
			// waiter overrun its budget a thousandfold and never park
			// (a writer then never found it parked).
			osYield()
			if time.Now().After(deadline) {
				return false
			}
			continue
		}
		// A look at the clock now and then, and a turn to the other
		// goroutines more rarely (with one P they run only then; a
		// Gosched costs far more than a look, and a value stored while it
		// runs is seen only after it).
		if spins&255 == 255 {
			if time.Now().After(deadline) {
				return false
			}
			if spins&4095 == 4095 {
				runtime.Gosched()
			}
		}
	}
	return false
}

// WaitSome waits until one of the slots [first, first+num) is non-zero and
// returns its ID. It does not consume the value: call ResetNotification.
// It returns ctx.Err() when ctx ends first and ErrClosed after Close,
// and ErrDropped when the epoch moved on (SetEpoch) past a value set in
// the epoch the wait began in, or later, that it had not seen: a waiter
// whose writer stored and was then declared failed before it woke the
// waiter does not sleep on past the view. An epoch change that drops
// nothing in the range leaves it waiting.
func (s *Segment) WaitSome(ctx context.Context, first NotificationID, num int, p WaitPolicy) (NotificationID, error) {
	if num <= 0 || int(first)+num > len(s.notif) {
		return 0, ErrNotificationID
	}
	began := s.epoch.Load()
	dropped := func() bool {
		e := s.epoch.Load()
		if e == began {
			return false
		}
		for i := int(first); i < int(first)+num; i++ {
			w := s.notif[i].Load()
			if uint32(w) != 0 && epochOfSlot(w) >= began && epochOfSlot(w) < e {
				return true
			}
		}
		return false
	}
	scan := func() (NotificationID, bool) {
		e := s.epoch.Load()
		for i := int(first); i < int(first)+num; i++ {
			if slotValue(s.notif[i].Load(), e) != 0 {
				return NotificationID(i), true
			}
		}
		return 0, false
	}
	if id, ok := scan(); ok {
		return id, nil
	}
	var id NotificationID
	if Poll(p, func() bool {
		var ok bool
		id, ok = scan()
		return ok
	}) {
		return id, nil
	}
	if s.notes != nil {
		// Parked from here on: a process that sets a slot directly sees it
		// and wakes us (see notes_linux.go).
		s.sleep(1)
		defer s.sleep(-1)
	}
	for {
		s.mu.Lock()
		ch, closed := s.changed, s.closed
		s.mu.Unlock()
		if closed {
			return 0, ErrClosed
		}
		if id, ok := scan(); ok {
			return id, nil
		}
		if dropped() {
			return 0, ErrDropped
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// sleep counts a parked waiter in (d = 1) or out (d = -1) of the shared
// notification area.
func (s *Segment) sleep(d int32) {
	s.nmu.RLock()
	if !s.isClosed() {
		s.notes.sleepers().Add(d)
	}
	s.nmu.RUnlock()
}

func (s *Segment) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}
