package scalesim

import (
	"fmt"
	"image/color"
	"math"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// CurveMultipliers scale a reference's alpha for its cost-versus-attainment
// curve: the reference's own point and runs cheaper and dearer around it.
var CurveMultipliers = []float64{0.7, 0.85, 1, 1.15, 1.3, 1.6}

// CurveAttainments are the attainment targets NeuroNetes is run at for its curve.
var CurveAttainments = []float64{0.95, 0.98, 0.99, 0.995}

// NeedSeconds integrates the trace's need (Need, 1 s bins: the replicas its
// demand keeps busy with perfect placement) over the evaluated part, for the
// mean utilization of the replicas a policy provisions.
func NeedSeconds(tr Trace, m Model) float64 {
	need := Need(tr, m, 1)
	end := min(int(tr.Duration()), len(need))
	s := 0.0
	for t := int(m.Warmup.Seconds()); t < end; t++ {
		s += need[t]
	}
	return s
}

// Utilization is the mean utilization of r's provisioned replicas: the
// trace's need-seconds over r's replica-seconds (0 when either is unknown).
func Utilization(needSeconds float64, r Result) float64 {
	if needSeconds <= 0 || r.ReplicaSeconds <= 0 {
		return 0
	}
	return needSeconds / r.ReplicaSeconds
}

// ReferenceCurve runs the causal rule at lookback for alpha x each multiplier.
func ReferenceCurve(tr Trace, m Model, lookback int, alpha float64, maxReplicas int) []Result {
	need := Need(tr, m, causalBinW)
	var out []Result
	for _, k := range CurveMultipliers {
		out = append(out, RunCausal(tr, m, need, lookback, alpha*k, maxReplicas))
	}
	return out
}

// curveFloor clips the attainment axis of the curve.
const curveFloor = 90.0

// WriteCurveSVG plots, for each policy of curves (name -> runs), attainment
// (% within the SLO, clipped at curveFloor) against cost (replica-seconds
// over ref), one line with markers per policy, the attainment target
// dashed, and writes the SVG to path.
func WriteCurveSVG(path, title string, curves map[string][]Result, ref, attainment float64) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "cost: replica-seconds over the hindsight reference's"
	p.Y.Label.Text = fmt.Sprintf("within the SLO (%%, clipped at %.0f)", curveFloor)
	p.Y.Min, p.Y.Max = curveFloor, 100.2
	p.Add(plotter.NewGrid())
	names := make([]string, 0, len(curves))
	for n := range curves {
		names = append(names, n)
	}
	sort.Strings(names)
	shapes := []draw.GlyphDrawer{draw.CircleGlyph{}, draw.SquareGlyph{}, draw.TriangleGlyph{}, draw.CrossGlyph{}, draw.PlusGlyph{},
		draw.RingGlyph{}, draw.BoxGlyph{}, draw.PyramidGlyph{}}
	for i, n := range names {
		rs := append([]Result(nil), curves[n]...)
		sort.Slice(rs, func(a, b int) bool { return rs[a].ReplicaSeconds < rs[b].ReplicaSeconds })
		xy := make(plotter.XYs, 0, len(rs))
		for _, r := range rs {
			xy = append(xy, plotter.XY{X: r.ReplicaSeconds / ref, Y: math.Max(100*r.Attainment(), curveFloor)})
		}
		if len(xy) == 0 {
			continue
		}
		st, ok := styles[n]
		if !ok {
			st = lineStyle{c: color.RGBA{0, 140, 140, 255}, width: 1.5, dashes: []vg.Length{vg.Points(4), vg.Points(2)}}
		}
		l, s, err := plotter.NewLinePoints(xy)
		if err != nil {
			return fmt.Errorf("curve %s: %w", n, err)
		}
		l.Color, l.Width, l.Dashes = st.c, st.width, st.dashes
		s.Color, s.Shape, s.Radius = st.c, shapes[i%len(shapes)], vg.Points(3.5)
		p.Add(l, s)
		p.Legend.Add(n, l, s)
	}
	target := plotter.NewFunction(func(float64) float64 { return 100 * attainment })
	target.Color, target.Dashes, target.Width = color.RGBA{0, 0, 0, 255}, []vg.Length{vg.Points(1), vg.Points(3)}, 1
	p.Add(target)
	p.Legend.Add(fmt.Sprintf("target %.1f%%", 100*attainment), target)
	p.Legend.Top, p.Legend.Left = false, false
	p.Legend.YOffs, p.Legend.XOffs = vg.Points(12), -vg.Points(6)
	if err := p.Save(9*vg.Inch, 6*vg.Inch, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
