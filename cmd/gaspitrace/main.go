package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"image/color"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/gaspigo/gaspigo/internal/buildinfo"
	"github.com/gaspigo/gaspigo/obs"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gaspitrace", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	version := fs.Bool("version", false, "print gaspitrace's version and exit")
	in := fs.String("trace", "", "trace `FILE` written by gaspirun --trace")
	out := fs.String("out", "", "picture `FILE`: .png or .svg")
	window := fs.String("window", "recovery", "`recovery` (around the first recovery) or all")
	from := fs.Duration("from", 0, "window start `D` after the first event (with --to; overrides --window)")
	to := fs.Duration("to", 0, "window end `D` after the first event")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stdout, "usage: gaspitrace --trace FILE --out FILE.png|FILE.svg [--window recovery|all | --from D --to D]")
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return 0
		}
		fmt.Fprintf(stderr, "gaspitrace: %v\nRun 'gaspitrace --help' for the flags.\n", err)
		return 2
	}
	if *version {
		fmt.Fprintln(stdout, buildinfo.Version("gaspitrace"))
		return 0
	}
	if err := draw1(*in, *out, *window, *from, *to); err != nil {
		fmt.Fprintln(stderr, "gaspitrace:", err)
		return 2
	}
	return 0
}

func draw1(in, out, window string, from, to time.Duration) error {
	if in == "" || out == "" {
		return errors.New("--trace FILE and --out FILE are required")
	}
	if ext := strings.ToLower(filepath.Ext(out)); ext != ".png" && ext != ".svg" {
		return fmt.Errorf("--out %s: the extension must be .png or .svg", out)
	}
	b, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	var tr obs.ChromeTrace
	if err := json.Unmarshal(b, &tr); err != nil {
		return fmt.Errorf("%s is not a Chrome trace (gaspirun --trace): %w", in, err)
	}
	var w [2]float64 // window, µs
	switch {
	case to > 0:
		t0 := firstTS(tr.TraceEvents)
		w = [2]float64{t0 + float64(from.Microseconds()), t0 + float64(to.Microseconds())}
	case window == "all":
		w = [2]float64{firstTS(tr.TraceEvents), lastTS(tr.TraceEvents)}
	case window == "recovery":
		if w, err = recoveryWindow(tr.TraceEvents); err != nil {
			return err
		}
	default:
		return fmt.Errorf("--window %q: want recovery or all", window)
	}
	p, err := timeline(tr.TraceEvents, w)
	if err != nil {
		return err
	}
	return p.Save(10*vg.Inch, 4.5*vg.Inch, out)
}

func firstTS(evs []obs.ChromeEvent) float64 {
	t := -1.0
	for _, e := range evs {
		if e.Ph != "M" && (t < 0 || e.TS < t) {
			t = e.TS
		}
	}
	return t
}

func lastTS(evs []obs.ChromeEvent) float64 {
	t := 0.0
	for _, e := range evs {
		t = max(t, e.TS+e.Dur)
	}
	return t
}

// recoveryWindow is 200 ms before the first failure detection to 300 ms
// after the last restore of that recovery ends.
func recoveryWindow(evs []obs.ChromeEvent) ([2]float64, error) {
	det := -1.0
	for _, e := range evs {
		if e.Name == "failure detection" && (det < 0 || e.TS < det) {
			det = e.TS
		}
	}
	if det < 0 {
		return [2]float64{}, errors.New("the trace has no failure detection: give --window all")
	}
	end := det
	for _, e := range evs {
		if e.Cat == "recovery" && e.TS >= det && e.TS < det+30e6 {
			end = max(end, e.TS+e.Dur)
		}
	}
	return [2]float64{det - 200e3, end + 300e3}, nil
}

