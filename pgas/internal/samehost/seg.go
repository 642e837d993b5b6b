package samehost

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gaspigo/gaspigo/segments"
	"github.com/gaspigo/gaspigo/transport"
)

// Seg is what a shared segment knows of the others' memory in one
// view: where each same-host peer's is (from SegmentCreate's exchange),
// and the mappings made so far. A peer's memory is mapped on the first
// write to it, so a process maps only the peers it writes to (its
// checkpoint mirrors, its partners), not the whole host: at 256
// processes mapping everyone's took a second per segment and process.
type Seg struct {
	mu      sync.RWMutex           // held shared while copying into mem; exclusively to map or unmap
	epoch   uint32                 // the view the descriptors were exchanged in
	dropped bool                   // unmapped (Unmap): map nothing more
	gone    atomic.Bool            // retired (Retire): a Target uses it no more
	rankOf  []int                  // the view of the exchange: proc -> rank, -1 for none
	members []int                  // the ranks that sent descs, ascending
	descs   []int64                // DescWords per member: read on a peer's first write, not before
	mem     map[transport.Proc]Mem // mapped, or a nil Mem when mapping failed
	// fetching holds, for each peer whose memory is being asked for, a
	// channel closed when the answer is in mem (Map).
	fetching map[transport.Proc]chan struct{}
}

// NewSeg records where the segments of this host's peers in the view of
// epoch (rankOf: proc -> rank, -1 for none) are, from the descriptors
// exchanged (descs, DescWords per member of members); nothing is mapped
// before Map.
func NewSeg(epoch uint32, rankOf []int, members []int, descs []int64) *Seg {
	return &Seg{epoch: epoch, rankOf: rankOf, members: members, descs: descs, mem: map[transport.Proc]Mem{}}
}

// Epoch is the epoch of the view the descriptors were exchanged in.
func (d *Seg) Epoch() uint32 { return d.epoch }

// share returns where proc's memory is, if it sent any.
func (d *Seg) share(proc transport.Proc) (Share, bool) {
	if int(proc) >= len(d.rankOf) {
		return Share{}, false
	}
	r := d.rankOf[proc]
	if r < 0 {
		return Share{}, false
	}
	i := slices.Index(d.members, r)
	if i < 0 {
		return Share{}, false
	}
	desc := d.descs[DescWords*i : DescWords*(i+1)]
	if desc[1] <= 0 {
		return Share{}, false
	}
	return Share{Size: desc[0], Notes: int(desc[2]), Gen: uint32(desc[4])}, true
}

// Share is what Desc sent of a peer's segment memory.
type Share struct {
	Size  int64
	Notes int // slots in its notification area, 0 when not shared
	Gen   uint32
}

// Mem is a peer's segment memory mapped here, its generation (the
// peer's name for that memory), and its notification area when that is
// mapped too.
type Mem struct {
	Mem   []byte
	Gen   uint32
	Notes *segments.PeerNotes
}

// DescWords is the length of Desc.
const DescWords = 5

// Desc is what SegmentCreate's exchange carries for one rank: the size,
// whether its memory can be shared (1) or not (0), the number of slots of
// its shared notification area (0 for none), a word unused, and its
// generation.
func Desc(size int64, shared bool, notes int, gen uint32) []int64 {
	d := []int64{size, 0, int64(notes), 0, int64(gen)}
	if shared {
		d[1] = 1
	}
	return d
}

// DescSize is the size member i of an exchange sent (descs as NewSeg's).
func DescSize(descs []int64, i int) int64 { return descs[DescWords*i] }

// A memory request's key (transport.MemorySharer) names a segment (its
// ID, the low 16 bits), or with NotesKey its notification area, or with
// CollKind a collective area (AreaKey).
const (
	NotesKey = 1 << 16
	CollKind = 2 << 16
)

// ShareTimeout bounds a request for a peer's memory; past it the write
// goes through the ring.
const ShareTimeout = 10 * time.Second

// Get returns proc's memory, with d held shared (the caller calls
// Release); it maps it first (mapPeer, which calls Map) when this is the
// first use. ok is false (and nothing held) when there is none: the
// mapping failed, or the target deleted or moved its memory since.
func (d *Seg) Get(proc transport.Proc, mapPeer func()) (m Mem, ok bool) {
	d.mu.RLock()
	m, ok = d.mem[proc]
	if !ok {
		d.mu.RUnlock()
		mapPeer()
		d.mu.RLock()
		m, ok = d.mem[proc]
	}
	if !ok || m.Mem == nil || segments.Retired(m.Mem) {
		d.mu.RUnlock() // the target deleted or moved it: send the data
		return Mem{}, false
	}
	return m, true
}

