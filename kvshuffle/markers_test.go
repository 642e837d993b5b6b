package kvshuffle

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gaspigo/gaspigo/internal/testkit/script"
)

// TestMarkerScripts runs testdata/markers/*.txt through the markers state
// machine and compares the trace with the .golden file beside each
// (internal/testkit/script; -rewrite regenerates them). Script
// language, one step per line, # starts a comment:
//
//	sources N            an A task with N O tasks (sources)
//	marker SI C          marker C arrives from source SI
//	complete C           may checkpoint C be taken (every marker C in)?
//	resume               checkpoint taken: every source flows again
//	pin C FILE...        checkpoint C's state names the files
//	release K            Release(K): checkpoints below K let go
//	rollback C           roll back to checkpoint C: new streams, the
//	                     pins above C dropped
//
// After every step the trace shows the markers, the paused sources and
// the pins.
func TestMarkerScripts(t *testing.T) {
	script.Test(t, "testdata/markers/*.txt", func(*testing.T) script.Interpreter { return &markerRun{} })
}

// markerRun interprets one script.
type markerRun struct{ m *markers }

func (r *markerRun) Exec(out io.Writer, c script.Cmd) error {
	f := strings.Fields(c.Text)
	m := r.m
	var err error
	nums := func(want int) ([]uint64, error) {
		if len(f)-1 != want {
			return nil, fmt.Errorf("%s takes %d numbers", f[0], want)
		}
		var xs []uint64
		for _, a := range f[1:] {
			x, err := strconv.ParseUint(a, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%q: want a number", a)
			}
			xs = append(xs, x)
		}
		return xs, nil
	}
	if f[0] != "sources" && r.m == nil {
		return fmt.Errorf("%q before sources", c.Text)
	}
	var xs []uint64
	switch f[0] {
	case "sources":
		if xs, err = nums(1); err == nil {
			r.m = newMarkers(int(xs[0]))
		}
	case "marker":
		if xs, err = nums(2); err == nil {
			if int(xs[0]) >= len(m.last) {
				err = fmt.Errorf("source %d: the A task has %d", xs[0], len(m.last))
			} else if aerr := m.arrive(int(xs[0]), xs[1]); aerr != nil {
				fmt.Fprintf(out, "  corrupt stream: %v\n", aerr)
			}
		}
	case "complete":
		if xs, err = nums(1); err == nil {
			done, late, cerr := m.complete(xs[0])
			switch {
			case cerr != nil:
				fmt.Fprintf(out, "  refused: source %d %v\n", late, cerr)
			case done:
				fmt.Fprintf(out, "  checkpoint %d may be taken\n", xs[0])
			default:
				var wait []string
				for si, x := range m.last {
					if x != xs[0] {
						wait = append(wait, strconv.Itoa(si))
					}
				}
				fmt.Fprintf(out, "  waiting for the markers of sources %s\n", strings.Join(wait, " "))
			}
		}
	case "resume":
		m.resume()
	case "pin":
		if len(f) < 3 {
			err = fmt.Errorf("pin C FILE...")
			break
		}
		c, perr := strconv.ParseUint(f[1], 10, 64)
		if perr != nil {
			err = fmt.Errorf("pin: checkpoint %q: want a number", f[1])
			break
		}
		for _, file := range f[2:] {
			m.pin(c, file)
		}
	case "release":
		if xs, err = nums(1); err == nil {
			freed := m.release(func(c uint64) bool { return c < xs[0] })
			fmt.Fprintf(out, "  freed %v\n", freed)
		}
	case "rollback":
		if xs, err = nums(1); err == nil {
			m.resetStreams(len(m.last))
			freed := m.release(func(c uint64) bool { return c > xs[0] })
			fmt.Fprintf(out, "  freed %v\n", freed)
		}
	default:
		err = fmt.Errorf("unknown step %q", f[0])
	}
	if err != nil {
		return err
	}
	m = r.m
	var paused []string
	for si, p := range m.paused {
		if p {
			paused = append(paused, strconv.Itoa(si))
		}
	}
	var pins []string
	for _, c := range slices.Sorted(maps.Keys(m.pins)) {
		pins = append(pins, fmt.Sprintf("%d:%s", c, strings.Join(m.pins[c], ",")))
	}
	fmt.Fprintf(out, "  markers=%v paused=[%s] pins=[%s]\n", m.last, strings.Join(paused, " "), strings.Join(pins, " "))
	return nil
}
