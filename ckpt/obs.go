package ckpt

import (
	"log/slog"
	"time"

	"github.com/gaspigo/gaspigo/obs"
	"github.com/gaspigo/gaspigo/pgas"
)

// failureLevel is the level of a push or rebuild that failed with err:
// info when a rank failed (the recovery that follows deals with it, and
// the failure is reported once elsewhere), warn otherwise.
func failureLevel(err error) slog.Level {
	if pgas.NeedsRecovery(err) {
		return slog.LevelInfo
	}
	return slog.LevelWarn
}

// phase begins a checkpoint phase (start, commit) of checkpoint id; the
// function it returns records its duration and its trace span.
func phase(name string, id uint64) func() {
	sp := obs.Begin("checkpoint", "checkpoint "+name)
	t0 := time.Now()
	return func() {
		obs.CheckpointPhase.With(name).Histogram.ObserveSince(t0)
		sp.End("id", id)
	}
}

// notePush records a mirror push (a rebuild unless push) of checkpoint id
// that began at t0 and copied n bytes.
func notePush(push bool, id uint64, t0 time.Time, n uint64) {
	kind := "rebuild"
	if push {
		kind = "push"
	}
	obs.CheckpointBytes.Add(n)
	obs.CheckpointPhase.With(kind).Histogram.ObserveSince(t0)
	obs.Record("checkpoint", "mirror "+kind, t0, "id", id, "bytes", n)
}

// restoreSpan begins a restore; the function it returns records its span.
func restoreSpan() func(id uint64, err error) {
	sp := obs.Begin("recovery", "checkpoint restore")
	return func(id uint64, err error) {
		if err != nil {
			sp.End("err", err)
			return
		}
		sp.End("id", id)
	}
}
