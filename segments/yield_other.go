//go:build !linux

package segments

import "runtime"

// osYield yields to this process's goroutines where sched_yield has no
// portable system call.
func osYield() { runtime.Gosched() }
