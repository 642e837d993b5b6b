package spares

import (
	"slices"

	"github.com/gaspigo/gaspigo/spares/internal/tree"
)

// newTree lays out the dissemination tree of st with fan-out k (package
// tree): the live voters are its roots, the other live processes that can
// take requests (CtlAddr set) hang below them.
func newTree(st *state, k int) *tree.Tree {
	var voters, others []uint32
	for _, v := range st.Voters {
		if _, failed := st.Failed[v]; !failed {
			voters = append(voters, v)
		}
	}
	for p, info := range st.Procs {
		if _, failed := st.Failed[p]; failed || info.CtlAddr == "" || slices.Contains(voters, p) {
			continue
		}
		others = append(others, p)
	}
	return tree.New(voters, others, k)
}

// tree returns the dissemination tree of the applied state with fan-out
// k, computed once per version, and the channel closed at the next change.
func (f *fsm) tree(k int) (*tree.Tree, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.treeCache == nil || f.treeAt != f.news.version || f.treeCache.Fanout() != k {
		f.treeCache, f.treeAt = newTree(&f.st, k), f.news.version
	}
	return f.treeCache, f.changed
}
