package segments

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
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
}

// Segment is a region of memory with notification slots.
type Segment struct {
	id      ID
	mem     []byte
	backing Backing
	notif   []atomic.Uint32

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
	return &Segment{id: id, mem: mem, backing: b, notif: make([]atomic.Uint32, n), changed: make(chan struct{})}, nil
}

// ID returns the segment's ID.
func (s *Segment) ID() ID { return s.id }

// Size returns the segment's size in bytes.
func (s *Segment) Size() int64 { return int64(len(s.mem)) }

// NumNotifications returns the number of notification slots.
func (s *Segment) NumNotifications() int { return len(s.notif) }

// Bytes returns the whole segment memory. It aliases the segment.
func (s *Segment) Bytes() []byte { return s.mem }

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
// id and wakes waiters. Stores made before the call are visible to whoever
// observes the value.
func (s *Segment) SetNotification(id NotificationID, v uint32) error {
	if int(id) >= len(s.notif) {
		return ErrNotificationID
	}
	s.notif[id].Store(v)
	s.mu.Lock()
	if !s.closed {
		close(s.changed)
		s.changed = make(chan struct{})
	}
	s.mu.Unlock()
	return nil
}

// Notification returns the current value of slot id without consuming it.
func (s *Segment) Notification(id NotificationID) (uint32, error) {
	if int(id) >= len(s.notif) {
		return 0, ErrNotificationID
	}
	return s.notif[id].Load(), nil
}

// ResetNotification atomically reads slot id and sets it to zero, returning
// the value it had.
func (s *Segment) ResetNotification(id NotificationID) (uint32, error) {
	if int(id) >= len(s.notif) {
		return 0, ErrNotificationID
	}
	return s.notif[id].Swap(0), nil
}

// WaitPolicy says how WaitSome waits before it parks.
type WaitPolicy struct {
	// Spin is how long to poll the slots before parking on a channel. Polling
	// cuts wake-up latency at the price of a busy core; 0 parks at once.
	Spin time.Duration
}

// WaitSome waits until one of the slots [first, first+num) is non-zero and
// returns its ID. It does not consume the value: call ResetNotification.
// It returns ctx.Err() when ctx ends first and ErrClosed after Close.
func (s *Segment) WaitSome(ctx context.Context, first NotificationID, num int, p WaitPolicy) (NotificationID, error) {
	if num <= 0 || int(first)+num > len(s.notif) {
		return 0, ErrNotificationID
	}
	scan := func() (NotificationID, bool) {
		for i := int(first); i < int(first)+num; i++ {
			if s.notif[i].Load() != 0 {
				return NotificationID(i), true
			}
		}
		return 0, false
	}
	if id, ok := scan(); ok {
		return id, nil
	}
	if p.Spin > 0 {
		deadline := time.Now().Add(p.Spin)
		for spins := 0; ; spins++ {
			if id, ok := scan(); ok {
				return id, nil
			}
			if spins&63 == 63 {
				if time.Now().After(deadline) {
					break
				}
				runtime.Gosched()
			}
		}
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
		select {
		case <-ch:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}
