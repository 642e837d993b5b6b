package ckpt

import (
	"fmt"

	"github.com/gaspigo/gaspigo/segments"
)

// Register adds a byte slice to the snapshot. Regions are saved and
// restored in registration order; b is read at Start and written by
// Restore, so it must stay the same slice (same backing array).
func (c *Checkpointer) Register(name string, b []byte) error {
	return c.add(region{name: name, mem: b, n: int64(len(b))})
}

// RegisterVar adds a byte slice of which only a prefix is in use: Start
// saves b[:used()], so a snapshot, its push and its mirror cost what the
// region holds, not len(b); Restore copies the saved prefix back to the
// start of b and leaves the rest of b unchanged (the program records the
// length itself, for example in the prefix). len(b) counts against
// MaxBytes. used must return 0..len(b); it is called by Start only.
func (c *Checkpointer) RegisterVar(name string, b []byte, used func() int) error {
	if used == nil {
		return fmt.Errorf("ckpt: register %q: nil length function: %w", name, ErrInvalid)
	}
	return c.add(region{name: name, mem: b, n: int64(len(b)), used: used})
}

// RegisterSegment adds bytes [off, off+n) of local segment seg to the
// snapshot. The segment is looked up at Start and Restore, so a promoted
// spare registers before it creates the segment only if it creates it
// before Restore.
func (c *Checkpointer) RegisterSegment(name string, seg segments.ID, off, n int64) error {
	if off < 0 || n < 0 {
		return fmt.Errorf("ckpt: register %q: range [%d, %d+%d) is negative: %w", name, off, off, n, ErrInvalid)
	}
	if seg >= c.cfg.SegmentID && seg <= c.cfg.SegmentID+2 {
		return fmt.Errorf("ckpt: register %q: segment %d is the checkpointer's own: %w", name, seg, ErrInvalid)
	}
	return c.add(region{name: name, seg: seg, off: off, n: n, isSeg: true})
}

func (c *Checkpointer) add(r region) error {
	if r.name == "" {
		return fmt.Errorf("ckpt: register: empty region name: %w", ErrInvalid)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed.Load() {
		return ErrClosed
	}
	total := r.n
	for _, x := range c.regions {
		if x.name == r.name {
			return fmt.Errorf("ckpt: register %q: name already registered: %w", r.name, ErrInvalid)
		}
		total += x.n
	}
	if len(c.regions) >= MaxRegions {
		return fmt.Errorf("ckpt: register %q: already %d regions, and a snapshot holds at most %d (whatever their size): register fewer, larger regions: %w", r.name, len(c.regions), MaxRegions, ErrTooLarge)
	}
	if total > c.cfg.MaxBytes {
		return fmt.Errorf("ckpt: register %q: %d bytes registered in all, above MaxBytes %d (raise Config.MaxBytes on every rank): %w", r.name, total, c.cfg.MaxBytes, ErrTooLarge)
	}
	c.regions = append(c.regions, r)
	return nil
}

// resolve returns the memory of a region now.
func (c *Checkpointer) resolve(r region) ([]byte, error) {
	if !r.isSeg {
		return r.mem, nil
	}
	seg, err := c.rt.Segment(r.seg)
	if err != nil {
		return nil, fmt.Errorf("ckpt: region %q: %w: %w", r.name, ErrInvalid, err)
	}
	b, err := seg.Slice(r.off, r.n)
	if err != nil {
		return nil, fmt.Errorf("ckpt: region %q: [%d, %d) of segment %d: %w: %w", r.name, r.off, r.off+r.n, r.seg, ErrInvalid, err)
	}
	return b, nil
}

func regionNames(rs []region) []string {
	names := make([]string, len(rs))
	for i, r := range rs {
		names[i] = r.name
	}
	return names
}
