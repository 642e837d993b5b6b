package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/gaspigo/gaspigo/obs"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// collector is a prometheus.Collector over an obs.Registry. It is
// unchecked (Describe sends nothing): the series appear as the process
// records them.
type collector struct{ reg *obs.Registry }

func (c collector) Describe(chan<- *prometheus.Desc) {}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range c.reg.Metrics() {
		desc := prometheus.NewDesc(m.Name, m.Help, m.Labels, nil)
		for _, s := range m.Series() {
			switch m.Kind {
			case obs.KindCounter:
				ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(s.Counter.Value()), s.Labels...)
			case obs.KindGauge:
				ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, s.Gauge.Value(), s.Labels...)
			case obs.KindHistogram:
				h := s.Histogram.Snapshot()
				buckets := make(map[float64]uint64, len(h.Bounds))
				for i, b := range h.Bounds {
					buckets[b] = h.Cumulative[i]
				}
				ch <- prometheus.MustNewConstHistogram(desc, h.Count, h.Sum, buckets, s.Labels...)
			}
		}
	}
}

// Registry returns a Prometheus registry with reg's metrics and the Go
// runtime's and the process's own collectors.
func Registry(reg *obs.Registry) *prometheus.Registry {
	r := prometheus.NewRegistry()
	r.MustRegister(collector{reg}, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}

// Handler serves obs.Default's metrics in Prometheus's formats.
func Handler() http.Handler {
	return promhttp.HandlerFor(Registry(obs.Default), promhttp.HandlerOpts{})
}

// Server serves /metrics on a listener until Close.
type Server struct {
	srv  *http.Server
	ln   net.Listener
	done chan struct{}
}

// Serve serves h at /metrics on ln; the Server owns ln.
func Serve(ln net.Listener, h http.Handler) *Server {
	mux := http.NewServeMux()
	mux.Handle("/metrics", h)
	s := &Server{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}, ln: ln, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		_ = s.srv.Serve(ln) // ends with http.ErrServerClosed at Close
	}()
	return s
}

// Addr is the address the server listens on.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops the server and waits for its goroutine.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	<-s.done
	if errors.Is(err, context.DeadlineExceeded) {
		err = s.srv.Close()
	}
	return err
}

// Env is the observability part of the environment contract.
type Env struct {
	Metrics     string // PGAS_METRICS: "", "auto" or a listen address
	TraceDir    string // PGAS_TRACE
	FinalDir    string // PGAS_METRICS_FINAL: where the process writes its final metrics (WriteFinal)
	TraceEvents int    // PGAS_TRACE_EVENTS
}

// FromEnv reads PGAS_METRICS, PGAS_TRACE and PGAS_TRACE_EVENTS.
func FromEnv() (Env, error) {
	e := Env{Metrics: os.Getenv("PGAS_METRICS"), TraceDir: os.Getenv("PGAS_TRACE"), FinalDir: os.Getenv("PGAS_METRICS_FINAL"),
		TraceEvents: obs.DefaultTraceEvents}
	if e.Metrics != "" && e.Metrics != "auto" {
		if _, _, err := net.SplitHostPort(e.Metrics); err != nil {
			return e, fmt.Errorf("%w: PGAS_METRICS=%q is not an address to listen on (%v): give HOST:PORT, :PORT (port 0 picks a free one) or auto", ErrEnv, e.Metrics, err)
		}
	}
	if e.TraceDir != "" {
		if st, err := os.Stat(e.TraceDir); err != nil || !st.IsDir() {
			return e, fmt.Errorf("%w: PGAS_TRACE=%q is not a directory: create it first; each process writes trace-proc-N.json there", ErrEnv, e.TraceDir)
		}
	}
	if e.FinalDir != "" {
		if st, err := os.Stat(e.FinalDir); err != nil || !st.IsDir() {
			return e, fmt.Errorf("%w: PGAS_METRICS_FINAL=%q is not a directory: create it first; each process writes metrics-proc-N.prom there when it ends", ErrEnv, e.FinalDir)
		}
	}
	if v := os.Getenv("PGAS_TRACE_EVENTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return e, fmt.Errorf("%w: PGAS_TRACE_EVENTS=%q is not a positive number of events: give e.g. 65536", ErrEnv, v)
		}
		e.TraceEvents = n
	}
	return e, nil
}

// TraceFile is the file the process proc writes its trace to in dir.
func TraceFile(dir string, proc int) string {
	return filepath.Join(dir, fmt.Sprintf("trace-proc-%d.json", proc))
}

// WriteTrace writes the process's trace (if tracing is on) to
// TraceFile(dir, proc), through a temporary file and a rename, owner-only.
func WriteTrace(dir string, proc int, name string) error {
	t := obs.Tracing()
	if t == nil || dir == "" {
		return nil
	}
	path := TraceFile(dir, proc)
	f, err := os.CreateTemp(dir, ".trace-*.tmp")
	if err != nil {
		return fmt.Errorf("metrics: trace: %w", err)
	}
	err = t.WriteChrome(f, proc, name)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("metrics: trace %s: %w", path, err)
	}
	return nil
}
