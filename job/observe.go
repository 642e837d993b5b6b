package job

import (
	"errors"
	"fmt"
	"net"
	"sync"

	"github.com/gaspigo/gaspigo/internal/bootstrap"
	"github.com/gaspigo/gaspigo/internal/metrics"
	"github.com/gaspigo/gaspigo/internal/netfault"
	"github.com/gaspigo/gaspigo/obs"
	"github.com/gaspigo/gaspigo/pgas"
)

// observer is a process's metrics server and trace (PGAS_METRICS,
// PGAS_TRACE; see internal/metrics). Closed with the runtime.
type observer struct {
	env  metrics.Env
	proc int
	srv  *metrics.Server
	// stream appends the trace to its partial file while the process
	// runs, so that a killed process keeps its track (nil: no trace).
	stream *metrics.TraceStream
	rt     *pgas.Runtime // set once Init has made it; names the trace's track
	// faults is the network-fault injector of PGAS_NETFAULTS (nil: none),
	// which the data plane and the membership wrap their connections
	// with; closing the observer stops its watcher.
	faults *netfault.Injector
	once   sync.Once
	err    error
}

// startObserver starts what the environment asks for: the metrics
// server (its advertised address goes into extra["metrics"]) and the
// trace buffer.
func startObserver(env bootstrap.Env, extra map[string]string) (*observer, error) {
	oenv, err := metrics.FromEnv()
	if err != nil {
		return nil, err
	}
	o := &observer{env: oenv, proc: int(env.Proc)}
	if oenv.TraceDir != "" {
		obs.StartTracing(oenv.TraceEvents)
		if o.stream, err = metrics.StreamTrace(oenv.TraceDir, o.proc); err != nil {
			return nil, err
		}
	}
	if oenv.Metrics == "" {
		return o, nil
	}
	var ln net.Listener
	var addr string
	if oenv.Metrics == "auto" {
		ln, addr, err = listen(env, nil)
	} else if ln, err = net.Listen("tcp", oenv.Metrics); err == nil {
		addr, err = advertise(ln.Addr().String(), env.Rendezvous)
		if err != nil {
			ln.Close()
		}
	}
	if err != nil {
		o.stream.Close()
		return nil, fmt.Errorf("%w: PGAS_METRICS=%q: %v: give a free HOST:PORT, port 0, or auto", metrics.ErrEnv, oenv.Metrics, err)
	}
	o.srv = metrics.Serve(ln, metrics.Handler())
	extra["metrics"] = addr
	return o, nil
}

// close writes the trace and stops the metrics server, once.
func (o *observer) close() error {
	if o == nil {
		return nil
	}
	o.once.Do(func() { o.err = o.closeOnce() })
	return o.err
}

func (o *observer) closeOnce() error {
	name := fmt.Sprintf("proc %d", o.proc)
	if o.rt != nil {
		if r := o.rt.Rank(); r >= 0 {
			name = fmt.Sprintf("rank %d (proc %d)", r, o.proc)
		} else {
			name = fmt.Sprintf("spare (proc %d)", o.proc)
		}
	}
	o.faults.Close()
	o.stream.Close()
	err := errors.Join(metrics.WriteTrace(o.env.TraceDir, o.proc, name), metrics.WriteFinal(o.env.FinalDir, o.proc))
	if o.srv != nil {
		err = errors.Join(err, o.srv.Close())
	}
	return err
}
