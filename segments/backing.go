package segments

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Backing provides segment memory. Alloc returns size bytes, page-aligned;
// Free releases what Alloc returned.
type Backing interface {
	Alloc(size int) ([]byte, error)
	Free(mem []byte) error
}

// HugePageThreshold is the size from which anonymous segments ask the kernel
// for transparent huge pages.
const HugePageThreshold = 4 << 20

// AnonBacking maps private anonymous memory: page-aligned and zeroed.
type AnonBacking struct{}

// Alloc maps size bytes of anonymous memory.
func (AnonBacking) Alloc(size int) ([]byte, error) {
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		return nil, fmt.Errorf("segments: mmap %d bytes: %w", size, err)
	}
	if size >= HugePageThreshold {
		_ = unix.Madvise(mem, unix.MADV_HUGEPAGE) // advisory; absence is fine
	}
	return mem, nil
}

// Free unmaps memory returned by Alloc.
func (AnonBacking) Free(mem []byte) error { return unix.Munmap(mem) }

// FileBacking maps a file shared, so that other processes on the same host
// can map the same segment (for example under /dev/shm). The file is created
// or truncated to size.
type FileBacking struct {
	Path string
}

// Alloc creates the file and maps it shared.
func (b FileBacking) Alloc(size int) ([]byte, error) {
	f, err := os.OpenFile(b.Path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("segments: open backing file: %w", err)
	}
	defer f.Close()
	if err := f.Truncate(int64(size)); err != nil {
		return nil, fmt.Errorf("segments: size backing file %s: %w", b.Path, err)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("segments: mmap %s: %w", b.Path, err)
	}
	return mem, nil
}

// Free unmaps the file; the file itself stays until its owner removes it.
func (b FileBacking) Free(mem []byte) error { return unix.Munmap(mem) }
