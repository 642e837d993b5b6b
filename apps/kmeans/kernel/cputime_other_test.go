//go:build !linux

package kernel

import "time"

func cpuTime(self bool) (time.Duration, bool) { return 0, false }
