package samehost

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/gaspigo/gaspigo/segments"
)

// MaxMembers is the most members a group may have to meet in an area:
// above it the trees of frames scale better.
const MaxMembers = 64

// AreaFits is the rule of the collectives in shared memory: a group of n
// members meets in an area when it has 2 to MaxMembers of them, segments
// are shared (direct) and every member sits on this host (oneHost, by
// host label). It depends only on what every member knows alike (the
// view, the host labels, the job's settings), never on the size passed.
func AreaFits(n int, direct, oneHost bool) bool {
	return n >= 2 && n <= MaxMembers && direct && oneHost
}

// AreaKey names an area in a memory request: the group's tag, the
// number of members, the epoch, and CollKind.
func AreaKey(tag uint16, n int, epoch uint32) uint64 {
	return uint64(tag) | CollKind | uint64(n)<<18 | uint64(epoch)<<32
}

// KeyArea returns the members and epoch an area's key names; ok is false
// when key names no area a group may have (not of CollKind, or too few
// or too many members).
func KeyArea(key uint64) (n int, epoch uint32, ok bool) {
	n = int(key>>18) & 0x3fff
	return n, uint32(key >> 32), key&CollKind != 0 && n >= 2 && n <= MaxMembers
}

// Area is the memory of one group's collectives in one epoch, as its
// owner (the group's lowest member) has it or another member maps it.
// Its layout is segments.CollArea's. The memfd is a segment's of
// segments.MemfdBacking: sealed against shrinking, and checked for its
// seal and size by the member that maps it (segments.MapFD).
type Area struct {
	segments.CollArea
	owned   *segments.Segment      // the owner's; nil for a member's mapping
	backing *segments.MemfdBacking // the owner's

	users atomic.Int32 // collectives using mem now
	stale atomic.Bool  // retired: no new user; the last user frees it
	freed atomic.Bool
}

// newArea makes the area of n members an owner hands out.
func newArea(n int) (*Area, error) {
	b := segments.NewMemfdBacking()
	seg, err := segments.New(0, segments.CollAreaSize(n), segments.Options{Backing: b, Notifications: 1})
	if err != nil {
		return nil, err
	}
	lay, err := segments.NewCollArea(seg.Bytes(), n)
	if err != nil {
		seg.Close()
		return nil, err
	}
	return &Area{CollArea: lay, owned: seg, backing: b}, nil
}

// MapArea maps the area of n members from fd (the owner's, received over
// a Unix socket); the caller still closes fd.
func MapArea(fd, n int) (*Area, error) {
	mem, err := segments.MapFD(fd, segments.CollAreaSize(n))
	if err != nil {
		return nil, err
	}
	lay, err := segments.NewCollArea(mem, n)
	if err != nil {
		segments.UnmapShared(mem)
		return nil, err
	}
	return &Area{CollArea: lay}, nil
}

// Dup returns a descriptor of an owned area's memfd, for a member.
func (a *Area) Dup() (int, error) {
	if a.backing == nil {
		return -1, fmt.Errorf("samehost: a member's mapping of an area cannot be handed out")
	}
	return a.backing.Dup(a.Bytes())
}

// Use pins the area for one collective; false when it was retired.
func (a *Area) Use() bool {
	a.users.Add(1)
	if a.stale.Load() {
		a.Done()
		return false
	}
	return true
}

// Done unpins it, freeing it when it was retired meanwhile.
func (a *Area) Done() {
	if a.users.Add(-1) == 0 && a.stale.Load() {
		a.free()
	}
}

// Retire stops new users; the memory goes with the last one.
func (a *Area) Retire() {
	a.stale.Store(true)
	if a.users.Load() == 0 {
		a.free()
	}
}

func (a *Area) free() {
	if !a.freed.CompareAndSwap(false, true) {
		return
	}
	if a.owned != nil {
		a.owned.Close()
	} else {
		segments.UnmapShared(a.Bytes())
	}
}

// Areas are the areas a process owns, by key, and the no-area marks it
// holds (of its own, or received): a member that holds the mark of an
// area runs the group's collectives of that epoch by frames.
type Areas struct {
	mu     sync.Mutex
	owned  map[uint64]*Area
	noArea map[uint64]bool // keys of areas a member does not have (Mark)
	marked atomic.Bool     // noArea is not empty: the lock is taken only then
	wake   chan struct{}   // closed and replaced by Wake
}

// Own returns the area this process owns under key, of n members, made
// on first use (by its own collective or a member's request).
func (as *Areas) Own(key uint64, n int) (*Area, error) {
	as.mu.Lock()
	defer as.mu.Unlock()
	if a := as.owned[key]; a != nil {
		return a, nil
	}
	a, err := newArea(n)
	if err != nil {
		return nil, err
	}
	if as.owned == nil {
		as.owned = map[uint64]*Area{}
	}
	as.owned[key] = a
	return a, nil
}

// Mark holds the no-area mark of key until Retire drops its epoch, and
// wakes the collectives waiting in an area to look at it. A mark of an
// epoch older than epoch (the view's) is dropped: its areas are retired
// already.
func (as *Areas) Mark(key uint64, epoch uint32) {
	if _, e, ok := KeyArea(key); !ok || e < epoch {
		return
	}
	as.mu.Lock()
	if as.noArea == nil {
		as.noArea = map[uint64]bool{}
	}
	as.noArea[key] = true
	as.marked.Store(true)
	as.mu.Unlock()
	as.Wake()
}

// NoArea says whether a member has no area under key.
func (as *Areas) NoArea(key uint64) bool {
	if !as.marked.Load() {
		return false
	}
	as.mu.Lock()
	defer as.mu.Unlock()
	return as.noArea[key]
}

// Retire retires the areas, and drops the no-area marks, of epochs
// before epoch (all of them for epoch ^0), and wakes the waiters.
func (as *Areas) Retire(epoch uint32) {
	old := func(k uint64) bool { return uint32(k>>32) < epoch || epoch == ^uint32(0) }
	as.mu.Lock()
	for k, a := range as.owned {
		if old(k) {
			a.Retire()
			delete(as.owned, k)
		}
	}
	for k := range as.noArea {
		if old(k) {
			delete(as.noArea, k)
		}
	}
	as.marked.Store(len(as.noArea) > 0)
	as.mu.Unlock()
	as.Wake()
}

// Wake wakes the collectives waiting in an area, to look again (a stamp
// stored, a peer lost, a view applied, a mark).
func (as *Areas) Wake() {
	as.mu.Lock()
	if as.wake != nil {
		close(as.wake)
		as.wake = nil
	}
	as.mu.Unlock()
}

// WakeChan returns a channel that the next Wake closes.
func (as *Areas) WakeChan() <-chan struct{} {
	as.mu.Lock()
	defer as.mu.Unlock()
	if as.wake == nil {
		as.wake = make(chan struct{})
	}
	return as.wake
}
