package spares

import (
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"github.com/hashicorp/raft"

	"github.com/gaspigo/gaspigo/obs"
	"github.com/gaspigo/gaspigo/spares/internal/tree"
)

// fsm is the raft.FSM over state. Raft calls Apply, Snapshot and Restore
// from its own FSM goroutine; readers take a clone under mu. Watchers are
// fed without blocking (latest value wins), so a slow reader never stalls
// the log.
type fsm struct {
	log      *slog.Logger
	onChange func() // called after a change, outside mu; must not block

	mu       sync.Mutex
	st       state
	changed  chan struct{} // closed and replaced on every change
	watchers []chan state
	closed   bool
	news     news // the version of st and the changes that led to it

	treeCache *tree.Tree // the tree of st at version treeAt (see tree)
	treeAt    uint64
}

var _ raft.FSM = (*fsm)(nil)

// applyResponse is what FSM.Apply returns to raft's ApplyFuture.
type applyResponse struct {
	Result result
	Err    error
}

func newFSM(initial state, log *slog.Logger) *fsm {
	return &fsm{st: initial, changed: make(chan struct{}), log: log}
}

// Apply decodes and applies one committed command. Rejections are part of
// the deterministic outcome and go back to the proposer, never panic.
func (f *fsm) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	cmd, err := decodeCommand(l.Data)
	if err != nil {
		f.log.Warn("spares: undecodable log entry skipped", "index", l.Index, "err", err)
		return applyResponse{Err: err}
	}
	f.mu.Lock()
	if l.Index <= f.news.version {
		// A process promoted from client to voter got this change
		// through the tree before Raft replayed it (see news).
		res, ok := f.news.result(l.Index)
		if !ok {
			res = noop(&f.st, "applied before (index %d, state at %d)", l.Index, f.news.version)
		}
		f.mu.Unlock()
		return applyResponse{Result: res}
	}
	res, err := f.st.apply(cmd)
	if err == nil && res.Changed {
		f.news.add(l.Index, l.Data, res)
		f.publishLocked()
	}
	f.mu.Unlock()
	if err != nil {
		return applyResponse{Err: err}
	}
	if res.Changed {
		f.recordChange(cmd, res)
		if f.onChange != nil {
			f.onChange()
		}
	}
	return applyResponse{Result: res}
}

// recordChange logs a change this process applied and counts it.
func (f *fsm) recordChange(cmd command, res result) {
	attrs := []any{"epoch", res.Epoch, "status", res.Status.String(), "note", res.Note}
	switch c := cmd.(type) {
	case declareFailed:
		attrs = append(attrs, "failed_proc", c.Proc, "reporter", c.Reporter)
		if res.Rank >= 0 {
			attrs = append(attrs, "rank", res.Rank)
		}
		if res.Promoted != noProc {
			attrs = append(attrs, "promoted", res.Promoted)
		}
		f.log.Info("spares: failure committed", attrs...)
	case addSpare:
		obs.SparesJoined.Inc()
		if res.Rank >= 0 {
			f.log.Info("spares: joiner took an awaiting rank", append(attrs, "proc", c.Proc, "rank", res.Rank)...)
		} else {
			f.log.Info("spares: spare added", append(attrs, "proc", c.Proc)...)
		}
	case endWait:
		f.log.Info("spares: no joiner came for a rank", append(attrs, "rank", c.Rank, "since", c.Since)...)
	case setVoters:
		f.log.Debug("spares: voters recorded", append(attrs, "voters", c.Voters)...)
	default:
		f.log.Debug("spares: "+cmd.Kind().String()+" committed", attrs...)
	}
}

func (f *fsm) publishLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
	for _, w := range f.watchers {
		select {
		case <-w: // drop the stale value: latest wins
		default:
		}
		w <- f.st.Clone() // cannot block: only this goroutine sends, under mu
	}
}

// ended reports whether the job's status is no longer running (finished
// or failed), without copying the state.
func (f *fsm) ended() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st.Status != statusRunning
}

// view returns a clone of the state and the channel closed on its next change.
func (f *fsm) view() (state, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st.Clone(), f.changed
}

// read runs fn on the applied state and its version under the lock,
// without a copy (a state is O(N): the tree's hot paths must not clone
// it). fn must not block, call back into f or keep st.
func (f *fsm) read(fn func(st *state, version uint64)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(&f.st, f.news.version)
}

func (f *fsm) watch() <-chan state {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := make(chan state, 1)
	if f.closed {
		close(w)
		return w
	}
	w <- f.st.Clone()
	f.watchers = append(f.watchers, w)
	return w
}

// close closes every watcher channel; later watch calls get a closed one.
func (f *fsm) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return
	}
	f.closed = true
	for _, w := range f.watchers {
		close(w)
	}
	f.watchers = nil
}

// Snapshot captures a clone; encoding happens in Persist, off the FSM goroutine.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return &fsmSnapshot{st: f.st.Clone(), version: f.news.version}, nil
}

// Restore replaces the state with a snapshot's.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, maxStateSize+int64(len(snapshotMagic))+9))
	if err != nil {
		return fmt.Errorf("%w: reading: %v", errBadSnapshot, err)
	}
	version, b := splitSnapshot(b)
	st, err := decodeState(b)
	if err != nil {
		return err
	}
	f.mu.Lock()
	if version > 0 && version <= f.news.version {
		// This process already holds a state at least as new (from the
		// tree, before it became a voter): keep it, Raft's later entries
		// follow on from either.
		f.mu.Unlock()
		return nil
	}
	f.st = st
	f.news.reset(version)
	f.publishLocked()
	f.mu.Unlock()
	f.log.Info("spares: state restored from snapshot", "epoch", st.Epoch)
	if f.onChange != nil {
		f.onChange()
	}
	return nil
}

type fsmSnapshot struct {
	st      state
	version uint64
}

// snapshotMagic starts a snapshot that carries the state's version (the
// Raft index of its last change) before the encoded state. An encoded
// state starts with a msgpack array header, never with 0.
var snapshotMagic = [8]byte{0, 's', 'p', 'a', 'r', 'e', 's', 1}

// splitSnapshot returns a snapshot's version (0 for one without) and the
// encoded state.
func splitSnapshot(b []byte) (uint64, []byte) {
	if len(b) >= 16 && [8]byte(b[:8]) == snapshotMagic {
		return binary.BigEndian.Uint64(b[8:16]), b[16:]
	}
	return 0, b
}

func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	b, err := encodeState(&s.st)
	if err == nil {
		var hdr [16]byte
		copy(hdr[:], snapshotMagic[:])
		binary.BigEndian.PutUint64(hdr[8:], s.version)
		_, err = sink.Write(append(hdr[:], b...))
	}
	if err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("spares: persist snapshot: %w", err)
	}
	return sink.Close()
}

func (s *fsmSnapshot) Release() {}
