package pgas

import (
	"context"
	"reflect"

	"github.com/gaspigo/gaspigo/transport"
)

// Watch returns a channel that is closed at the first event that can
// make a wait on the given ranks futile: a new view applied (a failure
// declared, a promotion, a newer epoch), the runtime stopped (fenced, or
// given up by its membership) or closed, or the connection to the process
// that holds one of ranks lost (StateVector marks the rank Suspect at
// once; the detector confirms or refutes it). An event that happened
// before the call closes it at once, except a view applied before the
// call (check Usable for that). It is the failure-aware wait of the
// layers above: select on it where a peer may never answer, and re-check
// Usable and StateVector once it closes.
//
// The watch is one goroutine, which ends when the channel closes or ctx
// ends (the channel then stays open).
func (rt *Runtime) Watch(ctx context.Context, ranks []int) <-chan struct{} {
	cases := []reflect.SelectCase{
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())},
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(rt.viewChan())}, // before the view it guards
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(rt.closed)},
	}
	v := rt.view.Load()
	for _, r := range ranks {
		if r < 0 || r >= len(v.ranks) {
			continue
		}
		if p := v.ranks[r]; p != transport.NoProc && p != rt.self {
			cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(rt.peers.get(p).down)})
		}
	}
	out := make(chan struct{})
	go func() {
		if i, _, _ := reflect.Select(cases); i != 0 {
			close(out)
		}
	}()
	return out
}
