//go:build !linux

package segments

import "runtime"

// osYield yields to this process's goroutines where sched_yield has no
// portable system call. A variable, for the tests.
var osYield = runtime.Gosched
