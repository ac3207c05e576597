package harness

import (
	"fmt"
	"os"
	"slices"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// waitSet is the lock waits of every contender of one hot-key run, all rounds merged.
type waitSet struct {
	title string
	waits map[string][]time.Duration
	order []string // contenders in table order
}

// minWaitMs is where the log axis starts: waits below it are drawn at it.
const minWaitMs = 0.01

// writePlot draws one panel per set: the cumulative distribution of lock waits per contender, on a log
// axis. No sets: no file.
func writePlot(path string, sets []waitSet) error {
	if len(sets) == 0 {
		return nil
	}
	row := make([]*plot.Plot, len(sets))
	for i, s := range sets {
		p, err := waitPanel(s)
		if err != nil {
			return err
		}
		row[i] = p
	}
	return savePNG(path, drawRow(row))
}

// waitPanel is the panel of one set: a line per contender.
func waitPanel(s waitSet) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "lock waits, one hot key, 3 lockers x 16 goroutines, " + s.title
	p.X.Label.Text = "wait (ms, log scale)"
	p.Y.Label.Text = "fraction of acquisitions"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Min, p.Y.Max = 0, 1
	p.Add(plotter.NewGrid())
	p.X.Min = minWaitMs
	p.Legend.Top = false // bottom right: the empty corner of a CDF
	p.Legend.Left = false
	p.Legend.XOffs = -vg.Millimeter * 2
	p.Legend.YOffs = vg.Millimeter * 6
	for j, name := range s.order {
		if err := addCDF(p, j, name, s.waits[name]); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// addCDF draws the distribution of waits as line j of p, named in the legend; no waits, no line.
func addCDF(p *plot.Plot, j int, name string, waits []time.Duration) error {
	if len(waits) == 0 {
		return nil
	}
	ws := slices.Sorted(slices.Values(waits))
	line, err := plotter.NewLine(cdf(ws, 400))
	if err != nil {
		return err
	}
	line.Color = plotutil.Color(j)
	line.Dashes = plotutil.Dashes(j)
	line.Width = vg.Points(1.5)
	p.Add(line)
	p.Legend.Add(fmt.Sprintf("%s (n=%d)", name, len(ws)), line)
	return nil
}

// drawRow draws the panels side by side, 7 x 5 inches each, their axes aligned.
func drawRow(row []*plot.Plot) *vgimg.Canvas {
	img := vgimg.New(vg.Length(len(row))*7*vg.Inch, 5*vg.Inch)
	tiles := draw.Tiles{Rows: 1, Cols: len(row), PadX: vg.Inch / 4, PadY: vg.Inch / 8, PadTop: vg.Inch / 8,
		PadBottom: vg.Inch / 8, PadLeft: vg.Inch / 8, PadRight: vg.Inch / 4}
	canvases := plot.Align([][]*plot.Plot{row}, tiles, draw.New(img))
	for i, p := range row {
		p.Draw(canvases[0][i])
	}
	return img
}

func savePNG(path string, img *vgimg.Canvas) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// cdf samples the empirical distribution of sorted at about n points (every point of the tail).
func cdf(sorted []time.Duration, n int) plotter.XYs {
	var xys plotter.XYs
	step := max(1, len(sorted)/n)
	tail := len(sorted) * 99 / 100
	for i := 0; i < len(sorted); i++ {
		if i%step != 0 && i < tail {
			continue
		}
		xys = append(xys, plotter.XY{X: max(minWaitMs, float64(sorted[i])/1e6), Y: float64(i+1) / float64(len(sorted))})
	}
	last := sorted[len(sorted)-1]
	return append(xys, plotter.XY{X: max(minWaitMs, float64(last)/1e6), Y: 1})
}
