//go:build !linux

package job

// affinity returns nil: only Linux's CPU list is published; the count
// stands for it elsewhere.
func affinity() []int { return nil }
