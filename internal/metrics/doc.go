// Package metrics exports a process's observability (package obs): its
// metrics over HTTP in Prometheus's format, through client_golang, and
// its trace buffer as a Chrome/Perfetto JSON file. It also holds the
// launcher's side: one endpoint serving the metrics of every process of
// a job (Federation), the job's final snapshot of them (Federation.Final),
// and the merge of the processes' trace files into one (MergeTraces).
//
// The environment contract (read by job.Init through FromEnv):
//
//	PGAS_METRICS=ADDR        serve /metrics at ADDR (HOST:PORT, :PORT; port 0 picks a free
//	                         one); auto: the job's interface, a free port. The address
//	                         is published in the rendezvous's member table ("metrics").
//	PGAS_METRICS_FINAL=DIR   write the process's final metrics to DIR/metrics-proc-N.prom
//	                         when the runtime closes (the launcher's --metrics-file).
//	PGAS_TRACE=DIR           record trace spans and write DIR/trace-proc-N.json when the
//	                         runtime closes (and stream them to trace-proc-N.partial
//	                         while it runs); DIR must exist.
//	PGAS_TRACE_EVENTS=N      capacity of the trace buffer (default 65536 events); events
//	                         past it are dropped and counted
//	                         (gaspigo_trace_events_dropped_total).
//
// Nothing here is on the runtime's hot path: the collector reads obs's
// atomics when scraped.
package metrics
