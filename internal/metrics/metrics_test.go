package metrics

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/obs"
)

func serve(t *testing.T, h http.Handler) *Server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := Serve(ln, h)
	t.Cleanup(func() { s.Close() })
	return s
}

// Rule: a process's /metrics has obs's metrics in Prometheus's text
// format, histograms with their buckets; the Federation adds a proc label
// to every series, and keeps a process's last scrape once it stops
// answering (gaspigo_job_process_up 0).
func TestFederation(t *testing.T) {
	obs.Collectives.With("barrier").Counter.Add(3)
	obs.CollectiveTime.With("barrier").Histogram.Observe(0.002)
	a := serve(t, Handler())
	b := serve(t, Handler())
	targets := []Target{{Proc: 0, Addr: a.Addr()}, {Proc: 4, Addr: b.Addr()}}
	f := NewFederation(func() []Target { return targets })
	text := func() string {
		var w bytes.Buffer
		rec := &recorder{h: http.Header{}, w: &w}
		f.ServeHTTP(rec, (&http.Request{}).WithContext(context.Background()))
		return w.String()
	}
	got := text()
	for _, want := range []string{
		`gaspigo_collectives_total{op="barrier",proc="0"} 3`,
		`gaspigo_collectives_total{op="barrier",proc="4"} 3`,
		`gaspigo_collective_duration_seconds_bucket{op="barrier",proc="4",le="0.00256"} 1`,
		`gaspigo_job_process_up{proc="0"} 1`,
		"# TYPE gaspigo_collectives_total counter",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("federated scrape lacks %q", want)
		}
	}
	if strings.Count(got, "# TYPE gaspigo_collectives_total") != 1 {
		t.Errorf("a family appears more than once in the federated scrape")
	}
	b.Close()
	got = text()
	if !strings.Contains(got, `gaspigo_job_process_up{proc="4"} 0`) || !strings.Contains(got, `gaspigo_collectives_total{op="barrier",proc="4"} 3`) {
		t.Errorf("a process that stopped answering lost its last scrape or is not marked down:\n%s", got)
	}
}

type recorder struct {
	h http.Header
	w *bytes.Buffer
}

func (r *recorder) Header() http.Header         { return r.h }
func (r *recorder) Write(p []byte) (int, error) { return r.w.Write(p) }
func (r *recorder) WriteHeader(int)             {}

// Rule: MergeTraces puts every process's events in one file, metadata
// first, then in time order; a file that is no trace is named.
func TestMergeTraces(t *testing.T) {
	dir := t.TempDir()
	write := func(proc int, evs ...obs.ChromeEvent) {
		b, _ := json.Marshal(obs.ChromeTrace{TraceEvents: evs})
		os.WriteFile(TraceFile(dir, proc), b, 0o600)
	}
	write(0, obs.ChromeEvent{Name: "process_name", Ph: "M", PID: 0}, obs.ChromeEvent{Name: "b", Ph: "X", TS: 20, PID: 0})
	write(1, obs.ChromeEvent{Name: "process_name", Ph: "M", PID: 1}, obs.ChromeEvent{Name: "a", Ph: "X", TS: 10, PID: 1})
	var w bytes.Buffer
	n, err := MergeTraces(dir, &w)
	if err != nil || n != 2 {
		t.Fatalf("MergeTraces = %d, %v", n, err)
	}
	var tr obs.ChromeTrace
	if err := json.Unmarshal(w.Bytes(), &tr); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range tr.TraceEvents {
		names = append(names, e.Name)
	}
	if strings.Join(names, ",") != "process_name,process_name,a,b" {
		t.Fatalf("merged order %v", names)
	}
	os.WriteFile(filepath.Join(dir, "trace-proc-2.json"), []byte("nonsense"), 0o600)
	if _, err := MergeTraces(dir, &w); err == nil || !strings.Contains(err.Error(), "trace-proc-2.json") {
		t.Fatalf("a bad file: err = %v, want one naming it", err)
	}
}

// Rule: bad PGAS_METRICS, PGAS_TRACE and PGAS_TRACE_EVENTS values are
// refused with what to give instead.
func TestFromEnv(t *testing.T) {
	for _, c := range []struct{ k, v, want string }{
		{"PGAS_METRICS", "nonsense", "HOST:PORT"},
		{"PGAS_TRACE", "/nonexistent/dir", "create it first"},
		{"PGAS_TRACE_EVENTS", "-3", "positive number"},
	} {
		t.Run(c.k, func(t *testing.T) {
			t.Setenv(c.k, c.v)
			if _, err := FromEnv(); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%s=%s: err = %v, want one saying %q", c.k, c.v, err, c.want)
			}
		})
	}
	t.Setenv("PGAS_METRICS", "auto")
	t.Setenv("PGAS_TRACE", t.TempDir())
	t.Setenv("PGAS_TRACE_EVENTS", "100")
	if e, err := FromEnv(); err != nil || e.TraceEvents != 100 {
		t.Fatalf("FromEnv = %+v, %v", e, err)
	}
}

// Rule: a process killed without writing its trace file keeps its track
// in the merged trace, from its partial file, up to its last streamed
// event, which an instant event ends; Close removes the partial file.
func TestKilledProcessKeepsItsTrack(t *testing.T) {
	dir := t.TempDir()
	obs.StartTracing(64)
	s, err := StreamTrace(dir, 3)
	if err != nil || s == nil {
		t.Fatalf("StreamTrace = %v, %v", s, err)
	}
	defer s.Close()
	obs.Record("iteration", "iteration", time.Now(), "iter", 1)
	var tr obs.ChromeTrace
	deadline := time.Now().Add(30 * time.Second)
	for {
		var w bytes.Buffer
		n, err := MergeTraces(dir, &w)
		if err != nil {
			t.Fatal(err)
		}
		tr = obs.ChromeTrace{}
		if err := json.Unmarshal(w.Bytes(), &tr); err != nil {
			t.Fatal(err)
		}
		if n == 1 && len(tr.TraceEvents) == 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the streamed event never reached the merged trace: %d processes, %+v", n, tr.TraceEvents)
		}
		time.Sleep(StreamEvery / 2)
	}
	var names []string
	for _, e := range tr.TraceEvents {
		if e.PID != 3 {
			t.Fatalf("event on track %d, want 3: %+v", e.PID, e)
		}
		names = append(names, e.Name)
	}
	if names[2] != "trace started" || names[3] != "iteration" || !strings.HasPrefix(names[4], "trace ends") {
		t.Fatalf("merged events %v, want the track's names, the iteration, then the end of the trace", names)
	}
	s.Close()
	if _, err := os.Stat(PartialFile(dir, 3)); !os.IsNotExist(err) {
		t.Fatalf("the partial file is still there after Close: %v", err)
	}
}
