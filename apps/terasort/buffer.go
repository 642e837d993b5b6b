package terasort

import "sync"

// hugeThreshold is the size from which AllocBuffer maps memory and asks for
// transparent huge pages; smaller buffers come from the Go heap.
const hugeThreshold = 4 << 20

// hugePageSize is the alignment of mapped buffers: the size of an x86-64
// (and arm64 4K-granule) transparent huge page.
const hugePageSize = 2 << 20

// Buffer is a large byte buffer, mapped outside the Go heap with
// MADV_HUGEPAGE when huge pages were asked for (Linux), so that random
// access across it costs fewer TLB misses. Close releases it; Close is
// idempotent, and the bytes must not be used after it.
type Buffer struct {
	b      []byte
	mu     sync.Mutex
	unmap  func() error // nil for heap memory
	closed bool
	huge   bool
}

// Bytes returns the buffer (len = the size asked for).
func (b *Buffer) Bytes() []byte { return b.b }

// Huge reports whether the buffer was mapped and advised to use
// transparent huge pages (the kernel may still decline).
func (b *Buffer) Huge() bool { return b.huge }

// Close releases the memory. It is idempotent and safe to call
// concurrently; it always returns nil for heap memory.
func (b *Buffer) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	b.b = nil
	if b.unmap != nil {
		return b.unmap()
	}
	return nil
}

// AllocBuffer returns a zeroed buffer of size bytes. With huge set, on
// Linux, buffers of at least 4 MiB are mapped anonymously, aligned to 2 MiB
// and advised with MADV_HUGEPAGE (the kernel's transparent_hugepage setting
// "madvise" or "always" honours it); otherwise, or if mapping fails, the
// memory comes from the Go heap.
func AllocBuffer(size int, huge bool) (*Buffer, error) {
	if size < 0 {
		return nil, configErr("buffer size %d is negative", size)
	}
	if huge && size >= hugeThreshold {
		if b, ok := mapHuge(size); ok {
			return b, nil
		}
	}
	return &Buffer{b: make([]byte, size)}, nil
}
