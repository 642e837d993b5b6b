//go:build !linux

package terasort

// mapHuge is Linux-only; elsewhere buffers come from the Go heap.
func mapHuge(size int) (*Buffer, bool) { return nil, false }
