package kvshuffle

import (
	"fmt"
	"maps"
	"slices"
)

// markers is an A task's bookkeeping of key-count checkpoints, a pure
// state machine (no I/O, no locking: the aside's mutex guards it, and the
// aside carries out what it returns):
//
//   - per O task (source), the last checkpoint marker it sent and whether
//     its stream is paused there: the drain takes nothing more from a
//     source whose marker for the checkpoint in progress is in, so that
//     when every marker is in the A task holds exactly the pairs sent
//     before the checkpoint;
//   - per checkpoint, the spill files its state names (pinned: kept on
//     disk until Release lets the checkpoint go, or a roll back to an
//     earlier one abandons it).
//
// Tested from the scripts in testdata/markers.
type markers struct {
	last   []uint64 // per source: the last marker
	paused []bool   // per source: stopped at its last marker
	pins   map[uint64][]string
	pinned map[string]map[uint64]bool // file -> the checkpoints pinning it
}

func newMarkers(sources int) *markers {
	m := &markers{pins: map[uint64][]string{}, pinned: map[string]map[uint64]bool{}}
	m.resetStreams(sources)
	return m
}

// resetStreams forgets every source's markers (a roll back starts new
// streams); pins stay.
func (m *markers) resetStreams(sources int) {
	m.last, m.paused = make([]uint64, sources), make([]bool, sources)
}

// arrive records marker c from source si and pauses the source. A marker
// not above the source's last one is an error (a corrupt stream).
func (m *markers) arrive(si int, c uint64) error {
	if c <= m.last[si] {
		return fmt.Errorf("checkpoint marker %d after marker %d", c, m.last[si])
	}
	m.last[si], m.paused[si] = c, true
	return nil
}

// isPaused reports whether the drain must leave source si alone.
func (m *markers) isPaused(si int) bool { return m.paused[si] }

// complete reports whether every source's marker c is in, so checkpoint
// c can be taken. A source already past c means the ranks disagree on
// the sequence of checkpoints: the error names it (late: its index).
func (m *markers) complete(c uint64) (done bool, late int, err error) {
	done = true
	for si, x := range m.last {
		if x > c {
			return false, si, fmt.Errorf("already sent marker %d", x)
		}
		done = done && x == c
	}
	return done, -1, nil
}

// resume lets every source flow again: the checkpoint was taken.
func (m *markers) resume() { clear(m.paused) }

// pin records that checkpoint c's state names file.
func (m *markers) pin(c uint64, file string) {
	if m.pinned[file] == nil {
		m.pinned[file] = map[uint64]bool{}
	}
	if !m.pinned[file][c] {
		m.pinned[file][c] = true
		m.pins[c] = append(m.pins[c], file)
	}
}

// isPinned reports whether some checkpoint names file.
func (m *markers) isPinned(file string) bool { return len(m.pinned[file]) > 0 }

// release drops the pins of every checkpoint for which drop holds (in
// checkpoint order) and returns the files no checkpoint pins any more,
// in that order: the caller removes those that are not live data.
func (m *markers) release(drop func(c uint64) bool) []string {
	var freed []string
	for _, c := range slices.Sorted(maps.Keys(m.pins)) {
		if !drop(c) {
			continue
		}
		for _, f := range m.pins[c] {
			delete(m.pinned[f], c)
			if len(m.pinned[f]) == 0 {
				delete(m.pinned, f)
				freed = append(freed, f)
			}
		}
		delete(m.pins, c)
	}
	return freed
}
