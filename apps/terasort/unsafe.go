package terasort

import "unsafe"

// uintptrOf returns the address of b's first byte (0 for an empty slice).
func uintptrOf(b []byte) uintptr {
	if len(b) == 0 {
		return 0
	}
	return uintptr(unsafe.Pointer(&b[0]))
}

// overlap reports whether a and b share memory.
func overlap(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	pa, pb := uintptrOf(a), uintptrOf(b)
	return pa < pb+uintptr(len(b)) && pb < pa+uintptr(len(a))
}

// entriesOf views b (8-byte aligned, a multiple of 16 bytes) as entries.
func entriesOf(b []byte) []entry {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*entry)(unsafe.Pointer(&b[0])), len(b)/int(unsafe.Sizeof(entry{})))
}
