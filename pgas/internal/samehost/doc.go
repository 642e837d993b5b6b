// Package samehost is the same-host data plane of package pgas: the
// mechanics of doing an operation in a same-host peer's memory instead of
// sending it a frame, and of meeting a group's collectives in a shared
// area (docs/design.md §3, §9.3 and §9.3.1).
//
// It holds what needs no runtime: a segment's view of its peers' memory
// (Seg: where each peer's is, the mappings made on first use, their
// retirement), the memory an operation goes to (Mem, and Target, what a
// queue keeps of its last one), the one answer to "memory or frame?"
// (InMemory, and Put, which decides and does the operation), the copy
// (Copy), and the collective areas with their keys and no-area marks
// (Area, Areas, AreaFits). The layouts of the shared memory are package
// segments' (notification areas, writer lines, collective areas).
//
// Package pgas keeps what is the runtime's: views, peers, frames, queues,
// statistics, and the order of Recover's steps. It tells this package
// what it knows when it asks (State: the peer quiet or down, the queue
// full; the epoch; whether a peer is near), and passes the requests that
// go over the transport as functions or a transport.MemorySharer.
//
// Usage (the short path of a queue; pgas's postMem):
//
//	t := &qu.mem // a Target
//	if t.Seg == nil || t.Seg.Gone() {
//		return false // the general path: look the target up
//	}
//	done, wake, set := samehost.Put(t.Mem, op, state, int(q), epoch)
//	if !done {
//		return false // by frame
//	}
//
// Concurrency: a Seg is safe for concurrent use; Get holds it shared
// until Release, and Unmap takes it exclusively. A Target is its owner's
// (a queue's, under the queue's lock). An Area is used by one collective
// of its group at a time, pinned (Use, Done) against its retirement;
// Areas is safe for concurrent use.
package samehost
