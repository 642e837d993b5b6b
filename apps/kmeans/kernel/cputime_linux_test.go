//go:build linux

package kernel

import (
	"time"

	"golang.org/x/sys/unix"
)

// threadCPU returns the CPU time consumed by the calling OS thread, or by
// the whole process when self is true. Benchmarks use it so that their
// rates stay meaningful on a loaded machine, where wall time also counts
// time spent waiting for a core.
func cpuTime(self bool) (time.Duration, bool) {
	who := unix.RUSAGE_THREAD
	if self {
		who = unix.RUSAGE_SELF
	}
	var ru unix.Rusage
	if err := unix.Getrusage(who, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
