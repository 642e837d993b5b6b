package metrics

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/gaspigo/gaspigo/obs"
)

// StreamEvery is how often a process appends its new trace events to its
// partial trace file: what a process killed by a signal loses of its
// trace at most.
const StreamEvery = 100 * time.Millisecond

// PartialFile is the file that process proc appends its trace events to
// while it runs (StreamTrace); TraceFile replaces it when the process ends
// normally.
func PartialFile(dir string, proc int) string {
	return filepath.Join(dir, fmt.Sprintf("trace-proc-%d.partial", proc))
}

// TraceStream appends a process's new trace events, one Chrome event per
// line, to its partial trace file every StreamEvery, so that a process
// killed by a signal (which never writes its trace file) keeps its track
// up to its death in the merged trace (MergeTraces).
type TraceStream struct {
	t    *obs.Tracer
	pid  int
	path string
	f    *os.File
	w    *bufio.Writer
	next int // the tracer's next slot to write
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// StreamTrace starts the stream of the process's tracer (nil when tracing
// is off, or dir is empty) into PartialFile(dir, proc), owner-only.
func StreamTrace(dir string, proc int) (*TraceStream, error) {
	t := obs.Tracing()
	if t == nil || dir == "" {
		return nil, nil
	}
	path := PartialFile(dir, proc)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("metrics: trace: %w", err)
	}
	s := &TraceStream{t: t, pid: proc, path: path, f: f, w: bufio.NewWriter(f), stop: make(chan struct{}), done: make(chan struct{})}
	enc := json.NewEncoder(s.w)
	for _, ce := range obs.TrackNames(proc, fmt.Sprintf("proc %d (ended without writing its trace: killed?)", proc)) {
		_ = enc.Encode(ce)
	}
	// Where the track starts, should nothing else be streamed before a kill.
	_ = enc.Encode(obs.Event{Name: "trace started", Cat: "trace", Start: time.Now(), Instant: true}.Chrome(proc))
	_ = s.w.Flush()
	go s.run()
	return s, nil
}

func (s *TraceStream) run() {
	defer close(s.done)
	tick := time.NewTicker(StreamEvery)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
			s.flush()
		}
	}
}

// flush appends the events recorded since the last flush. A write error
// ends the stream quietly: the trace file written at the end does not
// depend on it.
func (s *TraceStream) flush() {
	evs, next := s.t.EventsFrom(s.next)
	s.next = next
	enc := json.NewEncoder(s.w)
	for _, ev := range evs {
		_ = enc.Encode(ev.Chrome(s.pid))
	}
	_ = s.w.Flush()
}

// Close stops the stream and removes the partial file: the process is
// about to write its whole trace (WriteTrace). Idempotent; nil does
// nothing.
func (s *TraceStream) Close() {
	if s == nil {
		return
	}
	s.once.Do(func() {
		close(s.stop)
		<-s.done
		s.f.Close()
		os.Remove(s.path)
	})
}
