package pgas

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"unique"

	"github.com/gaspigo/gaspigo/pgas/internal/samehost"
	"github.com/gaspigo/gaspigo/segments"
	"github.com/gaspigo/gaspigo/transport"
)

// segInfo is a local segment plus the sizes of the same segment on every
// rank, learnt at collective creation so that remote bounds are checked
// before anything is sent.
type segInfo struct {
	seg   *segments.Segment
	sizes atomic.Pointer[sizeTable] // by rank; nil for a segment created locally only

	// use pins the memory: handlers that read or write it for a peer hold
	// it shared until they are done with it (a read reply until it is
	// sent); SegmentDelete takes it exclusively before freeing the memory.
	use     sync.RWMutex
	deleted bool // under use
	// move, for a shared segment (backing set), is held shared while a
	// peer's write or atomic is applied to the memory, and exclusively
	// while Recover moves the memory to a fresh memfd (renewShared). Read replies do not take it: a move
	// keeps the contents at the same address, so a reply being sent
	// reads the same bytes, and Recover never waits for a reply stuck
	// on a slow or dead peer (while it waits, every reader that applies
	// a write would wait behind it, and the heartbeats behind those).
	move sync.RWMutex

	// backing is the segment's memfd when it is shared with the processes
	// of this host (Config.DirectShm), nil otherwise; direct maps theirs
	// (direct.go).
	backing *segments.MemfdBacking
	gen     atomic.Uint32 // names the memory: new at creation and at every move (under move)
	hmu     sync.Mutex
	holders map[transport.Proc]bool // the processes given the memory (provideMemory); under hmu
	// writers are the processes given the notification area, each with
	// the writer line it copies through (segments.PeerNotes.Enter); a
	// line is never given to another process. Under hmu.
	writers map[transport.Proc]int
	direct  atomic.Pointer[samehost.Seg] // the peers' memory in the current view, nil when none

	gone atomic.Bool // removed from the runtime's table (SegmentDelete): lookupSeg's cache skips it
}

// lookupSeg returns local segment id, or nil. The segment found last is
// kept aside, so that a run of operations on one segment (the common
// case) costs no map lookup.
func (rt *Runtime) lookupSeg(id segments.ID) *segInfo {
	if si := rt.lastSeg.Load(); si != nil && si.seg.ID() == id && !si.gone.Load() {
		return si
	}
	rt.segMu.RLock()
	si := rt.segs[id]
	rt.segMu.RUnlock()
	if si != nil {
		rt.lastSeg.Store(si)
	}
	return si
}

// pinSeg returns local segment id with its memory pinned against
// SegmentDelete; the caller calls unpin when done with the memory.
func (rt *Runtime) pinSeg(id uint16) (seg *segments.Segment, unpin func(), err error) {
	si, unpin, err := rt.pinSegInfo(id)
	if err != nil {
		return nil, nil, err
	}
	return si.seg, unpin, nil
}

// pinSegInfo is pinSeg returning the segment's information.
func (rt *Runtime) pinSegInfo(id uint16) (si *segInfo, unpin func(), err error) {
	if si, err = rt.pinUse(id); err != nil {
		return nil, nil, err
	}
	return si, si.use.RUnlock, nil
}

// pinUse looks up local segment id and holds its use lock shared.
func (rt *Runtime) pinUse(id uint16) (*segInfo, error) {
	si := rt.lookupSeg(segments.ID(id))
	if si != nil {
		si.use.RLock()
		if !si.deleted {
			return si, nil
		}
		si.use.RUnlock()
	}
	return nil, fmt.Errorf("pgas: segment %d: %w", id, ErrNoSegment)
}

// pinSegApply pins local segment id for a handler that changes its memory
// (a write or an atomic): a shared segment is also held against a move.
// The handler calls si.unpinApply when done. No closure: it runs for
// every write frame.
func (rt *Runtime) pinSegApply(id uint16) (*segInfo, error) {
	si, err := rt.pinUse(id)
	if err == nil && si.backing != nil {
		si.move.RLock()
	}
	return si, err
}

// unpinApply releases what pinSegApply took.
func (si *segInfo) unpinApply() {
	if si.backing != nil {
		si.move.RUnlock()
	}
	si.use.RUnlock()
}

