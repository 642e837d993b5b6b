package segments

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// memfdName is how a segment's memfd shows in /proc/PID/maps
// ("memfd:gaspigo-seg"); it names no file in any file system.
const memfdName = "gaspigo-seg"

// MemfdBacking maps each segment from a memfd of its own, shared, so that
// other processes of the host can map the same memory (Shared gives what
// they need to find it). A memfd has no name in any file system: nothing
// is left in /dev/shm, whatever way the process ends. The zero value is
// not usable: use NewMemfdBacking.
type MemfdBacking struct {
	mu  sync.Mutex
	fds map[uintptr]int // mapping address -> memfd
}

// NewMemfdBacking returns an empty MemfdBacking.
func NewMemfdBacking() *MemfdBacking { return &MemfdBacking{fds: map[uintptr]int{}} }

// Each memfd holds the segment, rounded up to pages, then one page whose
// first word says that the segment no longer uses this memory (Retire):
// a process that maps it (MapShared) looks there before it copies.
func trailerAt(size int) int { return (size + pageSize - 1) / pageSize * pageSize }

func memfdSize(size int) int { return trailerAt(size) + pageSize }

var pageSize = unix.Getpagesize()

// whole is the whole mapping of segment memory mem: the segment, then the
// trailer page.
func whole(mem []byte) []byte { return unsafe.Slice(unsafe.SliceData(mem), memfdSize(len(mem))) }

// retiredWord is the trailer word of the memory mem (segment size bytes,
// mapped with memfdSize(size) bytes).
func retiredWord(mem []byte) *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&whole(mem)[trailerAt(len(mem))]))
}

func newMemfd(size int) (int, error) {
	return newSealedMemfd(memfdName, memfdSize(size))
}

// newSealedMemfd creates a memfd of size bytes that nobody can shrink any
// more (F_SEAL_SHRINK, then F_SEAL_SEAL): a peer given it cannot truncate
// it under its owner's mapping, which would crash the owner with SIGBUS
// at its next access.
func newSealedMemfd(name string, size int) (int, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, fmt.Errorf("segments: memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("segments: size memfd to %d bytes: %w", size, err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_SEAL); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("segments: seal memfd against shrinking: %w", err)
	}
	return fd, nil
}

// checkSealed checks a memfd received from another process before it is
// mapped: it must be size bytes and sealed against shrinking, so that a
// mapping of it can never fault.
func checkSealed(fd, size int) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("fstat: %w", err)
	}
	if st.Size != int64(size) {
		return fmt.Errorf("descriptor of %d bytes, want %d", st.Size, size)
	}
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		return fmt.Errorf("read the seals: %w", err)
	}
	if seals&unix.F_SEAL_SHRINK == 0 {
		return fmt.Errorf("descriptor not sealed against shrinking (seals %#x)", seals)
	}
	return nil
}

// Alloc creates a memfd of size bytes and maps it shared.
func (b *MemfdBacking) Alloc(size int) ([]byte, error) {
	fd, err := newMemfd(size)
	if err != nil {
		return nil, err
	}
	full, err := unix.Mmap(fd, 0, memfdSize(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("segments: mmap memfd: %w", err)
	}
	if size >= HugePageThreshold {
		_ = unix.Madvise(full, unix.MADV_HUGEPAGE) // advisory, as for AnonBacking
	}
	mem := full[:size:size]
	b.mu.Lock()
	b.fds[addr(mem)] = fd
	b.mu.Unlock()
	return mem, nil
}

// Retire tells the processes that map mem (returned by Alloc) that the
// segment no longer uses it: Free and Renew call it first. A copy that a
// process started before it may still land there.
func (b *MemfdBacking) Retire(mem []byte) { retiredWord(mem).Store(1) }

// Free unmaps memory returned by Alloc and closes its memfd.
func (b *MemfdBacking) Free(mem []byte) error {
	b.mu.Lock()
	fd, ok := b.fds[addr(mem)]
	delete(b.fds, addr(mem))
	b.mu.Unlock()
	if ok {
		b.Retire(mem)
	}
	err := unix.Munmap(whole(mem))
	if ok {
		unix.Close(fd)
	}
	return err
}

// Dup returns a new descriptor of mem's memfd (mem returned by Alloc),
// close-on-exec, for passing to another process of the host (over a Unix
// socket: SCM_RIGHTS), which maps it with MapFD. The caller closes it. A
// Renew after Dup leaves the descriptor naming the old memory.
func (b *MemfdBacking) Dup(mem []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	fd, ok := b.fds[addr(mem)]
	if !ok {
		return -1, fmt.Errorf("segments: memory not from this backing: %w", ErrClosed)
	}
	nfd, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("segments: dup memfd: %w", err)
	}
	return nfd, nil
}

