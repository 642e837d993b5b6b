package benchutil

import (
	"encoding/csv"
	"strconv"
	"strings"
)

// Measurement is one CSV line of gaspibench --csv (see its report.go for
// the columns): the test, the message size, the runtime's figure and the
// plain-TCP baseline's over the same path (0 when it has none). Bandwidth
// is in MiB/s, everything else is a median in microseconds.
type Measurement struct {
	Test      string
	Size      int
	PGAS, Raw float64
}

// ParseMeasurement reads one line of gaspibench --csv output; ok is false
// for the header, comments and anything else that is not a measurement.
func ParseMeasurement(line string) (m Measurement, ok bool) {
	if strings.HasPrefix(line, "#") || strings.HasPrefix(line, "test,") {
		return m, false
	}
	f, err := csv.NewReader(strings.NewReader(line)).Read()
	if err != nil || len(f) < 14 {
		return m, false // a log line
	}
	m.Test = f[0]
	m.Size, _ = strconv.Atoi(f[2])
	num := func(s string) float64 { v, _ := strconv.ParseFloat(s, 64); return v }
	switch f[0] {
	case "write", "read": // pgas_mib_s, raw_mib_s
		m.PGAS, m.Raw = num(f[5]), num(f[6])
	case "write_notify_rtt": // median_us, raw_median_us
		m.PGAS, m.Raw = num(f[9]), num(f[12])
	default: // collectives and write_wait: median_us, no baseline
		m.PGAS = num(f[9])
	}
	return m, true
}