func (rt *Runtime) localSeg(id uint16) (*segments.Segment, error) {
	si := rt.lookupSeg(segments.ID(id))
	if si == nil {
		return nil, fmt.Errorf("pgas: segment %d: %w", id, ErrNoSegment)
	}
	return si.seg, nil
}

// localRange resolves a local segment range.
func (rt *Runtime) localRange(l Loc, n int64, op string) ([]byte, error) {
	seg, err := rt.localSeg(uint16(l.Seg))
	if err != nil {
		return nil, fmt.Errorf("pgas: %s: local %w", op, err)
	}
	b, err := seg.Slice(l.Off, n)
	if err != nil {
		return nil, fmt.Errorf("pgas: %s: local segment %d: %w: %v", op, l.Seg, ErrBounds, err)
	}
	return b, nil
}

// checkRemote checks a remote range against the sizes learnt when the
// segment was created collectively. A segment not created collectively is
// checked by the target only.
func (rt *Runtime) checkRemote(rank int, l Loc, n int64, op string) error {
	if rank < 0 || rank >= rt.Size() {
		return fmt.Errorf("pgas: %s: rank %d outside 0..%d: %w", op, rank, rt.Size()-1, ErrInvalid)
	}
	si := rt.lookupSeg(l.Seg)
	if si == nil {
		return nil
	}
	sizes := si.sizes.Load()
	if sizes == nil || rank >= sizes.len() {
		return nil
	}
	size := sizes.at(rank)
	if size < 0 && rt.Vacant(rank) {
		// Vacant when the segment was created: the operation fails with
		// ErrVacant once it is checked against the program's view.
		return nil
	}
	if l.Off < 0 || n < 0 || l.Off > size || n > size-l.Off {
		return fmt.Errorf("pgas: %s: rank %d segment %d: range [%d, %d) outside [0, %d): %w", op, rank, l.Seg, l.Off, l.Off+n, size, ErrBounds)
	}
	return nil
}

// SegmentCreate allocates segment id of size bytes on every rank of g. It
// is collective: each member calls it, and it returns once every member has
// created it, so writes may follow at once. Ranks may pass different sizes;
// each learns all of them, and remote bounds are checked before sending.
//
// After a recovery every rank calls it again: a survivor that already holds
// segment id with the same size keeps its memory and only rejoins the
// exchange of sizes, while a promoted spare allocates it. A different size
// for an existing ID is ErrSegmentExists.
func (rt *Runtime) SegmentCreate(ctx context.Context, id segments.ID, size int64, g *Group) (*segments.Segment, error) {
	if g == nil {
		g = rt.GroupAll()
	}
	rt.segMu.Lock()
	si := rt.segs[id]
	fresh := si == nil
	if !fresh && si.seg.Size() != size {
		rt.segMu.Unlock()
		return nil, fmt.Errorf("pgas: segment_create: segment %d exists with %d bytes, asked for %d: %w", id, si.seg.Size(), size, ErrSegmentExists)
	}
	if fresh {
		var opt segments.Options
		var backing *segments.MemfdBacking
		if rt.directOn() {
			backing = segments.NewMemfdBacking()
			opt.Backing = backing
			opt.ShareNotifications = true
		}
		seg, err := segments.New(id, size, opt)
		if err != nil {
			rt.segMu.Unlock()
			return nil, fmt.Errorf("pgas: segment_create: %w", err)
		}
		si = &segInfo{seg: seg, backing: backing}
		si.gen.Store(rt.segGen.Add(1))
		rt.segs[id] = si
	}
	rt.segMu.Unlock()
	if fresh {
		// In the current view's epoch, under viewMu: a view being applied
		// either raised it (it was in segs) or is seen here (raiseEpochs).
		rt.viewMu.Lock()
		si.seg.SetEpoch(rt.view.Load().epoch)
		rt.viewMu.Unlock()
	}
	// Every member learns every member's size and where its memory is
	// (sharedDesc): by an agreement of constant size when they all say the
	// same (segUniform), else by an allgather.
	desc := sharedDesc(si)
	descs, members, sizes, err := rt.exchangeDescs(ctx, g, desc)
	if err != nil {
		if fresh {
			rt.SegmentDelete(id)
		}
		return nil, err
	}
	si.sizes.Store(sizes)
	rt.mapPeers(si, rt.view.Load(), members, descs)
	return si.seg, nil
}

