package ckpt

import (
	"fmt"
	"log/slog"

	"github.com/gaspigo/gaspigo/pgas"
	"github.com/gaspigo/gaspigo/segments"
)

// Config configures a Checkpointer. Every rank must use the same values
// (except Logger): slot sizes and segment IDs are derived from them.
type Config struct {
	// Mirrors (k) is how many other ranks hold a copy of each rank's
	// snapshot: the ring successor for 1, k successors otherwise (on other
	// hosts when the job spans hosts; see Place). A job survives the loss
	// of any k ranks, and of any whole host when k ranks of every host's
	// snapshots live elsewhere. Capped at the number of ranks minus one.
	Mirrors int
	// SegmentID is the first of three segment IDs the checkpointer creates
	// collectively: SegmentID (local snapshots), SegmentID+1 and
	// SegmentID+2 (mirror slots, alternating when placement changes).
	// They must not collide with the program's own segments.
	SegmentID segments.ID
	// MaxBytes is the largest snapshot (sum of registered regions, bytes)
	// a rank may register. Slots are sized from it at New, so every rank
	// holds 2*MaxBytes locally plus 2*MaxBytes per rank it mirrors.
	MaxBytes int64
	// Queue is the pgas queue used for pushes, fetches and rebuilds. It
	// must be used by nothing else: a Wait on a queue covers every
	// operation posted on it.
	Queue pgas.Queue
	// DiskQueue is the pgas queue the disk writer uses to report finished
	// files to rank 0. Distinct from Queue and from the program's queues.
	DiskQueue pgas.Queue
	// Dir, when not empty, turns on the disk level: committed checkpoints
	// are written asynchronously to Dir/ckpt-<id>/rank-<r>.snap plus a
	// manifest. On a multi-host job Dir must be a shared file system. The
	// directories are created 0700 and the files 0600: they hold user data.
	Dir string
	// DiskKeep is how many complete checkpoints the disk level keeps
	// (older ones are deleted). At least 1; 2 lets LoadFromDisk fall back
	// when the newest is damaged.
	DiskKeep int
	// Logger receives checkpoint events (committed, restored, rebuilt,
	// unprotected window). Nil uses the runtime's logger.
	Logger *slog.Logger
}

// DefaultConfig returns one mirror per rank, segments 0xFF00..0xFF02, a
// 16 MiB snapshot limit, queues 7 (pushes) and 6 (disk) of pgas's
// default 8, and no disk level.
func DefaultConfig() Config {
	return Config{
		Mirrors:   1,
		SegmentID: 0xFF00,
		MaxBytes:  16 << 20,
		Queue:     7,
		DiskQueue: 6,
		DiskKeep:  2,
	}
}

// LocalConfig is DefaultConfig with a 1 MiB snapshot limit, for tests and
// small local jobs.
func LocalConfig() Config {
	c := DefaultConfig()
	c.MaxBytes = 1 << 20
	return c
}

// maxMaxBytes caps MaxBytes: a slot must fit a segment (1 TiB).
const maxMaxBytes = 1 << 38

// Validate checks the configuration without changing it.
func (c *Config) Validate() error {
	switch {
	case c.Mirrors < 1:
		return fmt.Errorf("%w: Mirrors is %d, want at least 1 (the ring successor)", ErrConfig, c.Mirrors)
	case c.MaxBytes < 1 || c.MaxBytes > maxMaxBytes:
		return fmt.Errorf("%w: MaxBytes is %d, want 1..%d (the largest snapshot a rank registers)", ErrConfig, c.MaxBytes, int64(maxMaxBytes))
	case int(c.SegmentID) > 0xFFFF-2:
		return fmt.Errorf("%w: SegmentID is %d, want at most %d (three IDs are used)", ErrConfig, c.SegmentID, 0xFFFF-2)
	case c.Queue < 0 || c.DiskQueue < 0:
		return fmt.Errorf("%w: Queue %d and DiskQueue %d must not be negative", ErrConfig, c.Queue, c.DiskQueue)
	case c.Queue == c.DiskQueue:
		return fmt.Errorf("%w: Queue and DiskQueue are both %d; they must differ (a Wait covers a whole queue)", ErrConfig, c.Queue)
	case c.Dir != "" && c.DiskKeep < 1:
		return fmt.Errorf("%w: DiskKeep is %d with Dir %q, want at least 1", ErrConfig, c.DiskKeep, c.Dir)
	}
	return nil
}
