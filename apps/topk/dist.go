package topk

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"os"
	"path/filepath"

	"github.com/gaspigo/gaspigo/apps/internal/kvjob"
	"github.com/gaspigo/gaspigo/kvshuffle"
	"github.com/gaspigo/gaspigo/pgas"
)

// Config is one rank's settings of Run; every rank passes the same
// (Kill aside).
type Config struct {
	Gen     Gen // Rank is set by Run
	Windows kvshuffle.Windows
	Count   int // windows to process
	K       int
	Out     string // the reports' directory
	Check   bool
	Mirrors int
	Shuffle kvshuffle.Config
	Kill    *kvjob.Kill // unit: the rank's stream position
	Stdout  io.Writer
}

// MaxKey is the longest item name the gathered top lists carry.
const MaxKey = 47

// entry is one gathered top item: count, key length, key.
const entry = 8 + 1 + MaxKey

type run struct {
	c    Config
	j    *kvjob.Job
	st   *kvshuffle.Stream
	app  []byte // the current window; 1 once the last report is final
	ref  []string
	new  int // reports this process wrote
	said bool
}

// killSource fires the kill at its position.
type killSource struct {
	kvshuffle.Source
	r *run
}

func (k killSource) Read(ctx context.Context, pos uint64) (kvshuffle.Record, error) {
	if pos == uint64(k.r.c.Kill.At) {
		k.r.c.Kill.Fire(k.r.c.Stdout, k.r.j.RT.Rank(), fmt.Sprintf("at stream position %d, in window %d", pos, k.r.st.Window()))
	}
	return k.Source.Read(ctx, pos)
}

// Run is one rank's part of the job (see the package doc).
func Run(ctx context.Context, rt *pgas.Runtime, c Config) error {
	if c.Stdout == nil {
		c.Stdout = io.Discard
	}
	if err := c.Kill.Check(rt.Size()); err != nil {
		return err
	}
	if err := os.MkdirAll(c.Out, 0o700); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	r := &run{c: c, app: make([]byte, 16)}
	c.Gen.Rank = rt.Rank()
	var src kvshuffle.Source = c.Gen
	if c.Kill.Armed(rt) {
		src = killSource{Source: c.Gen, r: r}
	}
	sh := c.Shuffle
	sh.Mode = kvshuffle.ModeCommon
	sh.Combine = kvjob.SumCombine
	stream := func(sh *kvshuffle.Shuffle) error {
		if r.st != nil {
			return nil
		}
		var err error
		r.st, err = kvshuffle.NewStream(sh, src, c.Windows)
		return err
	}
	j, err := kvjob.Start(ctx, rt, kvjob.Config{Name: "topk", Shuffle: sh, App: r.app, StateBytes: 8 + int(sh.MemoryBudget) + int(sh.MemoryBudget)/4 + 1<<20,
		Mirrors: c.Mirrors, Out: c.Stdout, Kill: c.Kill,
		RollBack: func(ctx context.Context, sh *kvshuffle.Shuffle, state []byte) error {
			if err := stream(sh); err != nil {
				return err
			}
			return r.st.RollBack(ctx, state)
		}})
	if err != nil {
		return err
	}
	defer j.Close()
	r.j = j
	if err := stream(j.Sh); err != nil {
		return err
	}
	if c.Check && rt.Rank() == 0 {
		r.ref = Reference(rt.Size(), c.Gen, c.Windows, c.Count, c.K)
	}
	if err := r.complete(ctx); err != nil {
		return err
	}
	return j.Finalize(ctx, r.complete)
}

// complete processes windows (recovering on the way) until Count.
func (r *run) complete(ctx context.Context) error {
	save := func(ctx context.Context, state []byte) error {
		binary.LittleEndian.PutUint64(r.app, r.st.Window())
		return r.j.Save(ctx, state)
	}
	for binary.LittleEndian.Uint64(r.app[8:]) == 0 {
		err := r.st.Next(ctx, save, r.reduce)
		if err == nil && r.st.Window() == uint64(r.c.Count) {
			// The last window's report is final once a checkpoint
			// records that it is (a restore of it ends the loop).
			binary.LittleEndian.PutUint64(r.app, r.st.Window())
			binary.LittleEndian.PutUint64(r.app[8:], 1)
			if err = r.j.Checkpoint(ctx, 0); err != nil {
				clear(r.app[8:])
			}
		}
		if err = r.j.Recover(ctx, err); err != nil {
			return err
		}
	}
	if !r.said {
		r.said = true
		r.j.Printf("topk: ranks=%d windows=%d reports_written=%d checkpoints=%d (%.3fs) recoveries=%d\n",
			r.j.RT.Size(), r.c.Count, r.new, r.j.Checkpoints, r.j.CkptTime.Seconds(), r.j.Recoveries)
	}
	return nil
}

// reduce sums window w's counts, gathers every rank's top K and writes
// the report (rank 0).
func (r *run) reduce(ctx context.Context, w uint64, groups iter.Seq2[[]byte, iter.Seq[[]byte]]) error {
	var items []Item
	var records uint64
	for key, vals := range groups {
		n, ok := kvjob.SumCounts(vals)
		if !ok || len(key) > MaxKey {
			return fmt.Errorf("topk: window %d: item %q: a bad count or a name over %d bytes", w, key, MaxKey)
		}
		items = append(items, Item{string(key), n})
		records += n
	}
	top := Top(items, r.c.K)
	buf := make([]byte, 8+r.c.K*entry)
	binary.LittleEndian.PutUint64(buf, records)
	for i, it := range top {
		e := buf[8+i*entry:]
		binary.LittleEndian.PutUint64(e, it.Count)
		e[8] = byte(len(it.Key))
		copy(e[9:], it.Key)
	}
	all, err := pgas.Allgather(ctx, r.j.RT, nil, buf)
	if err != nil {
		return err
	}
	if r.j.RT.Rank() != 0 {
		return nil
	}
	items, records = items[:0], 0
	for p := 0; p < len(all); p += len(buf) {
		records += binary.LittleEndian.Uint64(all[p:])
		for i := range r.c.K {
			e := all[p+8+i*entry:]
			if c := binary.LittleEndian.Uint64(e); c > 0 {
				items = append(items, Item{string(e[9 : 9+int(e[8])]), c})
			}
		}
	}
	line := Report(w, records, Top(items, r.c.K))
	if r.ref != nil && line != r.ref[w] {
		return fmt.Errorf("topk: window %d: the job's report %q differs from the reference %q", w, line, r.ref[w])
	}
	return r.write(w, line)
}

// write puts window w's report in place once: a report already there
// (the window redone after a recovery) must be the same bytes.
func (r *run) write(w uint64, line string) error {
	path := filepath.Join(r.c.Out, fmt.Sprintf("window-%08d", w))
	b := []byte(line + "\n")
	old, err := os.ReadFile(path)
	switch {
	case err == nil && bytes.Equal(old, b):
		return nil
	case err == nil:
		return fmt.Errorf("topk: window %d: the report %q differs from the one written before, %q", w, line, bytes.TrimSpace(old))
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("topk: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("topk: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("topk: %w", err)
	}
	r.new++
	fmt.Fprintln(r.c.Stdout, line)
	if r.ref != nil {
		fmt.Fprintf(r.c.Stdout, "reference: window %d matches\n", w)
	}
	return nil
}
