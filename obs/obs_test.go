package obs

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"
	"time"
)

// Rule: a histogram's snapshot is cumulative per bound, counts the
// observations above the last bound in Count only, and sums the values.
func TestHistogramSnapshot(t *testing.T) {
	h := newHistogram([]float64{1, 2, 4})
	for _, v := range []float64{0.5, 1, 1.5, 3, 10} {
		h.Observe(v)
	}
	s := h.Snapshot()
	if want := []uint64{2, 3, 4}; !slices.Equal(s.Cumulative, want) || s.Count != 5 || s.Sum != 16 {
		t.Fatalf("snapshot = %+v, want cumulative %v, count 5, sum 16", s, want)
	}
}

// Rule: series are created once per label values and shared.
func TestVecWith(t *testing.T) {
	r := new(Registry)
	m := r.Counter("x_total", "x", "op")
	m.With("a").Counter.Add(2)
	m.With("a").Counter.Inc()
	m.With("b").Counter.Inc()
	ss := m.Series()
	if len(ss) != 2 || ss[0].Labels[0] != "a" || ss[0].Counter.Value() != 3 || ss[1].Counter.Value() != 1 {
		t.Fatalf("series = %+v", ss)
	}
}

// Rule: the trace buffer keeps its capacity of events and drops and
// counts the rest; spans do nothing while tracing is off.
func TestTracerBounded(t *testing.T) {
	tracer.Store(nil)
	Begin("x", "off").End() // no tracer: nothing recorded, no panic
	tr := StartTracing(3)
	defer tracer.Store(nil)
	before := traceDropped.Value()
	for i := 0; i < 5; i++ {
		sp := Begin("iteration", "it")
		sp.End("i", i)
	}
	Instant("membership", "view applied", "epoch", 2)
	if got := len(tr.Events()); got != 3 {
		t.Fatalf("%d events kept, want the capacity, 3", got)
	}
	if tr.Dropped() != 3 || traceDropped.Value()-before != 3 {
		t.Fatalf("dropped %d (metric +%d), want 3", tr.Dropped(), traceDropped.Value()-before)
	}
	var b bytes.Buffer
	if err := tr.WriteChrome(&b, 7, "rank 3 (proc 7)"); err != nil {
		t.Fatal(err)
	}
	var ct ChromeTrace
	if err := json.Unmarshal(b.Bytes(), &ct); err != nil {
		t.Fatal(err)
	}
	// 2 metadata events, 3 spans, 1 drop marker.
	if len(ct.TraceEvents) != 6 || ct.TraceEvents[0].Args["name"] != "rank 3 (proc 7)" || ct.TraceEvents[2].Ph != "X" || ct.TraceEvents[2].PID != 7 {
		t.Fatalf("chrome trace = %+v", ct.TraceEvents)
	}
	if last := ct.TraceEvents[5]; last.Name != "trace events dropped" || last.Args["dropped"] != float64(3) {
		t.Fatalf("last event %+v, want the drop marker with 3", last)
	}
}

// Rule: Record keeps the start given and the duration to now.
func TestRecord(t *testing.T) {
	tr := StartTracing(4)
	defer tracer.Store(nil)
	start := time.Now().Add(-time.Second)
	Record("recovery", "restore", start, "id", 11)
	ev := tr.Events()[0]
	if !ev.Start.Equal(start) || ev.Dur < time.Second || ev.Args["id"] != 11 {
		t.Fatalf("event %+v", ev)
	}
}
