package metrics

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Target is one process of a job whose metrics a Federation serves.
type Target struct {
	Proc int
	Addr string // HOST:PORT of its /metrics
}

// Federation serves the metrics of every process of a job from one
// endpoint: each scrape scrapes the processes (in parallel, with a
// timeout) and adds a proc label (the process id) to their series; the
// rank a process holds is its gaspigo_rank gauge. A process that
// does not answer (it ended, or was killed) contributes its last
// successful scrape, so a finished process's counters stay visible; the
// gaspigo_job_process_up gauge says which answered.
type Federation struct {
	targets func() []Target
	client  *http.Client

	mu   sync.Mutex
	last map[int]map[string]*dto.MetricFamily // proc -> families of its last scrape
	// final marks the processes whose last families are the final
	// snapshot they wrote when they ended (Final): no scrape replaces them.
	final map[int]bool
}

// NewFederation returns a Federation over the targets that targets
// returns at each scrape.
func NewFederation(targets func() []Target) *Federation {
	return &Federation{targets: targets, client: &http.Client{Timeout: 2 * time.Second},
		last: map[int]map[string]*dto.MetricFamily{}, final: map[int]bool{}}
}

// scrape fetches and labels one target's families.
func (f *Federation) scrape(ctx context.Context, t Target) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+t.Addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := f.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("metrics: %s: %s", t.Addr, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("metrics: %s: %w", t.Addr, err)
	}
	proc, pv := "proc", strconv.Itoa(t.Proc)
	for _, fam := range fams {
		for _, m := range fam.Metric {
			m.Label = append(m.Label, &dto.LabelPair{Name: &proc, Value: &pv})
		}
	}
	return fams, nil
}

// Gather scrapes every target and returns the merged families, sorted by
// name, with gaspigo_job_process_up.
func (f *Federation) Gather(ctx context.Context) []*dto.MetricFamily {
	targets := f.targets()
	got := make([]map[string]*dto.MetricFamily, len(targets))
	var wg sync.WaitGroup
	for i, t := range targets {
		wg.Go(func() {
			fams, err := f.scrape(ctx, t)
			if err == nil {
				got[i] = fams
			}
		})
	}
	wg.Wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	up := &dto.MetricFamily{Name: strp("gaspigo_job_process_up"), Type: dto.MetricType_GAUGE.Enum(),
		Help: strp("1 if the process answered this scrape, 0 if its last scrape is shown (it ended or was killed).")}
	merged := map[string]*dto.MetricFamily{up.GetName(): up}
	for i, t := range targets {
		v := 1.0
		switch {
		case got[i] == nil:
			v = 0
		case !f.final[t.Proc]:
			f.last[t.Proc] = got[i]
		}
		pv := strconv.Itoa(t.Proc)
		up.Metric = append(up.Metric, &dto.Metric{Label: []*dto.LabelPair{{Name: strp("proc"), Value: &pv}},
			Gauge: &dto.Gauge{Value: &v}})
		for name, fam := range f.last[t.Proc] {
			if m := merged[name]; m != nil {
				m.Metric = append(m.Metric, fam.Metric...)
				continue
			}
			merged[name] = &dto.MetricFamily{Name: fam.Name, Help: fam.Help, Type: fam.Type, Unit: fam.Unit, Metric: slices.Clone(fam.Metric)}
		}
	}
	out := make([]*dto.MetricFamily, 0, len(merged))
	for _, m := range merged {
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b *dto.MetricFamily) int {
		if a.GetName() < b.GetName() {
			return -1
		}
		if a.GetName() > b.GetName() {
			return 1
		}
		return 0
	})
	return out
}

func strp(s string) *string { return &s }

// ServeHTTP serves the merged metrics in Prometheus's text format.
func (f *Federation) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	fams := f.Gather(r.Context())
	w.Header().Set("Content-Type", string(expfmt.NewFormat(expfmt.TypeTextPlain)))
	_ = encodeText(w, fams) // an error: the client went away
}
