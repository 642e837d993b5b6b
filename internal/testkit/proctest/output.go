package proctest

import (
	"os"
	"strconv"
	"strings"
	"time"
)

// LoadAvg returns the 1-, 5- and 15-minute load averages ("?" when
// /proc/loadavg cannot be read): the machines these run on are shared.
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// SettleLoad waits up to d for the 1-minute load average to fall below
// 1.5 (a previous job's processes weigh on it for minutes); a benchmark
// prints the load each figure started at either way.
func SettleLoad(d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(5 * time.Second) {
		f := strings.Fields(LoadAvg())
		if len(f) > 0 {
			if l, err := strconv.ParseFloat(f[0], 64); err == nil && l < 1.5 {
				return
			}
		}
	}
}