// category colours, in legend order.
var cats = []struct {
	cat   string
	color color.RGBA
}{
	{"iteration", color.RGBA{R: 120, G: 160, B: 220, A: 255}},
	{"checkpoint", color.RGBA{R: 150, G: 150, B: 150, A: 255}},
	{"detection", color.RGBA{R: 210, G: 40, B: 40, A: 255}},
	{"membership", color.RGBA{R: 150, G: 60, B: 180, A: 255}},
	{"recovery", color.RGBA{R: 30, G: 150, B: 70, A: 255}},
	{"shuffle", color.RGBA{R: 240, G: 150, B: 20, A: 255}},
}

// timeline draws the spans within w, one row per process (pid).
func timeline(evs []obs.ChromeEvent, w [2]float64) (*plot.Plot, error) {
	names := map[int]string{}
	var pids []int
	for _, e := range evs {
		if e.Ph == "M" && e.Name == "process_name" {
			if n, ok := e.Args["name"].(string); ok {
				names[e.PID] = n
			}
		}
		if !slices.Contains(pids, e.PID) {
			pids = append(pids, e.PID)
		}
	}
	slices.Sort(pids)
	row := map[int]float64{}
	var ticks []plot.Tick
	for i, pid := range pids {
		y := float64(len(pids) - 1 - i)
		row[pid] = y
		n := names[pid]
		if n == "" {
			n = fmt.Sprintf("proc %d", pid)
		}
		ticks = append(ticks, plot.Tick{Value: y, Label: n})
	}
	p := plot.New()
	p.Title.Text = "gaspirun --trace: a rank SIGKILLed and recovered"
	p.X.Label.Text = "milliseconds"
	p.Y.Tick.Marker = plot.ConstantTicks(ticks)
	p.Y.Min, p.Y.Max = -0.6, float64(len(pids))+0.9 // headroom for the legend
	p.X.Min, p.X.Max = 0, (w[1]-w[0])/1e3
	p.Legend.Top = true
	ms := func(ts float64) float64 { return (ts - w[0]) / 1e3 }
	used := map[string]bool{}
	var instants plotter.XYs
	for _, c := range cats {
		for _, e := range evs {
			if e.Cat != c.cat || e.Ph == "M" {
				continue
			}
			y := row[e.PID]
			if e.Ph == "i" {
				continue
			}
			a, b := max(e.TS, w[0]), min(e.TS+e.Dur, w[1])
			if b < a {
				continue
			}
			// The whole recovery is a thin bar under its phases; the
			// checkpoint restore inside the restore a narrower one.
			lo, hi := y-0.3, y+0.3
			col := c.color
			switch e.Name {
			case "recovery":
				lo, hi = y-0.42, y-0.34
			case "wait for the new view":
				col = color.RGBA{R: 140, G: 210, B: 150, A: 255}
			case "checkpoint restore":
				lo, hi = y-0.15, y+0.15
				col = color.RGBA{R: 10, G: 90, B: 40, A: 255}
			}
			x0, x1 := ms(a), max(ms(b), ms(a)+(w[1]-w[0])/1e3*0.004) // a visible sliver for short spans
			poly, err := plotter.NewPolygon(plotter.XYs{{X: x0, Y: lo}, {X: x1, Y: lo}, {X: x1, Y: hi}, {X: x0, Y: hi}})
			if err != nil {
				return nil, err
			}
			poly.Color = col
			poly.LineStyle.Width = vg.Points(0.3)
			poly.LineStyle.Color = color.White
			p.Add(poly)
			if !used[c.cat] {
				used[c.cat] = true
				p.Legend.Add(c.cat, poly)
			}
		}
	}
	for _, e := range evs {
		if e.Ph == "i" && e.Name == "view applied" && e.TS >= w[0] && e.TS <= w[1] {
			instants = append(instants, plotter.XY{X: ms(e.TS), Y: row[e.PID] + 0.42})
		}
	}
	if len(instants) > 0 {
		sc, err := plotter.NewScatter(instants)
		if err != nil {
			return nil, err
		}
		sc.Shape, sc.Color, sc.Radius = draw.TriangleGlyph{}, color.Black, vg.Points(3)
		p.Add(sc)
		p.Legend.Add("view applied", sc)
	}
	return p, nil
}