// Release ends what Get holds.
func (d *Seg) Release() { d.mu.RUnlock() }

// Map maps proc's memory into d, once: on failure it records a nil
// mapping, and writes to proc go through frames; near says whether proc
// is another process of this host. The request for the memory (fetch,
// given what the exchange said of it) is a round trip to proc, made
// without d.mu, so that writes to the other peers go on meanwhile (a
// stopped peer holds it up to ShareTimeout); a writer to proc itself
// waits for it, so that its writes keep their order (none goes by frame
// while an earlier one went direct, or the other way round).
func (d *Seg) Map(proc transport.Proc, near bool, fetch func(Share) Mem) {
	d.mu.Lock()
	if _, done := d.mem[proc]; done || d.dropped {
		d.mu.Unlock()
		return
	}
	if wait, ok := d.fetching[proc]; ok {
		d.mu.Unlock()
		<-wait
		return
	}
	ps, ok := d.share(proc)
	if !ok || !near {
		d.mem[proc] = Mem{}
		d.mu.Unlock()
		return
	}
	done := make(chan struct{})
	if d.fetching == nil {
		d.fetching = map[transport.Proc]chan struct{}{}
	}
	d.fetching[proc] = done
	d.mu.Unlock()

	m := fetch(ps)
	d.mu.Lock()
	if d.dropped && m.Mem != nil {
		m.Unmap() // Unmap ran meanwhile
		m = Mem{}
	}
	if !d.dropped {
		d.mem[proc] = m
	}
	delete(d.fetching, proc)
	close(done)
	d.mu.Unlock()
}

// Fetch asks proc, through sharer, for its memory of segment seg and maps
// it; ps is what the exchange said of it. Each request is bounded by
// ShareTimeout within life. notesErr says why the notification area was
// not mapped when the memory was: writes then still copy directly, and
// notifications and completion go by doorbell.
func Fetch(life context.Context, sharer transport.MemorySharer, proc transport.Proc, seg uint16, ps Share) (m Mem, notesErr, err error) {
	fd, tag, err := fetchFD(life, sharer, proc, uint64(seg))
	if err != nil {
		return Mem{}, nil, err
	}
	defer unix.Close(fd)
	// The memory must be the segment the exchange described: a peer that
	// deleted and re-created it since has another generation (and maybe
	// another size that rounds to the same pages).
	if uint32(tag) != ps.Gen {
		return Mem{}, nil, fmt.Errorf("segment %d of proc %d is of generation %d now, the exchange said %d", seg, proc, uint32(tag), ps.Gen)
	}
	mem, err := segments.MapFD(fd, ps.Size)
	if err != nil {
		return Mem{}, nil, err
	}
	m = Mem{Mem: mem, Gen: uint32(tag)}
	if ps.Notes > 0 {
		m.Notes, notesErr = fetchNotes(life, sharer, proc, seg, ps)
	}
	return m, notesErr, nil
}

// fetchNotes asks proc for the notification area of segment seg and maps
// it.
func fetchNotes(life context.Context, sharer transport.MemorySharer, proc transport.Proc, seg uint16, ps Share) (*segments.PeerNotes, error) {
	fd, tag, err := fetchFD(life, sharer, proc, uint64(seg)|NotesKey)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	if uint32(tag) != ps.Gen {
		return nil, fmt.Errorf("segment %d of proc %d is of generation %d now, the exchange said %d", seg, proc, uint32(tag), ps.Gen)
	}
	return segments.MapNotes(fd, ps.Notes, int(tag>>32))
}

// fetchFD is one request for memory, bounded by ShareTimeout.
func fetchFD(life context.Context, sharer transport.MemorySharer, proc transport.Proc, key uint64) (int, uint64, error) {
	ctx, cancel := context.WithTimeout(life, ShareTimeout)
	defer cancel()
	return sharer.FetchMemory(ctx, proc, key)
}

// Unmap releases what Fetch mapped.
func (m Mem) Unmap() {
	if m.Mem != nil {
		segments.UnmapShared(m.Mem)
	}
	if m.Notes != nil {
		m.Notes.Unmap()
	}
}

// Retire marks d as no longer the segment's: a Target that holds it is
// used no more. The caller holds every lock under which a Target of d
// is used (pgas: every queue's), so that no operation through one is
// still copying once it lets them go.
func (d *Seg) Retire() { d.gone.Store(true) }

// Gone reports whether d was retired.
func (d *Seg) Gone() bool { return d.gone.Load() }

// Unmap unmaps the peers' memory, and maps nothing more. Retire it
// first.
func (d *Seg) Unmap() {
	d.mu.Lock()
	d.dropped = true
	for p, m := range d.mem {
		m.Unmap()
		delete(d.mem, p)
	}
	d.mu.Unlock()
}
