package metrics

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gaspigo/gaspigo/obs"
)

// MergeTraces merges the trace files of a job's processes in dir
// (trace-proc-N.json) into one Chrome trace written to w, one track per
// process, events in time order. A process that left only its partial
// file (trace-proc-N.partial: it was killed) gets a track too, up to its
// last streamed event, ended by an instant event that says so. It returns
// how many processes it merged; a file that is not a trace is an error
// naming it.
func MergeTraces(dir string, w io.Writer) (int, error) {
	files, err := filepath.Glob(filepath.Join(dir, "trace-proc-*.json"))
	if err != nil {
		return 0, err
	}
	partials, err := filepath.Glob(filepath.Join(dir, "trace-proc-*.partial"))
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
	n := len(files)
	for _, f := range partials {
		if _, err := os.Stat(strings.TrimSuffix(f, ".partial") + ".json"); err == nil {
			continue // the process ended normally after all
		}
		evs, err := readPartial(f)
		if err != nil {
			return 0, err
		}
		if len(evs) > 0 {
			all.TraceEvents = append(all.TraceEvents, evs...)
			n++
		}
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
	return n, json.NewEncoder(w).Encode(all)
}

// readPartial reads a partial trace file: one Chrome event per line, the
// last line possibly cut by the kill (skipped). It ends the track with an
// instant event where the streamed events end.
func readPartial(path string) ([]obs.ChromeEvent, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("metrics: merge traces: %w", err)
	}
	defer f.Close()
	var evs []obs.ChromeEvent
	pid, end, named := 0, 0.0, false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var ce obs.ChromeEvent
		if err := json.Unmarshal(sc.Bytes(), &ce); err != nil {
			continue // the line the kill cut short
		}
		named = named || ce.Ph == "M"
		pid, end = ce.PID, max(end, ce.TS+ce.Dur)
		evs = append(evs, ce)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("metrics: merge traces: %s: %w", path, err)
	}
	if !named {
		return nil, nil // killed before it named its track: nothing to show
	}
	if end == 0 {
		return evs, nil
	}
	return append(evs, obs.ChromeEvent{Name: "trace ends: the process ended without writing its trace (killed?)", Cat: "trace",
		Ph: "i", S: "p", TS: end, PID: pid, TID: 1}), nil
}
