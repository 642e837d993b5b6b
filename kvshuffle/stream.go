package kvshuffle

import (
	"context"
	"encoding/binary"
	"fmt"
	"iter"
	"time"
)

// Record is one record of a stream Source.
type Record struct {
	Time       time.Time // event time; time windows use it
	Key, Value []byte
}

// Source is one O task's unbounded stream of records. Read returns the
// record at position pos (0, 1, 2, ...; Read may block until it
// exists) and must return the same record for the same pos after a
// restart: that is what lets a recovered Stream read again, from the
// checkpointed position, exactly the records it lost. The slices of a
// Record need only stay valid until the next Read.
type Source interface {
	Read(ctx context.Context, pos uint64) (Record, error)
}

// Windows cuts a Stream into windows. Set Records or Span.
type Windows struct {
	// Records > 0: count windows. Window w is the records
	// [w*Records, (w+1)*Records) of every O task's source.
	Records uint64
	// Span > 0: time windows. Window w is the records whose Time is in
	// [Start+w*Span, Start+(w+1)*Span). A source's times must not go
	// backwards; a record older than the current window (late) is counted
	// in the current window. A window ends on an O task when its source
	// yields a record of a later window.
	Span  time.Duration
	Start time.Time
	// Checkpoints is how many key-count checkpoints each window takes:
	// one at its start and one at each further 1/Checkpoints of it (of
	// its records, or of its span in event time). At least 1.
	Checkpoints int
}

// Validate checks the settings.
func (w Windows) Validate() error {
	switch {
	case (w.Records > 0) == (w.Span > 0):
		return cfgErr("Windows", w, "set one of Records (count windows) and Span (time windows)")
	case w.Checkpoints < 1:
		return cfgErr("Windows.Checkpoints", w.Checkpoints, "want at least 1 checkpoint per window")
	case w.Records > 0 && uint64(w.Checkpoints) > w.Records:
		return cfgErr("Windows.Checkpoints", w.Checkpoints, "want at most Records (%d) checkpoints per window", w.Records)
	}
	return nil
}

// Stream is the Streaming mode of DataMPI over a Shuffle: an unbounded
// source on every O task, pairs flowing continuously, windows that end in
// one result each, and key-count checkpoints inside each window, so that
// a recovered job goes on without losing or counting twice a record.
//
// Each window is one round of the shuffle: the O tasks send the window's
// records as pairs, take the window's checkpoints on the way (every rank
// takes every one, in order: with time windows a rank whose records do
// not reach a checkpoint's time takes it at the window's end), and end
// the round (CloseSend); the A tasks reduce the window's groups. The
// next window starts the next round (a RollBack to nothing). A
// checkpoint's state (Stream.RollBack's input) holds the window, the
// source position and the Shuffle's state: the pairs sent before it.
//
// Exactly once: after a failure, RollBack to the last committed state
// brings back the window's pairs sent before it, and the O tasks read
// their sources again from the position it names. A window's result is
// final once the next window's first checkpoint is committed; until then
// a failure makes the ranks compute it again, from the same records, so
// the sink must be idempotent per window (write window w's result under
// w's name, as cmd/topk does). Deterministic sources are assumed, as for
// every key-count checkpoint.
//
// Stream's calls are collective and must not run concurrently.
type Stream struct {
	sh    *Shuffle
	src   Source
	cfg   Windows
	w     uint64 // current window
	pos   uint64 // next source position
	k     int    // checkpoints window w took
	reset bool   // the last round ended: start a new one
}

// NewStream returns a stream over sh (new, or rolled back to nothing)
// that reads src on O tasks (src may be nil on a rank that is not one).
func NewStream(sh *Shuffle, src Source, cfg Windows) (*Stream, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if sh.IsO() && src == nil {
		return nil, fmt.Errorf("kvshuffle: stream: rank %d is an O task and has no source: %w", sh.Rank(), ErrConfig)
	}
	return &Stream{sh: sh, src: src, cfg: cfg}, nil
}

// Window is the window the stream is in (the next one Next processes).
func (s *Stream) Window() uint64 { return s.w }

// Position is the O task's next source position.
func (s *Stream) Position() uint64 { return s.pos }

// Save stores a checkpoint's state and commits it (package ckpt, with
// the application's own data) before it returns nil. It is called on
// every rank at the same checkpoints.
type Save func(ctx context.Context, state []byte) error

// Reduce receives window w's groups on an A task (see Shuffle.Groups).
type Reduce func(ctx context.Context, w uint64, groups iter.Seq2[[]byte, iter.Seq[[]byte]]) error

