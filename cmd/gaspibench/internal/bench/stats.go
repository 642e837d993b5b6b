package bench

import (
	"os"
	"slices"
	"strings"
	"time"
)

// Dist summarises timed samples.
type Dist struct {
	N      int
	Min    time.Duration
	Median time.Duration
	P99    time.Duration
	Mean   time.Duration
}

// Summarize computes a Dist from samples (it sorts a copy). Percentiles
// use the nearest rank: P99 is the smallest sample with at least 99% of
// the samples at or below it.
func Summarize(samples []time.Duration) Dist {
	if len(samples) == 0 {
		return Dist{}
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	var sum time.Duration
	for _, v := range s {
		sum += v
	}
	return Dist{
		N:      len(s),
		Min:    s[0],
		Median: nearestRank(s, 50),
		P99:    nearestRank(s, 99),
		Mean:   sum / time.Duration(len(s)),
	}
}

// nearestRank returns the p-th percentile of sorted s.
func nearestRank(s []time.Duration, p int) time.Duration {
	k := (p*len(s) + 99) / 100 // ceil(p/100 * n)
	return s[max(k, 1)-1]
}

// mibPerSec turns bytes moved in d into MiB/s.
func mibPerSec(bytes int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(bytes) / (1 << 20) / d.Seconds()
}

// loadAvg returns the 1, 5 and 15 minute load averages as the kernel
// prints them, or "n/a" where /proc/loadavg does not exist.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "n/a"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "n/a"
	}
	return strings.Join(f[:3], " ")
}
