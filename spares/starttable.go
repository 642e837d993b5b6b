package spares

import (
	"runtime"
	"slices"
	"sync"
	"weak"
)

// startTable is what a member table (Config.Members) gives every node
// that starts from it: the table itself (a private copy, never written),
// whether it is valid for a job of numRanks ranks, and the parts of the
// first state that come from it. The nodes of one process that start
// from the same table (a simulation of N nodes in one process, each
// given the same []Member) share one startTable, so each pays a
// comparison of the table, O(N) without allocating, rather than
// validating it and building the first state's O(N) tables again; a
// real job's single node holds its copy instead of the caller's slice.
type startTable struct {
	members  []Member // read-only
	numRanks int
	err      error // validateMembers(members, numRanks)

	// The first state's parts, when err is nil. Read-only: initialState
	// copies spares; procs and ranks are values.
	procs  procTable
	ranks  rankTable
	spares []uint32

	mu     sync.Mutex
	voters map[int][]uint32 // chooseVoters by max voters; read-only slices
}

// startKey names a member table by the identity of the caller's slice;
// a hit is then compared element by element, so a table the caller
// changed since is not mistaken for the one it was.
type startKey struct {
	first    *Member
	n        int
	numRanks int
}

// startTables maps a startKey to its table while a node holds it.
var startTables sync.Map // startKey -> weak.Pointer[startTable]

type startEntry struct {
	key startKey
	w   weak.Pointer[startTable]
}

// startOf returns the start table of members for numRanks ranks.
func startOf(members []Member, numRanks int) *startTable {
	if len(members) == 0 {
		return &startTable{numRanks: numRanks, err: validateMembers(members, numRanks)}
	}
	key := startKey{first: &members[0], n: len(members), numRanks: numRanks}
	if w, ok := startTables.Load(key); ok {
		if t := w.(weak.Pointer[startTable]).Value(); t != nil && slices.Equal(t.members, members) {
			return t
		}
	}
	t := newStartTable(slices.Clone(members), numRanks)
	w := weak.Make(t)
	startTables.Store(key, w)
	runtime.AddCleanup(t, func(e startEntry) { startTables.CompareAndDelete(e.key, e.w) }, startEntry{key, w})
	return t
}

func newStartTable(members []Member, numRanks int) *startTable {
	t := &startTable{members: members, numRanks: numRanks, err: validateMembers(members, numRanks)}
	if t.err != nil {
		return t
	}
	procs := make(map[uint32]procInfo, len(members))
	ranks := make([]uint32, 0, numRanks)
	for _, m := range members {
		procs[m.Proc] = m.info()
		if m.Spare {
			t.spares = append(t.spares, m.Proc)
		} else {
			ranks = append(ranks, m.Proc)
		}
	}
	t.procs, t.ranks = newProcTable(procs), newRankTable(ranks)
	return t
}

// votersFor is chooseVoters(members, max), computed once per max.
func (t *startTable) votersFor(max int) []uint32 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if v, ok := t.voters[max]; ok {
		return slices.Clone(v)
	}
	if t.voters == nil {
		t.voters = map[int][]uint32{}
	}
	v := chooseVoters(t.members, max)
	t.voters[max] = v
	return slices.Clone(v)
}
