package main

import (
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gaspigo/gaspigo/apps/internal/cli"
	"github.com/gaspigo/gaspigo/apps/kmeans"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

const plotUsage = `usage: kmeans plot --history FILE --out FILE.png|FILE.svg [--title T]

Draws the SSE of a run's --history CSV, as the excess over the lowest SSE of
the run on a log scale (the usual convergence plot), over the iterations
executed, redone ones included: the redone iterations after a recovery are
drawn in orange,
a failure is a red line, a recovery a green one, a committed checkpoint a
grey tick on the axis. The format follows --out's extension (.png, .svg).

flags:
`

// historyRow is one line of a history CSV.
type historyRow struct {
	step, iter int
	sse        float64
	redo       bool
	events     []string
}

// readHistory parses a --history CSV; an error names the line and what
// is wrong with it.
func readHistory(r io.Reader, name string) ([]historyRow, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	head, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("%s: no header line (%v): give a file written by kmeans --history", name, err)
	}
	if strings.Join(head, ",") != kmeans.HistoryHeader {
		return nil, fmt.Errorf("%s: line 1 is %q, not kmeans --history's header %q", name, strings.Join(head, ","), kmeans.HistoryHeader)
	}
	var rows []historyRow
	for line := 2; ; line++ {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err == nil && len(rec) != 10 {
			err = fmt.Errorf("%d fields, want 10", len(rec))
		}
		var row historyRow
		if err == nil {
			row.step, err = strconv.Atoi(rec[0])
		}
		if err == nil {
			row.iter, err = strconv.Atoi(rec[1])
		}
		if err == nil {
			row.sse, err = strconv.ParseFloat(rec[2], 64)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: line %d: %v", name, line, err)
		}
		row.redo = rec[8] == "1"
		if rec[9] != "" {
			row.events = strings.Split(rec[9], ";")
		}
		rows = append(rows, row)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("%s: no iteration lines", name)
	}
	return rows, nil
}

func plotMain(args []string) int {
	fs := flag.NewFlagSet("kmeans plot", flag.ContinueOnError)
	fs.Usage = func() { fmt.Fprint(fs.Output(), plotUsage); fs.PrintDefaults() }
	in := fs.String("history", "", "history CSV `FILE` written by kmeans --history")
	out := fs.String("out", "", "picture `FILE` to write: .png or .svg")
	title := fs.String("title", "K-means: SSE per iteration executed", "the picture's `title`")
	pos, err := cli.Parse(fs, args, os.Stdout)
	if err == nil && len(pos) > 0 {
		err = cli.Usage("unexpected argument %q: flags only", pos[0])
	}
	if err == nil {
		if err = plotHistory(*in, *out, *title); err != nil {
			err = cli.Usage("%v", err)
		}
	}
	return cli.Status("kmeans plot", err, os.Stderr)
}

func plotHistory(in, out, title string) error {
	if in == "" || out == "" {
		return errors.New("--history FILE and --out FILE are required, e.g. kmeans plot --history h.csv --out h.png")
	}
	switch strings.ToLower(filepath.Ext(out)) {
	case ".png", ".svg":
	default:
		return fmt.Errorf("--out %s: the extension must be .png or .svg", out)
	}
	f, err := os.Open(in)
	if err != nil {
		return fmt.Errorf("--history: %w", err)
	}
	defer f.Close()
	rows, err := readHistory(f, in)
	if err != nil {
		return err
	}
	p, err := historyPlot(rows, title)
	if err != nil {
		return err
	}
	return p.Save(8*vg.Inch, 4.5*vg.Inch, out)
}

var (
	red    = color.RGBA{R: 200, G: 30, B: 30, A: 255}
	green  = color.RGBA{R: 20, G: 140, B: 60, A: 255}
	orange = color.RGBA{R: 240, G: 140, B: 0, A: 255}
	blue   = color.RGBA{R: 30, G: 90, B: 200, A: 255}
	grey   = color.RGBA{R: 130, G: 130, B: 130, A: 255}
)

