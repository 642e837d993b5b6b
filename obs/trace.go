package obs

import (
	"encoding/json"
	"fmt"
	"io"
	"sync/atomic"
	"time"
)

// Event is one trace event: a span (Dur > 0 or a span that ended at
// once) or an instant (Instant).
type Event struct {
	Name    string
	Cat     string // iteration, checkpoint, detection, membership, recovery, shuffle
	Start   time.Time
	Dur     time.Duration
	Instant bool
	Args    map[string]any
}

// Tracer is a bounded buffer of events. Writers claim a slot with one
// atomic add; once every slot is taken, events are dropped and counted.
type Tracer struct {
	slots   []slot
	next    atomic.Int64
	dropped atomic.Uint64
}

type slot struct {
	ready atomic.Bool
	ev    Event
}

// DefaultTraceEvents is the capacity of the process's trace buffer when
// PGAS_TRACE does not say otherwise: about 10 MB of events.
const DefaultTraceEvents = 1 << 16

var tracer atomic.Pointer[Tracer]

// StartTracing makes the process record trace events into a new buffer of
// capacity events, and returns it.
func StartTracing(capacity int) *Tracer {
	t := &Tracer{slots: make([]slot, capacity)}
	tracer.Store(t)
	return t
}

// Tracing returns the process's tracer, nil when tracing is off.
func Tracing() *Tracer { return tracer.Load() }

func (t *Tracer) add(ev Event) {
	i := t.next.Add(1) - 1
	if i >= int64(len(t.slots)) {
		t.dropped.Add(1)
		traceDropped.Inc()
		return
	}
	t.slots[i].ev = ev
	t.slots[i].ready.Store(true)
}

// Dropped is the number of events dropped because the buffer was full.
func (t *Tracer) Dropped() uint64 { return t.dropped.Load() }

// Events returns the events recorded so far, in the order they were
// recorded (spans by their end).
func (t *Tracer) Events() []Event {
	n := min(t.next.Load(), int64(len(t.slots)))
	out := make([]Event, 0, n)
	for i := range n {
		if t.slots[i].ready.Load() {
			out = append(out, t.slots[i].ev)
		}
	}
	return out
}

// EventsFrom returns the events recorded in the slots from index i on, up
// to the first slot whose event is not written yet, and the index after
// them: a reader that passes the index back gets each event once, in the
// order of the slots.
func (t *Tracer) EventsFrom(i int) ([]Event, int) {
	n := int(min(t.next.Load(), int64(len(t.slots))))
	var out []Event
	for ; i < n && t.slots[i].ready.Load(); i++ {
		out = append(out, t.slots[i].ev)
	}
	return out, i
}

// Span is a span under way; the zero Span (tracing off) does nothing.
type Span struct {
	t     *Tracer
	name  string
	cat   string
	start time.Time
}

// Begin starts a span of category cat.
func Begin(cat, name string) Span {
	t := tracer.Load()
	if t == nil {
		return Span{}
	}
	return Span{t: t, name: name, cat: cat, start: time.Now()}
}

// End records the span with args (key, value pairs).
func (s Span) End(args ...any) {
	if s.t == nil {
		return
	}
	s.t.add(Event{Name: s.name, Cat: s.cat, Start: s.start, Dur: time.Since(s.start), Args: argMap(args)})
}

// Instant records an instant event of category cat with args (key,
// value pairs).
func Instant(cat, name string, args ...any) {
	if t := tracer.Load(); t != nil {
		t.add(Event{Name: name, Cat: cat, Start: time.Now(), Instant: true, Args: argMap(args)})
	}
}

// Record records a span that began at start and ended now (for code that
// measures a phase already).
func Record(cat, name string, start time.Time, args ...any) {
	if t := tracer.Load(); t != nil {
		t.add(Event{Name: name, Cat: cat, Start: start, Dur: time.Since(start), Args: argMap(args)})
	}
}

func argMap(kv []any) map[string]any {
	if len(kv) == 0 {
		return nil
	}
	m := make(map[string]any, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		k := fmt.Sprint(kv[i])
		switch v := kv[i+1].(type) {
		case error:
			m[k] = v.Error()
		case time.Duration:
			m[k] = v.String()
		default:
			m[k] = v
		}
	}
	return m
}

// ChromeEvent is one event of the Chrome trace event format (the JSON
// that Perfetto and chrome://tracing load): ph X is a complete span, i an
// instant, M metadata; ts and dur are microseconds.
type ChromeEvent struct {
	Name string         `json:"name"`
	Cat  string         `json:"cat,omitempty"`
	Ph   string         `json:"ph"`
	TS   float64        `json:"ts"`
	Dur  float64        `json:"dur,omitempty"`
	PID  int            `json:"pid"`
	TID  int            `json:"tid"`
	S    string         `json:"s,omitempty"`
	Args map[string]any `json:"args,omitempty"`
}

// ChromeTrace is a whole trace file.
type ChromeTrace struct {
	TraceEvents     []ChromeEvent `json:"traceEvents"`
	DisplayTimeUnit string        `json:"displayTimeUnit,omitempty"`
}

// WriteChrome writes the events recorded so far as a Chrome trace of one
// process: pid is the process id (one track per process in the merged
// trace), name its track's name. Timestamps are wall-clock microseconds
// since the Unix epoch, so the files of a job's processes merge onto one
// time axis.
func (t *Tracer) WriteChrome(w io.Writer, pid int, name string) error {
	tr := ChromeTrace{DisplayTimeUnit: "ms"}
	tr.TraceEvents = append(tr.TraceEvents, TrackNames(pid, name)...)
	for _, ev := range t.Events() {
		tr.TraceEvents = append(tr.TraceEvents, ev.Chrome(pid))
	}
	if d := t.Dropped(); d > 0 {
		tr.TraceEvents = append(tr.TraceEvents, ChromeEvent{Name: "trace events dropped", Cat: "trace", Ph: "i", S: "p",
			TS: float64(time.Now().UnixNano()) / 1e3, PID: pid, TID: 1, Args: map[string]any{"dropped": d}})
	}
	enc := json.NewEncoder(w)
	return enc.Encode(tr)
}

// TrackNames are the metadata events that name process pid's track and
// sort it by pid.
func TrackNames(pid int, name string) []ChromeEvent {
	return []ChromeEvent{
		{Name: "process_name", Ph: "M", PID: pid, Args: map[string]any{"name": name}},
		{Name: "process_sort_index", Ph: "M", PID: pid, Args: map[string]any{"sort_index": pid}},
	}
}

// Chrome is ev as a Chrome trace event on process pid's track.
func (ev Event) Chrome(pid int) ChromeEvent {
	ce := ChromeEvent{Name: ev.Name, Cat: ev.Cat, Ph: "X", TS: float64(ev.Start.UnixNano()) / 1e3,
		Dur: float64(ev.Dur.Nanoseconds()) / 1e3, PID: pid, TID: 1, Args: ev.Args}
	if ev.Instant {
		ce.Ph, ce.Dur, ce.S = "i", 0, "p"
	}
	return ce
}
