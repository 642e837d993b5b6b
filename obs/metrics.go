package obs

import (
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Kind is the type of a metric.
type Kind int

const (
	KindCounter Kind = iota
	KindGauge
	KindHistogram
)

// Counter is a monotonically increasing count.
type Counter struct{ v atomic.Uint64 }

// Add adds n.
func (c *Counter) Add(n uint64) { c.v.Add(n) }

// Inc adds one.
func (c *Counter) Inc() { c.v.Add(1) }

// Value returns the count.
func (c *Counter) Value() uint64 { return c.v.Load() }

// Gauge is a value that goes up and down.
type Gauge struct{ bits atomic.Uint64 }

// Set sets the value.
func (g *Gauge) Set(v float64) { g.bits.Store(math.Float64bits(v)) }

// Add adds d to the value.
func (g *Gauge) Add(d float64) {
	for {
		old := g.bits.Load()
		if g.bits.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+d)) {
			return
		}
	}
}

// Value returns the value.
func (g *Gauge) Value() float64 { return math.Float64frombits(g.bits.Load()) }

// Histogram counts observations in buckets with fixed upper bounds.
type Histogram struct {
	bounds []float64       // ascending upper bounds; +Inf is implicit
	counts []atomic.Uint64 // per bucket (not cumulative), len(bounds)+1
	sum    Gauge
}

func newHistogram(bounds []float64) *Histogram {
	return &Histogram{bounds: bounds, counts: make([]atomic.Uint64, len(bounds)+1)}
}

// Observe records v.
func (h *Histogram) Observe(v float64) {
	i, _ := slices.BinarySearch(h.bounds, v)
	h.counts[i].Add(1)
	h.sum.Add(v)
}

// ObserveSince records the seconds since t0.
func (h *Histogram) ObserveSince(t0 time.Time) { h.Observe(time.Since(t0).Seconds()) }

// HistogramSnapshot is a histogram's state: Cumulative[i] counts the
// observations up to Bounds[i]; Count includes those above the last bound.
type HistogramSnapshot struct {
	Bounds     []float64
	Cumulative []uint64
	Count      uint64
	Sum        float64
}

// Snapshot returns the histogram's state.
func (h *Histogram) Snapshot() HistogramSnapshot {
	s := HistogramSnapshot{Bounds: h.bounds, Cumulative: make([]uint64, len(h.bounds)), Sum: h.sum.Value()}
	var n uint64
	for i := range h.counts {
		n += h.counts[i].Load()
		if i < len(h.bounds) {
			s.Cumulative[i] = n
		}
	}
	s.Count = n
	return s
}

// Buckets for latencies in seconds: 10µs to about 40s.
var (
	LatencyBuckets = ExpBuckets(10e-6, 4, 12)
	// SizeBuckets for bytes: 1 KiB to 1 GiB.
	SizeBuckets = ExpBuckets(1024, 4, 11)
)

// ExpBuckets returns n upper bounds, start, start*factor, ...
func ExpBuckets(start, factor float64, n int) []float64 {
	b := make([]float64, n)
	for i := range b {
		b[i] = start
		start *= factor
	}
	return b
}

// Series is one labelled series of a metric.
type Series struct {
	Labels    []string // values, in the order of the metric's label names
	Counter   *Counter
	Gauge     *Gauge
	Histogram *Histogram
}

// Metric is a registered metric and its series.
type Metric struct {
	Name, Help string
	Kind       Kind
	Labels     []string
	bounds     []float64

	mu     sync.RWMutex
	series map[string]*Series
}

// With returns the series for the label values given (one per label
// name), creating it on first use. Keep the result on hot paths.
func (m *Metric) With(values ...string) *Series {
	if len(values) != len(m.Labels) {
		panic("obs: " + m.Name + ": wrong number of label values")
	}
	key := strings.Join(values, "\xff")
	m.mu.RLock()
	s := m.series[key]
	m.mu.RUnlock()
	if s != nil {
		return s
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if s = m.series[key]; s == nil {
		s = &Series{Labels: slices.Clone(values)}
		switch m.Kind {
		case KindCounter:
			s.Counter = new(Counter)
		case KindGauge:
			s.Gauge = new(Gauge)
		case KindHistogram:
			s.Histogram = newHistogram(m.bounds)
		}
		m.series[key] = s
	}
	return s
}

// Series returns the metric's series, sorted by label values.
func (m *Metric) Series() []*Series {
	m.mu.RLock()
	out := make([]*Series, 0, len(m.series))
	for _, s := range m.series {
		out = append(out, s)
	}
	m.mu.RUnlock()
	slices.SortFunc(out, func(a, b *Series) int { return slices.Compare(a.Labels, b.Labels) })
	return out
}

// Registry holds metrics by name.
type Registry struct {
	mu      sync.Mutex
	metrics []*Metric
}

// Default is the process's registry; the metrics of this package are in it.
var Default = new(Registry)

func (r *Registry) add(name, help string, kind Kind, bounds []float64, labels ...string) *Metric {
	m := &Metric{Name: name, Help: help, Kind: kind, Labels: labels, bounds: bounds, series: map[string]*Series{}}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, o := range r.metrics {
		if o.Name == name {
			panic("obs: metric registered twice: " + name)
		}
	}
	r.metrics = append(r.metrics, m)
	return m
}

// Counter registers a counter metric.
func (r *Registry) Counter(name, help string, labels ...string) *Metric {
	return r.add(name, help, KindCounter, nil, labels...)
}

// Gauge registers a gauge metric.
func (r *Registry) Gauge(name, help string, labels ...string) *Metric {
	return r.add(name, help, KindGauge, nil, labels...)
}

// Histogram registers a histogram metric with the bucket bounds given.
func (r *Registry) Histogram(name, help string, bounds []float64, labels ...string) *Metric {
	return r.add(name, help, KindHistogram, bounds, labels...)
}

// Metrics returns the registered metrics in the order of registration.
func (r *Registry) Metrics() []*Metric {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.metrics)
}