// historyPlot draws rows: SSE over the steps, failures and recoveries
// as vertical lines, checkpoints as ticks.
func historyPlot(rows []historyRow, title string) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "iterations executed (redone ones included)"
	p.Y.Label.Text = "SSE above the run's lowest (log scale)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top = true
	all, redo, lo, hi := sseAboveLowest(rows)
	if len(all) == 0 {
		return nil, errors.New("every iteration has the same SSE: nothing to draw")
	}
	if err := addSSE(p, all, redo); err != nil {
		return nil, err
	}
	if err := addEvents(p, rows, lo, hi); err != nil {
		return nil, err
	}
	return p, nil
}

// sseAboveLowest returns the points of the SSE line (every step's SSE
// above the run's lowest, which itself has no place on a log scale), those
// of the redone steps, and the smallest and largest value drawn.
func sseAboveLowest(rows []historyRow) (all, redo plotter.XYs, lo, hi float64) {
	best := rows[0].sse
	for _, r := range rows {
		best = min(best, r.sse)
	}
	for _, r := range rows {
		y := r.sse - best
		if y <= 0 {
			continue // the lowest itself: no place on a log scale
		}
		all = append(all, plotter.XY{X: float64(r.step), Y: y})
		if r.redo {
			redo = append(redo, plotter.XY{X: float64(r.step), Y: y})
		}
		if lo == 0 || y < lo {
			lo = y
		}
		hi = max(hi, y)
	}
	return all, redo, lo, hi
}

// addSSE draws the SSE line and marks the redone steps on it.
func addSSE(p *plot.Plot, all, redo plotter.XYs) error {
	line, err := plotter.NewLine(all)
	if err != nil {
		return err
	}
	line.Color, line.Width = blue, vg.Points(1.5)
	p.Add(line)
	p.Legend.Add("SSE", line)
	if len(redo) > 0 {
		sc, err := plotter.NewScatter(redo)
		if err != nil {
			return err
		}
		sc.Color, sc.Shape, sc.Radius = orange, draw.CircleGlyph{}, vg.Points(3)
		p.Add(sc)
		p.Legend.Add("redone after a recovery", sc)
	}
	return nil
}

// addEvents draws the events of the history between the lines they
// follow: a failure and its recovery as vertical lines across [lo, hi]
// (the first of each kind in the legend), a committed checkpoint as a tick
// at the bottom.
func addEvents(p *plot.Plot, rows []historyRow, lo, hi float64) error {
	var legendFail, legendRec, legendCk bool
	for i, r := range rows {
		for _, ev := range r.events {
			kind, text, _ := strings.Cut(ev, ":")
			x := float64(r.step) - 0.5 // between the previous line and this one
			if i == 0 {
				x = float64(r.step)
			}
			switch kind { // a failure and its recovery fall in one gap
			case "failure":
				x -= 0.15
			case "recovery":
				x += 0.15
			}
			var c color.Color
			var dash []vg.Length
			switch kind {
			case "failure":
				c = red
			case "recovery":
				c, dash = green, []vg.Length{vg.Points(4), vg.Points(3)}
			case "checkpoint":
				tick, err := plotter.NewLine(plotter.XYs{{X: x, Y: lo}, {X: x, Y: lo * math.Pow(hi/lo, 0.04)}})
				if err != nil {
					return err
				}
				tick.Color, tick.Width = grey, vg.Points(1)
				p.Add(tick)
				if !legendCk {
					p.Legend.Add("checkpoint committed", tick)
					legendCk = true
				}
				continue
			default:
				continue
			}
			v, err := plotter.NewLine(plotter.XYs{{X: x, Y: lo}, {X: x, Y: hi}})
			if err != nil {
				return err
			}
			v.Color, v.Width, v.Dashes = c, vg.Points(1.5), dash
			p.Add(v)
			if kind == "failure" && !legendFail {
				p.Legend.Add("failure: "+text, v)
				legendFail = true
			}
			if kind == "recovery" && !legendRec {
				p.Legend.Add("recovery: "+text, v)
				legendRec = true
			}
		}
	}
	return nil
}
