package launch

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/gaspigo/gaspigo/internal/bootstrap"
	"github.com/gaspigo/gaspigo/internal/durable"
	"github.com/gaspigo/gaspigo/internal/metrics"
)

// observability is gaspirun's side of --metrics and --trace: one endpoint
// serving every process's metrics (each process serves its own on a free
// port, published in the rendezvous's member table), and the merge of the
// processes' trace files into one at the end.
type observability struct {
	srv      *metrics.Server
	fed      *metrics.Federation // with --metrics or --metrics-file
	stop     context.CancelFunc  // stops the federation's refresh
	finalDir string              // the processes' final metrics (--metrics-file); removed at the end
	finalOut string
	linger   time.Duration
	traceDir string // the processes' trace files; removed at the end
	traceOut string
}

// refreshEvery is how often gaspirun scrapes the processes for
// --metrics-file, so that a killed process's metrics are at most this old.
const refreshEvery = 500 * time.Millisecond

// startObservability starts what cfg asks for and returns the variables
// the processes need for it.
func startObservability(cfg Config, srv *bootstrap.Server) (*observability, []string, error) {
	o := &observability{traceOut: cfg.Trace, finalOut: cfg.MetricsFile, linger: cfg.MetricsLinger}
	var env []string
	if cfg.Metrics != "" || cfg.MetricsFile != "" {
		o.fed = metrics.NewFederation(func() []metrics.Target {
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
		env = append(env, "PGAS_METRICS=auto")
	}
	if cfg.Metrics != "" {
		ln, err := net.Listen("tcp", cfg.Metrics)
		if err != nil {
			return nil, nil, &FlagError{Flag: "--metrics", Value: cfg.Metrics, Problem: fmt.Sprintf("cannot be listened on (%v)", err),
				Fix: "give a free HOST:PORT or :PORT, e.g. --metrics 127.0.0.1:9464"}
		}
		o.srv = metrics.Serve(ln, o.fed)
	}
	if cfg.MetricsFile != "" {
		dir, err := o.tempBeside(cfg.MetricsFile, "--metrics-file", ".gaspirun-metrics-*")
		if err != nil {
			o.close()
			return nil, nil, err
		}
		o.finalDir = dir
		if cfg.Backend() == LauncherLocal {
			env = append(env, "PGAS_METRICS_FINAL="+dir)
		} // else the files would stay on the hosts: the last scrapes only
		ctx, cancel := context.WithCancel(context.Background())
		o.stop = cancel
		go o.fed.Refresh(ctx, refreshEvery)
	}
	if cfg.Trace != "" {
		if cfg.Backend() != LauncherLocal {
			o.close()
			return nil, nil, &FlagError{Flag: "--trace", Value: cfg.Trace, Problem: "works with the local launcher only (the processes write their trace files where gaspirun merges them)",
				Fix: "run the job on this machine, or give every process -x PGAS_TRACE=DIR with DIR on a file system all hosts share and open its trace-proc-N.json files"}
		}
		dir, err := o.tempBeside(cfg.Trace, "--trace", ".gaspirun-trace-*")
		if err != nil {
			o.close()
			return nil, nil, err
		}
		o.traceDir = dir
		env = append(env, "PGAS_TRACE="+dir)
	}
	return o, env, nil
}

// tempBeside makes a temporary directory named pattern beside file, the
// output of flag: the processes write their parts there, and gaspirun
// joins them into file at the end.
func (o *observability) tempBeside(file, flag, pattern string) (string, error) {
	abs, err := filepath.Abs(file)
	if err != nil {
		return "", &FlagError{Flag: flag, Value: file, Problem: err.Error(), Fix: "give a file path"}
	}
	dir, err := os.MkdirTemp(filepath.Dir(abs), pattern)
	if err != nil {
		return "", &FlagError{Flag: flag, Value: file, Problem: fmt.Sprintf("cannot be written (%v)", err),
			Fix: "give a file in a directory that exists and that you can write"}
	}
	return dir, nil
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
// many processes it holds), writes --metrics-file, keeps the endpoint up
// for --metrics-linger, and stops it.
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
	if o.stop != nil {
		o.stop()
	}
	if o.finalDir != "" {
		err := o.writeFinal()
		switch {
		case err != nil:
			out.notice(fmt.Sprintf("metrics: %v", err))
		case !quiet:
			out.notice(fmt.Sprintf("final metrics written to %s", o.finalOut))
		}
	}
	if o.srv != nil && o.linger > 0 {
		if !quiet {
			out.notice(fmt.Sprintf("metrics: serving the job's final metrics at http://%s/metrics for %v more (--metrics-linger)", o.srv.Addr(), o.linger))
		}
		time.Sleep(o.linger)
	}
	o.close()
}

// writeFinal writes the job's final metrics to --metrics-file, whole or
// not at all.
func (o *observability) writeFinal() error {
	defer os.RemoveAll(o.finalDir)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var b bytes.Buffer
	if err := o.fed.Final(ctx, o.finalDir, &b); err != nil {
		return err
	}
	abs, err := filepath.Abs(o.finalOut)
	if err == nil {
		err = durable.WriteFile(filepath.Dir(abs), filepath.Base(abs), b.Bytes(), 0o644)
	}
	return err
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
