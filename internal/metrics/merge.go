package metrics

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/gaspigo/gaspigo/obs"
)

// MergeTraces merges the trace files of a job's processes in dir
// (trace-proc-N.json) into one Chrome trace written to w, one track per
// process, events in time order. It returns how many process files it
// merged; a file that is not a trace is an error naming it.
func MergeTraces(dir string, w io.Writer) (int, error) {
	files, err := filepath.Glob(filepath.Join(dir, "trace-proc-*.json"))
	if err != nil {
		return 0, err
	}
	all := obs.ChromeTrace{DisplayTimeUnit: "ms", TraceEvents: []obs.ChromeEvent{}}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return 0, fmt.Errorf("metrics: merge traces: %w", err)
		}
		var t obs.ChromeTrace
		if err := json.Unmarshal(b, &t); err != nil {
			return 0, fmt.Errorf("metrics: merge traces: %s is not a trace file: %w", f, err)
		}
		all.TraceEvents = append(all.TraceEvents, t.TraceEvents...)
	}
	slices.SortStableFunc(all.TraceEvents, func(a, b obs.ChromeEvent) int {
		am, bm := a.Ph == "M", b.Ph == "M"
		switch {
		case am != bm:
			if am {
				return -1
			}
			return 1
		case a.TS < b.TS:
			return -1
		case a.TS > b.TS:
			return 1
		}
		return 0
	})
	return len(files), json.NewEncoder(w).Encode(all)
}
