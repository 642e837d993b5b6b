package transporttest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/gaspigo/gaspigo/transport"
)

// What the transports' own tests share: a cluster of transports that know
// each other, started with Recorders, a bounded context, and failures
// collected on transport goroutines.

// Addressed is a transport whose peers are given by address: transport/tcp
// and transport/shm.
type Addressed interface {
	transport.Transport
	// Addr is the address the peers are given for this transport.
	Addr() string
	// SetPeers gives the transport its peers' addresses.
	SetPeers(map[transport.Proc]string) error
}

// NewCluster returns n transports for procs 0..n-1, made by newT and each
// given the addresses of all n, not started; each is closed at t's cleanup.
func NewCluster[T Addressed](t testing.TB, n int, newT func(self transport.Proc) (T, error)) []T {
	t.Helper()
	ts := make([]T, n)
	addrs := make(map[transport.Proc]string, n)
	for i := range ts {
		tr, err := newT(transport.Proc(i))
		if err != nil {
			t.Fatalf("New(proc %d): %v", i, err)
		}
		t.Cleanup(func() { _ = tr.Close() })
		ts[i] = tr
		addrs[transport.Proc(i)] = tr.Addr()
	}
	for i, tr := range ts {
		if err := tr.SetPeers(addrs); err != nil {
			t.Fatalf("SetPeers(proc %d): %v", i, err)
		}
	}
	return ts
}

// StartAll starts ts[i] with a new Recorder and returns the recorders.
func StartAll[T transport.Transport](t testing.TB, ts []T) []*Recorder {
	t.Helper()
	recs := make([]*Recorder, len(ts))
	for i, tr := range ts {
		recs[i] = NewRecorder()
		if err := tr.Start(recs[i]); err != nil {
			t.Fatalf("Start(proc %d): %v", i, err)
		}
	}
	return recs
}

// Context returns a context that ends after d, or when t ends; it is
// canceled at t's cleanup.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// Errors collects failures seen on transport goroutines (the first 20),
// to be reported from the test goroutine: a handler never calls t.Fatal.
// The zero value is ready to use.
type Errors struct {
	mu   sync.Mutex
	errs []string
}

// Add records one failure.
func (e *Errors) Add(format string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.errs) < 20 {
		e.errs = append(e.errs, fmt.Sprintf(format, args...))
	}
}

// Report fails t with each failure recorded.
func (e *Errors) Report(t testing.TB) {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range e.errs {
		t.Error(s)
	}
}
