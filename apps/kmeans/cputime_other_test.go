//go:build !linux

package kmeans

import "time"

func cpuTime(self bool) (time.Duration, bool) { return 0, false }
