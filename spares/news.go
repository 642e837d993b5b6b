package spares

import (
	"fmt"
	"slices"

	"github.com/gaspigo/gaspigo/spares/internal/follow"
)

// news is the version of a process's state and the recent changes that
// led to it, which the process passes on to its children in the tree.
//
// The version is the Raft index of the last command that changed the
// state (0: the initial state). Indexes are those of one committed log, so
// two processes at the same version hold the same state, a higher version
// is a newer state, and a process at version v that applies, in order,
// every change with a higher index reaches the sender's state: state.apply
// is deterministic. A child whose version is older than the oldest change
// kept gets the whole state instead.
type news struct {
	version uint64
	base    uint64 // entries hold every change with an index in (base, version]
	entries []newsEntry

	encoded   []byte // the encoded state at encodedAt, made on demand
	encodedAt uint64
}

type newsEntry struct {
	Index  uint64
	Data   []byte // the encoded command
	Result result // what it did here (for a proposer whose entry Raft replays)
}

// maxNews bounds the changes a process keeps to pass on.
const maxNews = 256

func (n *news) add(index uint64, data []byte, res result) {
	n.entries = append(n.entries, newsEntry{Index: index, Data: slices.Clone(data), Result: res})
	if len(n.entries) > maxNews {
		n.base = n.entries[0].Index
		n.entries = slices.Delete(n.entries, 0, 1)
	}
	n.version = index
}

func (n *news) reset(version uint64) {
	n.version, n.base, n.entries = version, version, nil
}

func (n *news) result(index uint64) (result, bool) {
	i, ok := slices.BinarySearchFunc(n.entries, index, func(e newsEntry, x uint64) int {
		switch {
		case e.Index < x:
			return -1
		case e.Index > x:
			return 1
		}
		return 0
	})
	if !ok {
		return result{}, false
	}
	return n.entries[i].Result, true
}

// since returns the changes after have, false when some were dropped.
func (n *news) since(have uint64) ([]follow.Entry, bool) {
	if have < n.base {
		return nil, false
	}
	i := 0
	for i < len(n.entries) && n.entries[i].Index <= have {
		i++
	}
	var out []follow.Entry
	for _, e := range n.entries[i:] {
		out = append(out, follow.Entry{Index: e.Index, Data: e.Data})
	}
	return out, true
}

// update is what a parent sends a child (follow.Update).
type update = follow.Update

// newsFor returns what a child at version have needs, and the channel
// closed at the next change. full asks for the whole state.
func (f *fsm) newsFor(have uint64, full bool) (update, <-chan struct{}, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	u := update{Version: f.news.version}
	if u.Version <= have && !full {
		return u, f.changed, nil
	}
	if !full {
		if e, ok := f.news.since(have); ok {
			u.Entries = e
			return u, f.changed, nil
		}
	}
	if f.news.encoded == nil || f.news.encodedAt != u.Version {
		b, err := encodeState(&f.st)
		if err != nil {
			return update{}, nil, err
		}
		f.news.encoded, f.news.encodedAt = b, u.Version
	}
	u.State = f.news.encoded
	return u, f.changed, nil
}

// version returns the version of the applied state.
func (f *fsm) version() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.news.version
}

// applyUpdate applies what a parent sent: a whole state newer than this
// one replaces it; changes with an index above this state's version are
// applied in order. An error means the update does not fit this state
// (the caller asks for the whole state next).
func (f *fsm) applyUpdate(u update) error {
	var applied []command
	var results []result
	f.mu.Lock()
	changed := false
	if u.State != nil && u.Version > f.news.version {
		st, err := decodeState(u.State)
		if err != nil {
			f.mu.Unlock()
			return err
		}
		f.st = st
		f.news.reset(u.Version)
		changed = true
	}
	for _, e := range u.Entries {
		if e.Index <= f.news.version {
			continue
		}
		cmd, err := decodeCommand(e.Data)
		if err == nil {
			var res result
			res, err = f.st.apply(cmd)
			if err == nil && res.Changed {
				f.news.add(e.Index, e.Data, res)
				applied, results = append(applied, cmd), append(results, res)
				changed = true
				continue
			}
			if err == nil {
				err = fmt.Errorf("%w: change at index %d was a no-op here: %s", errProtocol, e.Index, res.Note)
			}
		}
		if changed {
			f.publishLocked()
		}
		f.mu.Unlock()
		return fmt.Errorf("spares: news at index %d does not apply to the state at %d: %w", e.Index, f.version(), err)
	}
	if changed {
		f.publishLocked()
	}
	f.mu.Unlock()
	for i, cmd := range applied {
		f.recordChange(cmd, results[i])
	}
	if changed && f.onChange != nil {
		f.onChange()
	}
	return nil
}
