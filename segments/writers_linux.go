package segments

import (
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A writer's line in a notification area (64 bytes, one per process the
// owner gave the area) says which copies into the owner's segment that
// process has under way:
//
//	offset 0      a count (int32) of the copies Enter admitted and Exit
//	              has not ended: any goroutine, with atomic additions
//	offset 8..63  queueWords words (uint32), one per queue of the
//	              writer: 1 while EnterQueue's copy is under way
//
// A queue's word has one writer, the goroutine holding that queue's
// lock, so it is set and cleared with plain stores instead of the two
// locked additions of the count: about 9 ns less per operation, a
// quarter of an 8-byte write. Plain stores give no store-load order, so
// the writer's "word, then epoch" could be seen as "epoch, then word":
// the owner supplies the order instead (an asymmetric fence). After it
// raised its epoch it calls SyncWriters, a membarrier(2) that makes every
// thread of every registered process pass a full barrier, before it
// reads the lines: a writer whose word was stored before its barrier is
// seen busy, and one whose word came after loads the raised epoch and
// copies nothing. A process uses the queue words only once registered
// for those barriers (MapNotes registers it); otherwise EnterQueue is
// Enter.
const queueWords = (writerLine - 8) / 4

// membarrier(2) commands (linux/membarrier.h).
const (
	membarrierQuery                   = 0
	membarrierGlobalExpedited         = 1 << 1
	membarrierRegisterGlobalExpedited = 1 << 2
)

var fences struct {
	once sync.Once
	ok   bool
}

// asymmetricFences registers this process for the owners' barriers
// (once) and reports whether it is: the kernel has membarrier's global
// expedited command.
func asymmetricFences() bool {
	fences.once.Do(func() {
		cmds, _, errno := unix.Syscall(unix.SYS_MEMBARRIER, membarrierQuery, 0, 0)
		if errno != 0 || cmds&(membarrierGlobalExpedited|membarrierRegisterGlobalExpedited) != membarrierGlobalExpedited|membarrierRegisterGlobalExpedited {
			return
		}
		_, _, errno = unix.Syscall(unix.SYS_MEMBARRIER, membarrierRegisterGlobalExpedited, 0, 0)
		fences.ok = errno == 0
	})
	return fences.ok
}

// PrepareWriter registers this process for the owners' barriers now:
// the kernel's registration waits for a grace period (about 10 ms),
// which the first MapNotes would otherwise pay in the middle of a
// program's first write.
func PrepareWriter() { asymmetricFences() }

// SyncWriters makes every thread of every process registered for
// asymmetric fences on this host pass a full memory barrier. An owner
// calls it after raising its segments' epochs (Segment.SetEpoch) and
// before it asks Segment.WriterBusy, so that no copy a writer admitted
// with EnterQueue escapes it. Where the kernel lacks the command no
// writer registered either (same host, same kernel), and it does
// nothing.
func SyncWriters() error {
	if !asymmetricFences() {
		return nil
	}
	if _, _, errno := unix.Syscall(unix.SYS_MEMBARRIER, membarrierGlobalExpedited, 0, 0); errno != 0 {
		return errno
	}
	return nil
}

// writerAt is a writer's line (see above).
type writerAt struct{ p unsafe.Pointer }

func lineOf(mem []byte, n, w int) writerAt {
	return writerAt{unsafe.Pointer(&mem[writersAt(n)+writerLine*w])}
}

func (l writerAt) count() *atomic.Int32 { return (*atomic.Int32)(l.p) }

func (l writerAt) word(q int) *uint32 { return (*uint32)(unsafe.Add(l.p, 8+4*q)) }

// busy reports whether the line shows a copy under way.
func (l writerAt) busy() bool {
	if l.count().Load() != 0 {
		return true
	}
	for q := range queueWords {
		if atomic.LoadUint32(l.word(q)) != 0 {
			return true
		}
	}
	return false
}

// EnterQueue is Enter for a caller that holds the lock of its queue q
// (0 and up), so that no other goroutine of this process enters for q
// meanwhile; it ends with ExitQueue(q), under the same lock.
func (p *PeerNotes) EnterQueue(q int, e uint32) bool {
	if !p.fast || q >= queueWords {
		return p.Enter(e)
	}
	w := p.line.word(q)
	*w = 1 // plain: the owner's SyncWriters orders it before the loads below
	if p.epoch.Load() > e || stateOf(p.mem).Load()&retiredBit != 0 {
		*w = 0
		return false
	}
	return true
}

// ExitQueue ends a copy that EnterQueue(q) admitted.
func (p *PeerNotes) ExitQueue(q int) {
	if !p.fast || q >= queueWords {
		p.Exit()
		return
	}
	if runtime.GOARCH == "amd64" {
		*p.line.word(q) = 0 // stores are seen in program order: after the copy
	} else {
		atomic.StoreUint32(p.line.word(q), 0) // a release: the copy is seen first
	}
}
