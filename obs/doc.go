// Package obs is the process's observability core: counters, gauges and
// histograms that the runtime updates on its hot paths with atomics only,
// and a bounded trace buffer of spans.
//
// obs is a leaf: it imports nothing of the project, so every layer may
// record into it. It exports nothing by itself: internal/metrics serves
// the metrics registered here (Default) in Prometheus's format when
// PGAS_METRICS is set, and writes the trace buffer as Chrome/Perfetto
// JSON when PGAS_TRACE is set.
//
// Contracts:
//   - Recording never blocks and never allocates on the hot path once a
//     series exists (Counter.Add, Gauge.Set, Histogram.Observe are single
//     atomic operations, plus a bounded compare-and-swap loop for the
//     histogram's sum). Looking a series up by label values (Vec.With)
//     takes a read lock on a small map; hot paths keep the *Counter.
//   - The trace buffer holds at most its capacity of events; once it is
//     full, further events are dropped and counted (Tracer.Dropped), never
//     waited for. A span costs nothing but a nil check while tracing is
//     off.
//   - Metric names follow Prometheus's conventions: a gaspigo_ prefix,
//     base units (seconds, bytes), _total for counters.
package obs
