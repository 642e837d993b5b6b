//go:build linux

package kernel

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// hugeMin is the smallest array worth asking huge pages for: a few of
// them.
const hugeMin = 4 << 20

// hugePages asks the kernel to back the memory of s with huge pages when
// it is first touched (the system's policy allows it only where asked).
// A large array read in order then crosses a page boundary every 2 MiB
// rather than every 4 KiB: the processor's prefetch, which stops at each
// one, keeps up, and the address translations stay cached. It must run
// before s is written; errors are ignored (the pages stay small).
func hugePages[T any](s []T) {
	if len(s) == 0 {
		return
	}
	n := uintptr(len(s)) * unsafe.Sizeof(s[0])
	if n < hugeMin {
		return
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), n)
	p := uintptr(unsafe.Pointer(&b[0]))
	const huge = 2 << 20
	lo := (p+huge-1)&^(huge-1) - p // the whole huge pages inside s
	hi := (p+n)&^(huge-1) - p
	if hi <= lo {
		return
	}
	_ = unix.Madvise(b[lo:hi], unix.MADV_HUGEPAGE)
}

// NewPoints returns a zeroed array for n points of dimension d, backed by
// huge pages where the system allows it (hugePages): a Kernel reads its
// points in order every Step.
func NewPoints(n, d int) []float64 {
	p := make([]float64, n*d)
	hugePages(p)
	return p
}
