//go:build linux

package terasort

import "golang.org/x/sys/unix"

// mapHuge maps size bytes plus one huge page of slack, so the buffer can
// start on a 2 MiB boundary, and advises the kernel to back it with
// transparent huge pages. The advice is best effort.
func mapHuge(size int) (*Buffer, bool) {
	mem, err := unix.Mmap(-1, 0, size+hugePageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		return nil, false
	}
	skip := 0
	if addr := uintptrOf(mem); addr%hugePageSize != 0 {
		skip = int(hugePageSize - addr%hugePageSize)
	}
	b := mem[skip : skip+size : skip+size]
	_ = unix.Madvise(mem[skip:], unix.MADV_HUGEPAGE) // advisory; without it we only lose speed
	return &Buffer{b: b, huge: true, unmap: func() error { return unix.Munmap(mem) }}, true
}