// exchangeDescs gives every member of g every member's segment
// descriptor: the members in group order, their descriptors (nil when
// nobody's memory is shared: only the sizes are needed then) and their
// sizes by rank. First a reduction of constant size says whether every
// member sent the same descriptor, or the same size with no memory
// shared (the usual case: one size for all, as a simulation of N ranks
// in one process has it); only if not does it allgather the
// descriptors, O(N) bytes per member.
func (rt *Runtime) exchangeDescs(ctx context.Context, g *Group, desc []int64) ([]int64, []int, *sizeTable, error) {
	agg := make([]int64, 2*len(desc)) // minima, then maxima
	copy(agg, desc)
	copy(agg[len(desc):], desc)
	members, err := rt.allreduceRanks(ctx, g, asBytes(agg), func(dst, src []byte) {
		d, s := fromBytes[int64](dst), fromBytes[int64](src)
		for i := range len(d) / 2 {
			d[i] = min(d[i], s[i])
		}
		for i := len(d) / 2; i < len(d); i++ {
			d[i] = max(d[i], s[i])
		}
	})
	if err != nil {
		return nil, nil, nil, err
	}
	mins, maxs := agg[:len(desc)], agg[len(desc):]
	same := slices.Equal(mins, maxs)
	if noneShared := maxs[1] == 0; mins[0] == maxs[0] && (same || noneShared) && slices.IsSorted(members) {
		var descs []int64
		if !noneShared {
			// Every member shares its memory the same way: mapPeers
			// needs a descriptor per member, all equal.
			descs = make([]int64, 0, len(desc)*len(members))
			for range members {
				descs = append(descs, desc...)
			}
		}
		return descs, members, &sizeTable{size: mins[0], members: members, n: rt.Size()}, nil
	}
	descs, members, err := allgatherRanks(ctx, rt, g, desc)
	if err != nil {
		return nil, nil, nil, err
	}
	full := make([]int64, rt.Size())
	for i := range full {
		full[i] = -1
	}
	for i, r := range members {
		full[r] = samehost.DescSize(descs, i)
	}
	return descs, members, newSizeTable(full), nil
}

// Segment returns local segment id.
func (rt *Runtime) Segment(id segments.ID) (*segments.Segment, error) {
	return rt.localSeg(uint16(id))
}

// SegmentDelete frees local segment id. Writes that arrive for it later are
// refused.
func (rt *Runtime) SegmentDelete(id segments.ID) error {
	rt.segMu.Lock()
	si := rt.segs[id]
	delete(rt.segs, id)
	rt.segMu.Unlock()
	if si != nil {
		si.gone.Store(true)
	}
	if si == nil {
		return fmt.Errorf("pgas: segment_delete: segment %d: %w", id, ErrNoSegment)
	}
	// Wait for the handlers using its memory on behalf of peers.
	rt.dropDirect(si)
	si.use.Lock()
	si.deleted = true
	si.use.Unlock()
	return si.seg.Close()
}

// sizeTable is one segment's size on every rank, -1 for a rank that did
// not create it, as SegmentCreate's exchange taught it. It is read-only,
// and takes O(1) memory per runtime in the usual case: one size for
// every member of the group (members: the view's table, shared by the
// runtimes of one process, sorted). Otherwise it is a table interned by
// content (package unique): the runtimes of one process that learnt the
// same sizes share one copy. Nothing can write it: its fields are set
// once, and its table is an immutable string.
type sizeTable struct {
	h unique.Handle[string] // 8 bytes per rank, when the sizes differ

	size    int64 // every member's size, when they agree
	members []int // the members then, ascending; read-only
	n       int   // the ranks then
}

func newSizeTable(sizes []int64) *sizeTable {
	b := make([]byte, 8*len(sizes))
	for i, s := range sizes {
		binary.LittleEndian.PutUint64(b[8*i:], uint64(s))
	}
	return &sizeTable{h: unique.Make(string(b))}
}

// len is the number of ranks in the table.
func (t *sizeTable) len() int {
	if t.members != nil {
		return t.n
	}
	return len(t.h.Value()) / 8
}

// at is rank r's size; r is in [0, len).
func (t *sizeTable) at(r int) int64 {
	if t.members != nil {
		if _, ok := slices.BinarySearch(t.members, r); ok {
			return t.size
		}
		return -1
	}
	s := t.h.Value()[8*r : 8*r+8]
	return int64(uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56)
}
