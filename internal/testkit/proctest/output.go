package proctest

import (
	"os"
	"strings"
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