// Renew moves mem, returned by Alloc, to a fresh memfd: its contents are
// copied, the fresh memory is mapped at the same address (slices of mem
// stay valid) and the old memfd is closed. A process that still maps the
// old memory changes nothing that this process sees from then on. No one
// may write mem during the call (its stores could be lost); reading it is
// fine (the bytes at each address stay the same).
//
// Only the pages the old memfd holds are copied (a segment is sized for
// its worst case and mostly never touched), with pwrite in bounded
// chunks: the copy runs in system calls, so the rest of the process (its
// garbage collector, and with it every goroutine) never waits for it.
func (b *MemfdBacking) Renew(mem []byte) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	old, ok := b.fds[addr(mem)]
	if !ok {
		return fmt.Errorf("segments: memory not from this backing: %w", ErrClosed)
	}
	b.Retire(mem)
	fd, err := newMemfd(len(mem))
	if err != nil {
		return err
	}
	if err := copyHeld(old, fd, mem); err != nil {
		unix.Close(fd)
		return err
	}
	if _, err := unix.MmapPtr(fd, 0, unsafe.Pointer(&mem[0]), uintptr(memfdSize(len(mem))),
		unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_FIXED); err != nil {
		unix.Close(fd)
		return fmt.Errorf("segments: map fresh memfd over the segment: %w", err)
	}
	b.fds[addr(mem)] = fd
	unix.Close(old)
	return nil
}

// renewChunk bounds one pwrite of Renew's copy.
const renewChunk = 4 << 20

// copyHeld writes into memfd dst the ranges of mem (the mapping of memfd
// src) that src holds pages for, found with SEEK_DATA and SEEK_HOLE;
// the holes stay holes in dst.
func copyHeld(src, dst int, mem []byte) error {
	n := int64(len(mem))
	for off := int64(0); off < n; {
		start, err := unix.Seek(src, off, unix.SEEK_DATA)
		if err == unix.ENXIO {
			return nil // no data from off on
		}
		if err != nil {
			return fmt.Errorf("segments: find the held pages of a segment (SEEK_DATA): %w", err)
		}
		if start >= n {
			return nil
		}
		end, err := unix.Seek(src, start, unix.SEEK_HOLE)
		if err != nil {
			return fmt.Errorf("segments: find the held pages of a segment (SEEK_HOLE): %w", err)
		}
		end = min(end, n)
		for at := start; at < end; {
			k, err := unix.Pwrite(dst, mem[at:min(at+renewChunk, end)], at)
			if err != nil {
				return fmt.Errorf("segments: copy a segment to fresh memory: %w", err)
			}
			at += int64(k)
		}
		off = end
	}
	return nil
}

// Retired reports whether the owner of mem, returned by MapShared, no
// longer uses that memory for its segment (it deleted or moved it).
func Retired(mem []byte) bool {
	return retiredWord(mem).Load() != 0
}

// MapFD maps another process's segment memory of size bytes from fd, a
// descriptor of its memfd (from Dup, received over a Unix socket). It
// fails when fd is not a memfd of that size sealed against shrinking
// (its owner made it so: a mapping of it can never fault). The caller
// still closes fd.
func MapFD(fd int, size int64) ([]byte, error) {
	if size <= 0 || size > MaxSize {
		return nil, fmt.Errorf("segments: a shared segment of %d bytes: %w", size, ErrSize)
	}
	if err := checkSealed(fd, memfdSize(int(size))); err != nil {
		return nil, fmt.Errorf("segments: shared segment of %d bytes: %w", size, err)
	}
	full, err := unix.Mmap(fd, 0, memfdSize(int(size)), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("segments: mmap shared segment: %w", err)
	}
	return full[:size:size], nil
}

// UnmapShared unmaps what MapFD returned.
func UnmapShared(mem []byte) error { return unix.Munmap(whole(mem)) }

func addr(mem []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(mem))) }
