package scalesim

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// AttainmentWindow is the sliding window of the plotted SLO attainment.
const AttainmentWindow = 300.0 // seconds

// attainmentFloor clips the attainment panel: a policy below it is drawn on
// the floor, so the 99% line stays readable.
const attainmentFloor = 90.0

// lineStyle is how one policy is drawn: HPA and KEDA often coincide, so KEDA
// is a wide dashed line under HPA's thin solid one and both stay visible.
type lineStyle struct {
	c      color.RGBA
	width  vg.Length
	dashes []vg.Length
}

var styles = map[string]lineStyle{
	"oracle":      {color.RGBA{0, 0, 0, 255}, 1, []vg.Length{vg.Points(2), vg.Points(2)}},
	"causal-ref":  {color.RGBA{120, 120, 120, 255}, 1.5, []vg.Length{vg.Points(6), vg.Points(3)}},
	"impl-ref":    {color.RGBA{0, 140, 140, 255}, 1.5, []vg.Length{vg.Points(4), vg.Points(2)}},
	"neuronetes":  {color.RGBA{214, 39, 40, 255}, 2.2, nil},
	"hpa":         {color.RGBA{31, 119, 180, 255}, 1, nil},
	"keda":        {color.RGBA{255, 127, 14, 255}, 3, []vg.Length{vg.Points(8), vg.Points(4)}},
	"knative-kpa": {color.RGBA{44, 160, 44, 255}, 1, nil},
	"aibrix-apa":  {color.RGBA{148, 103, 189, 255}, 1, nil},
}

// drawOrder puts wide dashed lines first, so thinner ones stay on top.
var drawOrder = []string{"keda", "causal-ref", "oracle", "aibrix-apa", "knative-kpa", "hpa", "neuronetes"}

// WritePNG plots, over time in minutes, the offered load (tokens/s), every
// policy's replicas (warm and starting ones included) and every policy's SLO
// attainment over a sliding AttainmentWindow, three panels sharing the time
// axis, and writes the PNG to path.
func WritePNG(path, title string, o Outcome, attainment float64) error {
	all := append([]Result{o.Oracle, o.Causal.Result}, o.Results...)
	byName := map[string]Result{}
	for _, r := range all {
		byName[r.Policy] = r
	}
	if len(o.Oracle.Series) == 0 {
		return fmt.Errorf("plot %s: nothing to plot", path)
	}
	load := plot.New()
	load.Title.Text = title
	load.Y.Label.Text = "offered load (tokens/s)"
	if err := addLine(load, "", series(o.Oracle.Series, func(p Point) float64 { return p.Load }), lineStyle{c: color.RGBA{80, 80, 80, 255}, width: 1}); err != nil {
		return err
	}
	reps, att := plot.New(), plot.New()
	reps.Y.Label.Text = "replicas (serving, starting, warm)"
	att.Y.Label.Text = fmt.Sprintf("within SLO over %.0f min (%%, clipped at %.0f)", AttainmentWindow/60, attainmentFloor)
	att.X.Label.Text = "time (minutes)"
	att.Y.Min, att.Y.Max = attainmentFloor, 100.2
	for _, name := range drawOrder {
		r, ok := byName[name]
		if !ok {
			continue
		}
		st := styles[name]
		label := fmt.Sprintf("%s %.2f%%, %.2fx ref", name, 100*r.Attainment(), r.ReplicaSeconds/o.Causal.Result.ReplicaSeconds)
		if err := addLine(reps, label, series(r.Series, func(p Point) float64 { return p.Replicas }), st); err != nil {
			return err
		}
		if err := addLine(att, "", rollingAttainment(r.Series), st); err != nil {
			return err
		}
	}
	target := plotter.NewFunction(func(float64) float64 { return 100 * attainment })
	target.Color, target.Dashes, target.Width = color.RGBA{0, 0, 0, 255}, []vg.Length{vg.Points(1), vg.Points(3)}, 1
	att.Add(target)
	att.Legend.Add(fmt.Sprintf("target %.0f%%", 100*attainment), target)
	// Room above the curves for the legend.
	reps.Legend.Top, reps.Legend.Left = true, true
	reps.Y.Min, reps.Y.Max = 0, 1.6*maxReplicas(all)
	load.Y.Min = 0
	minutes := o.Oracle.Series[len(o.Oracle.Series)-1].T / 60
	for _, p := range []*plot.Plot{load, reps, att} {
		p.X.Min, p.X.Max = 0, minutes
		p.X.Tick.Marker = minuteTicks{}
		p.Add(plotter.NewGrid())
	}
	return savePanels(path, []*plot.Plot{load, reps, att})
}

func series(ps []Point, f func(Point) float64) plotter.XYs {
	xy := make(plotter.XYs, len(ps))
	for i, p := range ps {
		xy[i].X, xy[i].Y = p.T/60, f(p)
	}
	return xy
}

// rollingAttainment is the percentage of first tokens within the SLO over the
// last AttainmentWindow at each point (points without first tokens are left
// out), clipped at attainmentFloor.
func rollingAttainment(ps []Point) plotter.XYs {
	var xy plotter.XYs
	for i, p := range ps {
		served, missed := 0, 0
		for j := i; j >= 0 && p.T-ps[j].T < AttainmentWindow; j-- {
			served += ps[j].Served
			missed += ps[j].Misses
		}
		if served == 0 {
			continue
		}
		v := 100 * float64(served-missed) / float64(served)
		xy = append(xy, plotter.XY{X: p.T / 60, Y: math.Max(v, attainmentFloor)})
	}
	return xy
}

func addLine(p *plot.Plot, label string, xy plotter.XYs, st lineStyle) error {
	if len(xy) == 0 {
		return nil
	}
	l, err := plotter.NewLine(xy)
	if err != nil {
		return fmt.Errorf("plot line %s: %w", label, err)
	}
	l.Color, l.Width, l.Dashes = st.c, st.width, st.dashes
	p.Add(l)
	if label != "" {
		p.Legend.Add(label, l)
	}
	return nil
}

// savePanels stacks the plots vertically (the first one shorter), aligned on
// their axes, and writes a PNG.
func savePanels(path string, ps []*plot.Plot) error {
	const w, h = 12 * vg.Inch, 10 * vg.Inch
	img := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(110))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(ps), Cols: 1, PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(8), PadY: vg.Points(6)}
	canvases := plot.Align([][]*plot.Plot{{ps[0]}, {ps[1]}, {ps[2]}}, tiles, dc)
	for i, p := range ps {
		p.Draw(canvases[i][0])
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("plot %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return nil
}

func maxReplicas(rs []Result) float64 {
	m := 1.0
	for _, r := range rs {
		for _, p := range r.Series {
			m = math.Max(m, p.Replicas)
		}
	}
	return m
}

// minuteTicks labels the time axis in whole minutes, about ten major ticks.
type minuteTicks struct{}

// Ticks implements plot.Ticker.
func (minuteTicks) Ticks(lo, hi float64) []plot.Tick {
	step := 60.0
	for _, s := range []float64{1, 2, 5, 10, 15, 20, 30, 60} {
		if (hi-lo)/s <= 12 {
			step = s
			break
		}
	}
	var ts []plot.Tick
	for v := math.Ceil(lo/step) * step; v <= hi+1e-9; v += step {
		ts = append(ts, plot.Tick{Value: v, Label: fmt.Sprintf("%.0f", v)})
		if minor := v + step/2; minor < hi {
			ts = append(ts, plot.Tick{Value: minor})
		}
	}
	return ts
}
