package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/gaspigo/gaspigo/job"
	"github.com/gaspigo/gaspigo/spares"
)

// becameLeader is the membership's Info record when this process wins a
// Raft election.
const becameLeader = "spares: became raft leader"

// logging sets up the runtime's logger. By default the runtime logs to
// stderr by itself. With a result directory the log also goes to
// DIR/log.<proc> (it outlives gaspirun's output), with the same levels as
// the runtime's default logger: PGAS_LOG (default info), and at least Warn
// for the tcp and membership layers. With leader, a "leader" line is
// printed whenever this process becomes the Raft leader.
func (f files) logging(opts *job.Options, leader bool) error {
	if f.dir == "" {
		if leader {
			opts.Membership = func(c *spares.Config) {
				base := c.Logger
				if base == nil {
					base = slog.Default()
				}
				c.Logger = slog.New(&tap{outs: []slog.Handler{base.Handler()}, min: slog.LevelDebug, floor: slog.LevelDebug, proc: f.proc, leader: true})
			}
		}
		return nil
	}
	file, err := os.OpenFile(filepath.Join(f.dir, "log."+f.proc), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	// The file stays open until the process exits.
	level := slog.LevelInfo
	if s := os.Getenv("PGAS_LOG"); s != "" {
		var l slog.Level
		if l.UnmarshalText([]byte(s)) == nil {
			level = l
		}
	}
	ho := &slog.HandlerOptions{Level: slog.LevelDebug}
	opts.Logger = slog.New(&tap{
		outs:   []slog.Handler{slog.NewTextHandler(os.Stderr, ho), slog.NewTextHandler(file, ho)},
		min:    level,
		floor:  slog.LevelDebug,
		proc:   f.proc,
		leader: leader,
	})
	return nil
}

// tap forwards records at or above max(min, floor) to every handler in
// outs, and prints a "leader" line for the membership's becameLeader
// record (an Info record that the floor may drop). The floor rises to Warn
// under a "layer" attribute of tcp or membership, as in the runtime's
// default logger.
type tap struct {
	outs   []slog.Handler
	min    slog.Level // the level asked for (PGAS_LOG)
	floor  slog.Level // the layer's own minimum
	proc   string
	leader bool
}

func (h *tap) level() slog.Level { return max(h.min, h.floor) }

func (h *tap) Enabled(_ context.Context, l slog.Level) bool {
	return l >= h.level() || (h.leader && l >= slog.LevelInfo)
}

func (h *tap) Handle(ctx context.Context, r slog.Record) error {
	if h.leader && r.Message == becameLeader {
		epoch := "?"
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "epoch" {
				epoch = a.Value.String()
				return false
			}
			return true
		})
		fmt.Printf("leader proc=%s epoch=%s\n", h.proc, epoch)
	}
	if r.Level < h.level() {
		return nil
	}
	// Every output gets the record even when one fails (stderr is a
	// broken pipe once gaspirun is gone; the file still works).
	var first error
	for _, o := range h.outs {
		if o.Enabled(ctx, r.Level) {
			if err := o.Handle(ctx, r.Clone()); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}

func (h *tap) WithAttrs(as []slog.Attr) slog.Handler {
	n := *h
	n.outs = make([]slog.Handler, len(h.outs))
	for i, o := range h.outs {
		n.outs[i] = o.WithAttrs(as)
	}
	for _, a := range as {
		if a.Key == "layer" && (a.Value.String() == "tcp" || a.Value.String() == "membership") {
			n.floor = max(n.floor, slog.LevelWarn)
		}
	}
	return &n
}

func (h *tap) WithGroup(name string) slog.Handler {
	n := *h
	n.outs = make([]slog.Handler, len(h.outs))
	for i, o := range h.outs {
		n.outs[i] = o.WithGroup(name)
	}
	return &n
}
