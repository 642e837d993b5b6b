package spares

import (
	"encoding/binary"
	"iter"
	"maps"
	"runtime"
	"slices"
	"sync"
	"unique"
	"weak"
)

// procTable is state.Procs: what the job knows about every process it
// ever had. Its content sits in a read-only base shared by every node of
// the process that holds the same table (procBases), so that a
// simulation of N nodes in one process holds one copy, not N. A
// procTable is thus a value: copying it (state.Clone) copies a pointer,
// and a change (set, for a process that joined: rare) builds another
// base, never writing the shared one, so it is never visible in another
// copy. Equal tables have the same base while both live, so states
// compare with reflect.DeepEqual. Its zero value is an empty table.
type procTable struct {
	base *procBase
}

// procBase is a read-only table of processes, interned by content.
type procBase struct {
	m   map[uint32]procInfo
	key unique.Handle[string] // its interned content (procBases)
	top uint32                // the highest process id in m
}

// procBases maps the interned content of a base to the base built from
// it, while it lives (a cleanup removes the entry when it is collected).
var procBases sync.Map // unique.Handle[string] -> weak.Pointer[procBase]

// newProcTable returns a table of the processes of m, its base shared
// with every other table of the same content in this process. It takes
// m: the caller must not use it after.
func newProcTable(m map[uint32]procInfo) procTable {
	if len(m) == 0 {
		return procTable{}
	}
	key := unique.Make(procContent(m))
	if w, ok := procBases.Load(key); ok {
		if b := w.(weak.Pointer[procBase]).Value(); b != nil {
			return procTable{base: b}
		}
	}
	b := &procBase{m: m, key: key, top: slices.Max(slices.Collect(maps.Keys(m)))}
	w := weak.Make(b)
	if prev, loaded := procBases.LoadOrStore(key, w); loaded {
		if pb := prev.(weak.Pointer[procBase]).Value(); pb != nil {
			return procTable{base: pb}
		}
		procBases.Store(key, w)
	}
	runtime.AddCleanup(b, func(e procBaseEntry) { procBases.CompareAndDelete(e.key, e.w) }, procBaseEntry{key, w})
	return procTable{base: b}
}

type procBaseEntry struct {
	key unique.Handle[string]
	w   weak.Pointer[procBase]
}

// procContent encodes m in process order.
func procContent(m map[uint32]procInfo) string {
	var b []byte
	for _, p := range slices.Sorted(maps.Keys(m)) {
		i := m[p]
		b = binary.LittleEndian.AppendUint32(b, p)
		for _, s := range [...]string{i.Addr, i.Host, i.RaftAddr, i.CtlAddr} {
			b = binary.AppendUvarint(b, uint64(len(s)))
			b = append(b, s...)
		}
	}
	return string(b)
}

// get returns what the table knows of p.
func (t procTable) get(p uint32) (procInfo, bool) {
	if t.base == nil {
		return procInfo{}, false
	}
	i, ok := t.base.m[p]
	return i, ok
}

// has reports whether p is in the table.
func (t procTable) has(p uint32) bool {
	_, ok := t.get(p)
	return ok
}

// info is get without the flag: the zero procInfo for an unknown p.
func (t procTable) info(p uint32) procInfo {
	i, _ := t.get(p)
	return i
}

// top is the highest process id in the table (0 when it is empty).
func (t procTable) top() uint32 {
	if t.base == nil {
		return 0
	}
	return t.base.top
}

// len is the number of processes in the table.
func (t procTable) len() int {
	if t.base == nil {
		return 0
	}
	return len(t.base.m)
}

// all yields every process and what is known of it, in no set order.
func (t procTable) all() iter.Seq2[uint32, procInfo] {
	return func(yield func(uint32, procInfo) bool) {
		if t.base == nil {
			return
		}
		for p, i := range t.base.m {
			if !yield(p, i) {
				return
			}
		}
	}
}

// sorted lists the processes in increasing order.
func (t procTable) sorted() []uint32 {
	out := make([]uint32, 0, t.len())
	for p := range t.all() {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// set records info for p (a process that joined, or a test's table). It
// builds a new base, O(processes): the old one may be shared.
func (t *procTable) set(p uint32, info procInfo) {
	m := make(map[uint32]procInfo, t.len()+1)
	for q, i := range t.all() {
		m[q] = i
	}
	m[p] = info
	*t = newProcTable(m)
}