// Next processes the rest of the current window: sends its records,
// takes its checkpoints through save (releasing each once save returned),
// ends the round and, on A tasks, calls reduce. It returns nil with the
// stream at the next window. An error leaves the stream to be rolled
// back (RollBack).
func (s *Stream) Next(ctx context.Context, save Save, reduce Reduce) error {
	sh := s.sh
	if s.reset {
		if err := sh.RollBack(ctx, nil); err != nil {
			return err
		}
		s.reset, s.k = false, 0
	}
	if o := sh.o; o != nil {
		for {
			var rec Record
			var end bool
			if s.cfg.Records > 0 {
				end = s.pos >= (s.w+1)*s.cfg.Records
				for !end && s.k < s.cfg.Checkpoints && s.pos >= s.w*s.cfg.Records+uint64(s.k)*s.cfg.Records/uint64(s.cfg.Checkpoints) {
					if err := s.checkpoint(ctx, save); err != nil {
						return err
					}
				}
			} else {
				var err error
				if rec, err = s.src.Read(ctx, s.pos); err != nil {
					return fmt.Errorf("kvshuffle: stream: read position %d: %w", s.pos, err)
				}
				start := s.cfg.Start.Add(time.Duration(s.w) * s.cfg.Span)
				end = !rec.Time.Before(start.Add(s.cfg.Span))
				for s.k < s.cfg.Checkpoints && !rec.Time.Before(start.Add(time.Duration(s.k)*s.cfg.Span/time.Duration(s.cfg.Checkpoints))) {
					if err := s.checkpoint(ctx, save); err != nil {
						return err
					}
				}
			}
			if end {
				break
			}
			if s.cfg.Records > 0 {
				var err error
				if rec, err = s.src.Read(ctx, s.pos); err != nil {
					return fmt.Errorf("kvshuffle: stream: read position %d: %w", s.pos, err)
				}
			}
			if err := sh.Send(ctx, rec.Key, rec.Value); err != nil {
				return err
			}
			s.pos++
		}
	}
	// Every rank takes the window's checkpoints: an A-only rank, or an O
	// task whose window ended early (time windows), takes those left.
	for s.k < s.cfg.Checkpoints {
		if err := s.checkpoint(ctx, save); err != nil {
			return err
		}
	}
	if sh.o != nil {
		if err := sh.CloseSend(ctx); err != nil {
			return err
		}
	}
	if sh.a != nil {
		if err := reduce(ctx, s.w, sh.Groups(ctx)); err != nil {
			return err
		}
		if err := sh.Err(); err != nil {
			return err
		}
	}
	s.w++
	s.reset = true
	return nil
}

// checkpoint takes the window's next checkpoint (c = k+1 within the
// round) and saves it.
func (s *Stream) checkpoint(ctx context.Context, save Save) error {
	c := uint64(s.k + 1)
	if err := s.sh.MarkConsumed(s.pos); err != nil {
		return err
	}
	st, err := s.sh.Checkpoint(ctx, c)
	if err != nil {
		return err
	}
	b := make([]byte, 0, streamHeader+len(st))
	b = append(b, streamMagic...)
	b = binary.LittleEndian.AppendUint64(b, s.w)
	b = binary.LittleEndian.AppendUint64(b, s.pos)
	b = binary.LittleEndian.AppendUint64(b, c)
	if err := save(ctx, append(b, st...)); err != nil {
		return err
	}
	s.sh.Release(c)
	s.k++
	return nil
}

const (
	streamMagic  = "KVSTRM1\x00"
	streamHeader = len(streamMagic) + 24
)

// RollBack brings the stream back to a state a Save received (nil: the
// beginning of the stream). It is collective, like Shuffle.RollBack.
func (s *Stream) RollBack(ctx context.Context, state []byte) error {
	if len(state) == 0 {
		if err := s.sh.RollBack(ctx, nil); err != nil {
			return err
		}
		s.w, s.pos, s.k, s.reset = 0, 0, 0, false
		return nil
	}
	if len(state) < streamHeader || string(state[:len(streamMagic)]) != streamMagic {
		return fmt.Errorf("kvshuffle: stream: roll back: not a stream state (%d bytes): %w", len(state), ErrCorrupt)
	}
	h := state[len(streamMagic):]
	w, pos, c := binary.LittleEndian.Uint64(h), binary.LittleEndian.Uint64(h[8:]), binary.LittleEndian.Uint64(h[16:])
	if c < 1 || c > uint64(s.cfg.Checkpoints) {
		return fmt.Errorf("kvshuffle: stream: roll back: checkpoint %d of a window, want 1..%d: %w", c, s.cfg.Checkpoints, ErrMismatch)
	}
	if err := s.sh.RollBack(ctx, state[streamHeader:]); err != nil {
		return err
	}
	s.w, s.pos, s.k, s.reset = w, pos, int(c), false
	return nil
}
