package kmtier

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/internal/testkit/proctest"
)

// freeAddr returns a loopback address with a port free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// sample is one series of a scrape: name{labels} value.
var sampleRE = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$`)

// scrape is the series of one /metrics body by name, each with its labels.
type scrape map[string][]struct {
	labels string
	value  float64
}

func parseScrape(body string) scrape {
	s := scrape{}
	for _, l := range strings.Split(body, "\n") {
		m := sampleRE.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			continue
		}
		s[m[1]] = append(s[m[1]], struct {
			labels string
			value  float64
		}{m[2], v})
	}
	return s
}

// max is the largest value of name over every process (0 if absent).
func (s scrape) max(name string) float64 {
	out := 0.0
	for _, x := range s[name] {
		out = max(out, x.value)
	}
	return out
}

// Acceptance of issue 12: gaspirun --metrics serves the whole job's
// metrics, and a scrape taken while a K-means job recovers from a SIGKILL
// shows the failure detected, the new epoch, and the recovery's duration;
// gaspirun --trace writes one trace in which a survivor's track has the
// detection, the new view, the restore and the redone iterations in that
// order, and the Raft commit of the new view lies between the detection
// and the view.
func TestMetricsAndTrace(t *testing.T) {
	addr := freeAddr(t)
	trace := filepath.Join(t.TempDir(), "job-trace.json")
	final := filepath.Join(t.TempDir(), "job.prom")
	var (
		mu   sync.Mutex
		last scrape
		seen bool
	)
	found := func(s scrape) bool {
		return s.max("gaspigo_failures_detected_total") >= 1 && s.max("gaspigo_epoch") >= 2 &&
			s.max("gaspigo_recoveries_total") >= 1 && s.max("gaspigo_last_recovery_seconds") > 0
	}
	res := run(t, spec{spares: 1, launcher: []string{"--metrics", addr, "--trace", trace, "--metrics-file", final},
		// Long enough after the kill for the scrapes to see the recovery.
		args:  []string{"--generate", "100000", "--dim", "10", "--k", "20", "--max-iter", "400", "--ckpt-every", "5", "--quiet"},
		extra: []string{"--inject", "kill:rank=2,iter=12"},
		during: func(_ *proctest.Procs, _ int) func() {
			done := make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() {
				c := &http.Client{Timeout: 5 * time.Second}
				for {
					select {
					case <-done:
						return
					case <-time.After(100 * time.Millisecond):
					}
					resp, err := c.Get("http://" + addr + "/metrics")
					if err != nil {
						continue // not up yet, or the job ended
					}
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					s := parseScrape(string(b))
					mu.Lock()
					if !seen {
						last, seen = s, found(s)
					}
					mu.Unlock()
				}
			})
			return func() { close(done); wg.Wait() }
		}})
	if res.code != 0 {
		t.Fatalf("gaspirun exited %d, want 0\n%s", res.code, res.text())
	}
	mu.Lock()
	defer mu.Unlock()
	if !seen {
		t.Fatalf("no scrape of http://%s/metrics showed a detected failure, epoch 2 and a finished recovery; last scrape had failures=%v epoch=%v recoveries=%v\n%s",
			addr, last.max("gaspigo_failures_detected_total"), last.max("gaspigo_epoch"), last.max("gaspigo_recoveries_total"), res.text())
	}
	for _, name := range []string{"gaspigo_frames_sent_total", "gaspigo_collectives_total", "gaspigo_checkpoint_phase_seconds_count",
		"gaspigo_failure_detection_seconds_count", "gaspigo_recovery_phase_seconds_sum", "gaspigo_spares_available", "gaspigo_job_process_up"} {
		if len(last[name]) == 0 {
			t.Errorf("the job's scrape has no %s", name)
		}
	}
	// The processes of one host exchange their frames through shared
	// memory: the frame counters say so.
	if !slices.ContainsFunc(last["gaspigo_frames_sent_total"], func(x struct {
		labels string
		value  float64
	}) bool {
		return strings.Contains(x.labels, `transport="shm"`) && x.value > 0
	}) {
		t.Errorf("no gaspigo_frames_sent_total series with transport=\"shm\" in a job on one host: %v", last["gaspigo_frames_sent_total"])
	}
	if n := len(last["gaspigo_epoch"]); n < ranks {
		t.Errorf("the job's scrape has gaspigo_epoch of %d processes, want every live one (at least %d)", n, ranks)
	}
	t.Logf("scrape: %v failures detected, epoch %v, last recovery %.3fs",
		last.max("gaspigo_failures_detected_total"), last.max("gaspigo_epoch"), last.max("gaspigo_last_recovery_seconds"))
	checkTrace(t, trace, res)
	// The job's final metrics outlive it, in Prometheus's text format.
	b, err := os.ReadFile(final)
	if err != nil {
		t.Fatalf("gaspirun --metrics-file wrote nothing: %v\n%s", err, res.text())
	}
	end := parseScrape(string(b))
	if end.max("gaspigo_epoch") < 2 || end.max("gaspigo_failures_detected_total") < 1 || len(end["gaspigo_frames_sent_total"]) == 0 {
		t.Errorf("the final metrics lack the kill: epoch %v, failures detected %v\n%s", end.max("gaspigo_epoch"), end.max("gaspigo_failures_detected_total"), b)
	}
}

type traceEvent struct {
	Name string         `json:"name"`
	Cat  string         `json:"cat"`
	Ph   string         `json:"ph"`
	TS   float64        `json:"ts"`
	Dur  float64        `json:"dur"`
	PID  int            `json:"pid"`
	Args map[string]any `json:"args"`
}

// checkTrace loads gaspirun's merged trace and checks a survivor's
// recovery spans and their order.
func checkTrace(t *testing.T, path string, res *result) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("gaspirun --trace wrote no file: %v\n%s", err, res.text())
	}
	var tr struct {
		TraceEvents []traceEvent `json:"traceEvents"`
	}
	if err := json.Unmarshal(b, &tr); err != nil {
		t.Fatalf("%s is not a Chrome trace: %v", path, err)
	}
	tracks := map[int][]traceEvent{}
	for _, e := range tr.TraceEvents {
		tracks[e.PID] = append(tracks[e.PID], e)
	}
	if len(tracks) < ranks {
		t.Fatalf("trace has %d process tracks, want at least %d (the survivors and the promoted spare)", len(tracks), ranks)
	}
	first := func(evs []traceEvent, ok func(traceEvent) bool) (traceEvent, bool) {
		i := slices.IndexFunc(evs, ok)
		if i < 0 {
			return traceEvent{}, false
		}
		return evs[i], true
	}
	var commits []traceEvent
	firstDet := -1.0 // the earliest start of a detection, on any track
	for _, evs := range tracks {
		for _, e := range evs {
			if e.Name == "raft commit" {
				commits = append(commits, e)
			}
			if e.Name == "failure detection" && (firstDet < 0 || e.TS < firstDet) {
				firstDet = e.TS
			}
		}
	}
	checked := 0
	for pid, evs := range tracks {
		det, ok := first(evs, func(e traceEvent) bool { return e.Name == "failure detection" })
		if !ok {
			continue // the promoted spare, or a survivor whose peers detected first
		}
		view, ok1 := first(evs, func(e traceEvent) bool {
			ep, _ := e.Args["epoch"].(float64)
			return e.Name == "view applied" && ep == 2
		})
		restore, ok2 := first(evs, func(e traceEvent) bool { return e.Name == "restore" })
		redo, ok3 := first(evs, func(e traceEvent) bool {
			r, _ := e.Args["redo"].(bool)
			return e.Cat == "iteration" && r
		})
		if !ok1 || !ok2 || !ok3 {
			t.Errorf("track of proc %d has the detection but not the new view (%v), the restore (%v) and a redone iteration (%v)", pid, ok1, ok2, ok3)
			continue
		}
		end := func(e traceEvent) float64 { return e.TS + e.Dur }
		// The detection starts when the connection is lost; its end may
		// race the view by microseconds, which a survivor may apply first.
		if !(det.TS <= view.TS && view.TS <= restore.TS && end(restore) <= end(redo)) {
			t.Errorf("track of proc %d: recovery spans out of order: detection [%.0f, %.0f], view %.0f, restore [%.0f, %.0f], first redone iteration ends %.0f",
				pid, det.TS, end(det), view.TS, restore.TS, end(restore), end(redo))
		}
		// The leader's commit returns once it applied the entry itself,
		// about when the followers apply it: allow 100 ms.
		if !slices.ContainsFunc(commits, func(c traceEvent) bool { return end(c) >= firstDet && end(c) <= view.TS+1e5 }) {
			t.Errorf("no raft commit span ends between the first detection (%.0f) and proc %d's new view (%.0f)", firstDet, pid, view.TS)
		}
		checked++
	}
	if checked == 0 {
		t.Errorf("no track of the trace has a failure detection span")
	}
	// The killed process never wrote its trace: its track comes from what
	// it streamed (every 100 ms: its iterations up to then), ended by the
	// mark that its trace ends there.
	killed := false
	for pid, evs := range tracks {
		if slices.ContainsFunc(evs, func(e traceEvent) bool { return strings.HasPrefix(e.Name, "trace ends") }) {
			killed = true
			t.Logf("track of proc %d, killed: %d events streamed before its death", pid, len(evs))
		}
	}
	if !killed {
		t.Errorf("no track of the trace is the killed process's (what it streamed, then the end of its trace)")
	}
}
