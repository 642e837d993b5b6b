package pgas

// Views shared within one process: equal Views are built once (by
// content, or by their rank table's identity for a View applied again).

import (
	"encoding/binary"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"unique"
	"unsafe"
	"weak"
)

// viewKey names a View by its content: a membership that hands equal
// Views to several runtimes of one process (a simulation of thousands of
// ranks, each with its own membership node, or pgastest's one View for
// all) gets one view built for all of them. The content is interned
// (package unique), so equal keys are equal Views, never a hash that
// happens to match; the view holds its key, so the key's canonical copy
// lives while the view does.
type viewKey struct {
	content    unique.Handle[string] // viewContent
	base, size int
}

// viewContent encodes what a view is built from: epoch, rank table,
// failed processes, joined processes, status.
func viewContent(mv View) string {
	b := make([]byte, 0, 32+4*len(mv.Ranks)+4*len(mv.Failed)+16*len(mv.Joined))
	b = binary.LittleEndian.AppendUint64(b, mv.Epoch)
	var flags byte
	if mv.Finished {
		flags |= 1
	}
	if mv.Err != nil {
		flags |= 2
	}
	b = append(b, flags)
	b = binary.AppendUvarint(b, uint64(len(mv.Ranks)))
	for _, p := range mv.Ranks {
		b = binary.LittleEndian.AppendUint32(b, uint32(p))
	}
	b = binary.AppendUvarint(b, uint64(len(mv.Failed)))
	for _, p := range mv.Failed {
		b = binary.LittleEndian.AppendUint32(b, uint32(p))
	}
	b = binary.AppendUvarint(b, uint64(len(mv.Joined)))
	for _, j := range mv.Joined {
		b = binary.LittleEndian.AppendUint32(b, uint32(j.Proc))
		b = binary.AppendUvarint(b, uint64(len(j.Addr)))
		b = append(b, j.Addr...)
		b = binary.AppendUvarint(b, uint64(len(j.Host)))
		b = append(b, j.Host...)
	}
	return string(b)
}

// sharedViews maps a viewKey to the view built from it, while that view
// lives (a cleanup removes the entry when it is collected).
var sharedViews sync.Map // viewKey -> weak.Pointer[view]

// sharedView returns the view of mv for a job that formed with base
// processes, with tables for size process ids, built once per content:
// the runtimes of one process that apply equal Views share it. Views are
// immutable (unexported tables that nothing writes once built), so
// sharing them is sharing values. A View with an error is built for the
// runtime alone: the error is compared by identity, not content.
func sharedView(mv View, base, size int) *view {
	if len(mv.Ranks) == 0 || mv.Err != nil {
		return buildView(mv, base, size)
	}
	if lv := lastView.Load(); lv != nil && lv.base == base && lv.size == size {
		if v := lv.v.Value(); v != nil && sameSource(mv, v.src) {
			return v
		}
	}
	v := internView(mv, base, size)
	lastView.Store(&builtView{v: weak.Make(v), base: base, size: size})
	return v
}

// lastView is the view sharedView returned last: the runtimes of one
// process that apply the same View in turn (a simulation's ranks, each
// told by its own membership node, whose Views share their rank table)
// find it without encoding the View's content, O(N), again.
var lastView atomic.Pointer[builtView]

type builtView struct {
	v          weak.Pointer[view]
	base, size int
}

// sameSource reports whether a and b are the same View: the same rank
// table (one slice: a membership never writes a View's tables once it
// handed the View out), and equal small fields.
func sameSource(a, b View) bool {
	return a.Epoch == b.Epoch && a.Finished == b.Finished && a.Err == nil && b.Err == nil &&
		len(a.Ranks) == len(b.Ranks) && unsafe.SliceData(a.Ranks) == unsafe.SliceData(b.Ranks) &&
		slices.Equal(a.Failed, b.Failed) && slices.Equal(a.Joined, b.Joined)
}

// internView is sharedView by content.
func internView(mv View, base, size int) *view {
	key := viewKey{content: unique.Make(viewContent(mv)), base: base, size: size}
	if w, ok := sharedViews.Load(key); ok {
		if v := w.(weak.Pointer[view]).Value(); v != nil {
			return v
		}
	}
	v := buildView(mv, base, size)
	v.key = key
	w := weak.Make(v)
	if prev, loaded := sharedViews.LoadOrStore(key, w); loaded {
		if pv := prev.(weak.Pointer[view]).Value(); pv != nil {
			return pv
		}
		sharedViews.Store(key, w)
	}
	runtime.AddCleanup(v, func(e sharedEntry) { sharedViews.CompareAndDelete(e.key, e.w) }, sharedEntry{key, w})
	return v
}

type sharedEntry struct {
	key viewKey
	w   weak.Pointer[view]
}
