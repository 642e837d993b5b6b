package launch

import (
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/gaspigo/gaspigo/internal/bootstrap"
	"github.com/gaspigo/gaspigo/internal/metrics"
)

// observability is gaspirun's side of --metrics and --trace: one endpoint
// serving every process's metrics (each process serves its own on a free
// port, published in the rendezvous's member table), and the merge of the
// processes' trace files into one at the end.
type observability struct {
	srv      *metrics.Server
	traceDir string // the processes' trace files; removed at the end
	traceOut string
}

// startObservability starts what cfg asks for and returns the variables
// the processes need for it.
func startObservability(cfg Config, srv *bootstrap.Server) (*observability, []string, error) {
	o := &observability{traceOut: cfg.Trace}
	var env []string
	if cfg.Metrics != "" {
		ln, err := net.Listen("tcp", cfg.Metrics)
		if err != nil {
			return nil, nil, &FlagError{Flag: "--metrics", Value: cfg.Metrics, Problem: fmt.Sprintf("cannot be listened on (%v)", err),
				Fix: "give a free HOST:PORT or :PORT, e.g. --metrics 127.0.0.1:9464"}
		}
		fed := metrics.NewFederation(func() []metrics.Target {
			t, ok := srv.Table()
			if !ok {
				return nil
			}
			var out []metrics.Target
			for _, m := range t.Members {
				if a := m.Extra["metrics"]; a != "" {
					out = append(out, metrics.Target{Proc: int(m.Proc), Addr: a})
				}
			}
			return out
		})
		o.srv = metrics.Serve(ln, fed)
		env = append(env, "PGAS_METRICS=auto")
	}
	if cfg.Trace != "" {
		if cfg.Backend() != LauncherLocal {
			o.close()
			return nil, nil, &FlagError{Flag: "--trace", Value: cfg.Trace, Problem: "works with the local launcher only (the processes write their trace files where gaspirun merges them)",
				Fix: "run the job on this machine, or give every process -x PGAS_TRACE=DIR with DIR on a file system all hosts share and open its trace-proc-N.json files"}
		}
		abs, err := filepath.Abs(cfg.Trace)
		if err != nil {
			o.close()
			return nil, nil, &FlagError{Flag: "--trace", Value: cfg.Trace, Problem: err.Error(), Fix: "give a file path"}
		}
		dir, err := os.MkdirTemp(filepath.Dir(abs), ".gaspirun-trace-*")
		if err != nil {
			o.close()
			return nil, nil, &FlagError{Flag: "--trace", Value: cfg.Trace, Problem: fmt.Sprintf("cannot be written (%v)", err),
				Fix: "give a file in a directory that exists and that you can write"}
		}
		o.traceDir = dir
		env = append(env, "PGAS_TRACE="+dir)
	}
	return o, env, nil
}

// MetricsAddr is the address of the job's metrics endpoint, "" without
// --metrics.
func (o *observability) MetricsAddr() string {
	if o == nil || o.srv == nil {
		return ""
	}
	return o.srv.Addr()
}

// finish merges the trace files into --trace's file (a notice says how
// many processes it holds) and stops the metrics endpoint.
func (o *observability) finish(out *output, quiet bool) {
	if o.traceDir != "" {
		n, err := o.mergeTrace()
		switch {
		case err != nil:
			out.notice(fmt.Sprintf("trace: %v", err))
		case !quiet:
			out.notice(fmt.Sprintf("trace of %d processes written to %s (open it in ui.perfetto.dev or chrome://tracing)", n, o.traceOut))
		}
	}
	o.close()
}

func (o *observability) mergeTrace() (int, error) {
	defer os.RemoveAll(o.traceDir)
	f, err := os.OpenFile(o.traceOut, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return 0, err
	}
	n, err := metrics.MergeTraces(o.traceDir, f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && n == 0 {
		err = fmt.Errorf("no process wrote a trace (a process writes it when its runtime closes; under ssh or srun the files stay on the hosts)")
	}
	return n, err
}

func (o *observability) close() {
	if o.srv != nil {
		o.srv.Close()
	}
}
