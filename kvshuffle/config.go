package kvshuffle

import (
	"fmt"
	"log/slog"
	"os"
	"slices"

	"github.com/gaspigo/gaspigo/pgas"
	"github.com/gaspigo/gaspigo/segments"
)

// Mode selects the communication profile of a shuffle (after DataMPI's
// modes).
type Mode int

const (
	// ModeCommon is SPMD: every rank is both an O task and an A task.
	// Pairs are delivered sorted by Compare. ORanks and ARanks must be nil.
	ModeCommon Mode = iota
	// ModeMapReduce is the bipartite job: ORanks send, ARanks receive (the
	// two sets may differ or overlap), and pairs are delivered sorted and
	// grouped by key (Groups). Iteration mode (rounds with O and A swapping
	// roles) is planned on top of this profile; see the package doc.
	ModeMapReduce
)

func (m Mode) String() string {
	switch m {
	case ModeCommon:
		return "common"
	case ModeMapReduce:
		return "mapreduce"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Schedule is the order in which an O task serves its destinations.
type Schedule int

const (
	// Diagonal is the contention-free order after HPMR's diagonal skip: in
	// step s the O task with index i sends to partition (i+s) mod parts,
	// so in every step each receiver is paired with one sender.
	Diagonal Schedule = iota
	// Naive serves partitions 0, 1, 2, ... on every O task, so all senders
	// hit the same receiver at once. It exists for comparison.
	Naive
)

func (s Schedule) String() string {
	switch s {
	case Diagonal:
		return "diagonal"
	case Naive:
		return "naive"
	}
	return fmt.Sprintf("Schedule(%d)", int(s))
}

// Config configures a Shuffle. Every rank passes an equivalent Config to
// New: the same Mode, rank sets, sizes and hooks.
type Config struct {
	// Mode is the communication profile.
	Mode Mode
	// ORanks lists the ranks that send (the O communicator); nil means
	// every rank. Must be nil in ModeCommon.
	ORanks []int
	// ARanks lists the ranks that receive (the A communicator), in
	// partition order: partition p is received by ARanks[p]. Nil means
	// every rank, partition p on rank p. Must be nil in ModeCommon.
	ARanks []int

	// Partition maps a key to a partition 0..parts-1 (parts =
	// len(ARanks)). Nil means HashPartition (FNV-1a modulo parts). It must
	// be deterministic and the same on every rank.
	Partition func(key []byte, parts int) int
	// Compare orders keys; nil means bytes.Compare. Keys that compare
	// equal form one group. It must be a total order, the same on every
	// rank.
	Compare func(a, b []byte) int
	// Combine, when set, is applied on the send side to each batch of
	// pairs of one destination (at most SlotSize bytes): the values of
	// equal keys are replaced by what it returns. It must be safe to apply
	// to any subset of a key's values, any number of times (associative
	// and commutative, like a sum). It must not keep or modify the slices
	// it is given.
	Combine func(key []byte, values [][]byte) [][]byte

	// SegmentID is the segment the shuffle creates on every rank for its
	// receive rings and send buffers. It must not be used by anything else.
	SegmentID segments.ID
	// Queue is the pgas queue that carries data frames; CreditQueue the
	// one that carries credit notifications back. They must differ, and
	// must not be used by others while the shuffle runs.
	Queue, CreditQueue pgas.Queue
	// MaxPosted is how many operations the shuffle posts on a queue before
	// it calls Wait on it. It must not exceed pgas Config.QueueDepth.
	MaxPosted int

	// SlotSize is the size in bytes of one frame: a ring slot at the
	// receiver and a send buffer at the sender, 16 bytes of which are the
	// frame header. It is also the batch size of Combine. Larger frames
	// amortise per-frame costs; the fixed memory grows with it (see Slots
	// and SendBuffers).
	SlotSize int
	// Slots is the depth in frames of the receive ring each receiver keeps
	// per sender: the credits a sender has towards one receiver. The ring
	// memory is len(ORanks) * Slots * SlotSize bytes on each A rank.
	Slots int
	// SendBuffers is the number of frame buffers an O task keeps per
	// destination (one filling, the others queued or in flight); at least
	// 2. The send memory is len(ARanks) * SendBuffers * SlotSize bytes on
	// each O rank, fixed at New: a slow receiver blocks Send instead of
	// growing it.
	SendBuffers int

	// MemoryBudget bounds, in bytes, the received data an A task holds in
	// memory: blocks of received pairs (with a 24-byte index entry per
	// pair), sorted runs and merge outputs. Above it, sealed blocks spill
	// to SpillDir. The fixed overheads outside it are listed in the
	// package doc.
	MemoryBudget int64
	// RunSize is the size in bytes of the blocks an A task collects
	// received pairs in; each sealed block is sorted into a run. At most
	// MemoryBudget/2; an eighth of it lets the merger spill while the
	// drain fills the next block.
	RunSize int64
	// MergeFanIn is the most runs merged at once (in memory, on disk, and
	// in the final merge that Recv reads); more runs are merged in passes.
	MergeFanIn int
	// SpillDir is where sorted runs go when memory runs out. Empty means
	// no spilling: exceeding MemoryBudget is then ErrBudget.
	SpillDir string
	// CheckpointSpill makes Checkpoint spill every received pair held in
	// memory to a sorted file in SpillDir before it records the state, so
	// the state names files only (bytes, not megabytes) and the
	// application's checkpoint stays small. The files must be readable by
	// the process that takes over a lost rank: the same host, a shared
	// file system, or copies at the holders (Holders). Off, the state
	// carries the in-memory data (protected wherever the application
	// mirrors it) and names the files spilled under memory pressure only.
	// Needs SpillDir.
	CheckpointSpill bool
	// Holders, when set, returns the ranks that hold rank's checkpoint
	// mirrors: give ckpt's Checkpointer.Holders. Checkpoint then copies
	// the spill files a state names to those of them on another host
	// (pgas Runtime.Host), which keep the copies in their own SpillDir, and
	// RollBack fetches from them any file it cannot read where the rank
	// runs now (a rank taken over on another host). A holder on the same
	// host gets no copy: the file is kept by reference, since the loss of
	// the host loses that holder too. Every rank must return the same
	// ranks for a given rank. Nil: files are always kept by reference.
	Holders func(rank int) []int
	// IOBufferSize is the buffer in bytes of each spill file being written
	// or read.
	IOBufferSize int
	// PageCache sends spill files through the page cache. By default they
	// are written and read around it (O_DIRECT, internal/directio) where
	// the file system allows: a spill file is read once, and caching it
	// costs a page allocation per 4 KiB written, the most expensive part
	// of a spill on a virtual machine. Set it where the device is much
	// slower than memory and the files would fit in the cache.
	PageCache bool
	// MaxPairSize caps the framed size in bytes of one pair (key + value +
	// two length varints). Pairs larger than a frame are carried in
	// several frames and reassembled at the receiver.
	MaxPairSize int

	// Schedule is the exchange order.
	Schedule Schedule

	// Logger receives events (spills, checkpoints, roll-backs) with rank
	// attributes. Nil discards them.
	Logger *slog.Logger

	// drainGate, when set (tests only), is received from before every frame
	// the A side consumes: it simulates a slow receiver.
	drainGate <-chan struct{}
}

// DefaultSegmentID is the segment ID of DefaultConfig ("KV" in ASCII).
const DefaultSegmentID segments.ID = 0x4b56

// DefaultConfig returns settings for a job on dedicated hosts: 128 KiB
// frames, 4 ring slots and 2 send buffers per peer, a 256 MiB receive
// budget with 32 MiB runs, spilling to the system temporary directory.
func DefaultConfig() Config {
	return Config{
		Mode:         ModeCommon,
		SegmentID:    DefaultSegmentID,
		Queue:        4,
		CreditQueue:  5,
		MaxPosted:    256,
		SlotSize:     128 << 10,
		Slots:        4,
		SendBuffers:  2,
		MemoryBudget: 256 << 20,
		RunSize:      32 << 20,
		MergeFanIn:   16,
		SpillDir:     os.TempDir(),
		IOBufferSize: 256 << 10,
		MaxPairSize:  64 << 20,
		Schedule:     Diagonal,
	}
}

// LocalConfig returns settings for tests and many ranks in one process:
// 16 KiB frames, 2 ring slots, an 8 MiB budget with 1 MiB runs, no
// spilling.
func LocalConfig() Config {
	c := DefaultConfig()
	c.SlotSize = 16 << 10
	c.Slots = 2
	c.MemoryBudget = 8 << 20
	c.RunSize = 1 << 20
	c.MergeFanIn = 8
	c.SpillDir = ""
	c.IOBufferSize = 16 << 10
	c.MaxPairSize = 4 << 20
	return c
}

// Limits checked by Validate.
const (
	minSlotSize = 256
	maxSlotSize = 16 << 20
	maxSlots    = 1024
	maxRunSize  = 1 << 30
	maxPair     = 1 << 30
)

func cfgErr(field string, value any, format string, args ...any) error {
	return &ConfigError{Field: field, Value: fmt.Sprint(value), Reason: fmt.Sprintf(format, args...)}
}

// Validate checks the configuration without changing it. Rank sets are
// checked against the runtime's size by New.
func (c *Config) Validate() error {
	switch {
	case c.Mode != ModeCommon && c.Mode != ModeMapReduce:
		return cfgErr("Mode", c.Mode, "use ModeCommon or ModeMapReduce")
	case c.Mode == ModeCommon && (c.ORanks != nil || c.ARanks != nil):
		return cfgErr("ORanks/ARanks", fmt.Sprint(c.ORanks, c.ARanks), "ModeCommon uses every rank as both O and A; leave them nil or use ModeMapReduce")
	case c.ORanks != nil && len(c.ORanks) == 0:
		return cfgErr("ORanks", "[]", "an empty O communicator sends nothing; use nil for all ranks")
	case c.ARanks != nil && len(c.ARanks) == 0:
		return cfgErr("ARanks", "[]", "an empty A communicator has no partition; use nil for all ranks")
	case c.Queue == c.CreditQueue:
		return cfgErr("CreditQueue", c.CreditQueue, "must differ from Queue (%d)", c.Queue)
	case c.Queue < 0 || c.CreditQueue < 0:
		return cfgErr("Queue", fmt.Sprint(c.Queue, c.CreditQueue), "queues are numbered from 0")
	case c.MaxPosted < 2:
		return cfgErr("MaxPosted", c.MaxPosted, "want at least 2 (and at most pgas Config.QueueDepth)")
	case c.SlotSize < minSlotSize || c.SlotSize > maxSlotSize:
		return cfgErr("SlotSize", c.SlotSize, "want %d..%d bytes", minSlotSize, maxSlotSize)
	case c.Slots < 1 || c.Slots > maxSlots:
		return cfgErr("Slots", c.Slots, "want 1..%d frames per sender", maxSlots)
	case c.SendBuffers < 2 || c.SendBuffers > maxSlots:
		return cfgErr("SendBuffers", c.SendBuffers, "want 2..%d: one filling while another is in flight", maxSlots)
	case c.MemoryBudget < 16*int64(c.SlotSize):
		return cfgErr("MemoryBudget", c.MemoryBudget, "want at least 16*SlotSize = %d bytes: a frame of tiny pairs costs up to 9x its size with the sort index", 16*int64(c.SlotSize))
	case c.RunSize < int64(c.SlotSize) || c.RunSize > c.MemoryBudget/2 || c.RunSize > maxRunSize:
		return cfgErr("RunSize", c.RunSize, "want SlotSize (%d) .. min(MemoryBudget/2 = %d, %d)", c.SlotSize, c.MemoryBudget/2, maxRunSize)
	case c.MergeFanIn < 2 || c.MergeFanIn > 4096:
		return cfgErr("MergeFanIn", c.MergeFanIn, "want 2..4096 runs per merge")
	case c.IOBufferSize < 4096 || c.IOBufferSize > 64<<20:
		return cfgErr("IOBufferSize", c.IOBufferSize, "want 4 KiB .. 64 MiB")
	case c.MaxPairSize < 16 || c.MaxPairSize > maxPair:
		return cfgErr("MaxPairSize", c.MaxPairSize, "want 16 .. %d bytes", maxPair)
	case c.Schedule != Diagonal && c.Schedule != Naive:
		return cfgErr("Schedule", c.Schedule, "use Diagonal or Naive")
	}
	if err := checkRankSet("ORanks", c.ORanks); err != nil {
		return err
	}
	return checkRankSet("ARanks", c.ARanks)
}

func checkRankSet(field string, rs []int) error {
	seen := make(map[int]bool, len(rs))
	for _, r := range rs {
		if r < 0 {
			return cfgErr(field, rs, "rank %d is negative", r)
		}
		if seen[r] {
			return cfgErr(field, rs, "rank %d appears twice", r)
		}
		seen[r] = true
	}
	return nil
}

// resolveRanks returns the rank set, defaulting to all n ranks, and checks
// it against the job size.
func resolveRanks(field string, rs []int, n int) ([]int, error) {
	if rs == nil {
		all := make([]int, n)
		for i := range all {
			all[i] = i
		}
		return all, nil
	}
	for _, r := range rs {
		if r >= n {
			return nil, cfgErr(field, rs, "rank %d outside the job's 0..%d", r, n-1)
		}
	}
	return slices.Clone(rs), nil
}
