package segments

import (
	"fmt"
	"sync"
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

func newMemfd(size int) (int, error) {
	fd, err := unix.MemfdCreate(memfdName, unix.MFD_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("segments: memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("segments: size memfd to %d bytes: %w", size, err)
	}
	return fd, nil
}

// Alloc creates a memfd of size bytes and maps it shared.
func (b *MemfdBacking) Alloc(size int) ([]byte, error) {
	fd, err := newMemfd(size)
	if err != nil {
		return nil, err
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("segments: mmap memfd: %w", err)
	}
	b.mu.Lock()
	b.fds[addr(mem)] = fd
	b.mu.Unlock()
	return mem, nil
}

// Free unmaps memory returned by Alloc and closes its memfd.
func (b *MemfdBacking) Free(mem []byte) error {
	b.mu.Lock()
	fd, ok := b.fds[addr(mem)]
	delete(b.fds, addr(mem))
	b.mu.Unlock()
	err := unix.Munmap(mem)
	if ok {
		unix.Close(fd)
	}
	return err
}

// Shared describes where another process of the host finds a segment's
// memory: descriptor FD of process PID, whose inode is Ino. The inode lets
// the other process check that the descriptor it took is this memory.
type Shared struct {
	PID, FD int
	Ino     uint64
}

// Shared returns where mem, returned by Alloc, can be found.
func (b *MemfdBacking) Shared(mem []byte) (Shared, error) {
	b.mu.Lock()
	fd, ok := b.fds[addr(mem)]
	b.mu.Unlock()
	if !ok {
		return Shared{}, fmt.Errorf("segments: memory not from this backing: %w", ErrClosed)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return Shared{}, fmt.Errorf("segments: fstat memfd: %w", err)
	}
	return Shared{PID: unix.Getpid(), FD: fd, Ino: st.Ino}, nil
}

// Renew moves mem, returned by Alloc, to a fresh memfd: its contents are
// copied, the fresh memory is mapped at the same address (slices of mem
// stay valid) and the old memfd is closed. A process that still maps the
// old memory changes nothing that this process sees from then on. No one
// may write mem during the call (its stores could be lost).
func (b *MemfdBacking) Renew(mem []byte) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	old, ok := b.fds[addr(mem)]
	if !ok {
		return fmt.Errorf("segments: memory not from this backing: %w", ErrClosed)
	}
	fd, err := newMemfd(len(mem))
	if err != nil {
		return err
	}
	tmp, err := unix.Mmap(fd, 0, len(mem), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		unix.Close(fd)
		return fmt.Errorf("segments: mmap fresh memfd: %w", err)
	}
	copy(tmp, mem)
	unix.Munmap(tmp)
	if _, err := unix.MmapPtr(fd, 0, unsafe.Pointer(&mem[0]), uintptr(len(mem)),
		unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_FIXED); err != nil {
		unix.Close(fd)
		return fmt.Errorf("segments: map fresh memfd over the segment: %w", err)
	}
	b.fds[addr(mem)] = fd
	unix.Close(old)
	return nil
}

// MapShared maps the memory that s describes (another process's segment,
// of size bytes) into this process. It fails when the process cannot take
// the descriptor (no pidfd_getfd, or no permission to trace the process)
// or when the descriptor is not that memory.
func MapShared(s Shared, size int64) ([]byte, error) {
	pfd, err := unix.PidfdOpen(s.PID, 0)
	if err != nil {
		return nil, fmt.Errorf("segments: pidfd_open %d: %w", s.PID, err)
	}
	defer unix.Close(pfd)
	fd, err := unix.PidfdGetfd(pfd, s.FD, 0)
	if err != nil {
		return nil, fmt.Errorf("segments: pidfd_getfd %d of process %d: %w", s.FD, s.PID, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("segments: fstat: %w", err)
	}
	if st.Ino != s.Ino || st.Size != size {
		return nil, fmt.Errorf("segments: descriptor %d of process %d is inode %d of %d bytes, want %d of %d", s.FD, s.PID, st.Ino, st.Size, s.Ino, size)
	}
	mem, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("segments: mmap shared segment: %w", err)
	}
	return mem, nil
}

// UnmapShared unmaps what MapShared returned.
func UnmapShared(mem []byte) error { return unix.Munmap(mem) }

func addr(mem []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(mem))) }
