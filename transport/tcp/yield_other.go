//go:build !linux

package tcp

// osYield does nothing where sched_yield has no portable system call; the
// spinning reader still yields to this process's goroutines.
func osYield() {}
