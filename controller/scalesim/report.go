package scalesim

import (
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"text/tabwriter"
)

// WriteTable prints one row per result with costs relative to the oracle, and a
// verdict for NeuroNetes against the targets: >= 99% within SLO, <= 1.15x the
// oracle's replica-seconds, better attainment than every baseline at no more cost.
// iso, keyed by policy name, holds the baselines re-run at NeuroNetes' cost
// (BestIsoCost); when given, it is printed and a baseline that attains as much
// there also fails the verdict. It may be nil.
func WriteTable(w io.Writer, trace string, oracle Result, rs []Result, iso map[string]IsoCost) {
	fmt.Fprintf(w, "trace %s: %d requests\n", trace, oracle.Requests)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\twithin SLO\treplica-s\tx oracle\twarm-s\tscale ops\tflaps\tp95 excess s\t")
	for _, r := range append([]Result{oracle}, rs...) {
		fmt.Fprintf(tw, "%s\t%.2f%%\t%.0f\t%.3f\t%.0f\t%d\t%d\t%.2f\t\n", r.Policy, 100*r.Attainment(), r.ReplicaSeconds,
			r.ReplicaSeconds/oracle.ReplicaSeconds, r.WarmSeconds, r.ScaleOps, r.Flaps, r.P95Excess)
	}
	tw.Flush()
	var nn *Result
	for i := range rs {
		if rs[i].Policy == "neuronetes" {
			nn = &rs[i]
		}
	}
	if nn == nil {
		return
	}
	if len(iso) > 0 {
		writeIsoCost(w, oracle, *nn, rs, iso)
	}
	var fails []string
	if nn.Attainment() < 0.99 {
		fails = append(fails, fmt.Sprintf("attainment %.2f%% < 99%%", 100*nn.Attainment()))
	}
	if r := nn.ReplicaSeconds / oracle.ReplicaSeconds; r > 1.15 {
		fails = append(fails, fmt.Sprintf("cost %.3fx > 1.15x oracle", r))
	}
	for _, b := range rs {
		if b.Policy == nn.Policy {
			continue
		}
		if b.Attainment() >= nn.Attainment() && b.ReplicaSeconds <= nn.ReplicaSeconds {
			fails = append(fails, fmt.Sprintf("%s is as good for no more cost", b.Policy))
		} else if b.Attainment() > nn.Attainment() {
			fails = append(fails, fmt.Sprintf("%s attains more (at %.2fx our cost)", b.Policy, b.ReplicaSeconds/nn.ReplicaSeconds))
		}
		if i, ok := iso[b.Policy]; ok && i.Found && i.Result.Attainment() >= nn.Attainment() {
			fails = append(fails, fmt.Sprintf("%s attains %.2f%% at our cost (target %.3f)", b.Policy, 100*i.Result.Attainment(), i.TargetUtilization))
		}
	}
	if len(fails) == 0 {
		beats := "beats every baseline"
		if len(iso) > 0 {
			beats += " at its default and at our cost"
		}
		fmt.Fprintf(w, "verdict %s: MET (>=99%% SLO, <=1.15x oracle, %s)\n\n", trace, beats)
	} else {
		fmt.Fprintf(w, "verdict %s: NOT MET: %s\n\n", trace, strings.Join(fails, "; "))
	}
}

var palette = []string{"#000000", "#d62728", "#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"}

// WriteSVG plots load (top) and replicas including warm ones (bottom) over time
// for the oracle and every policy.
func WriteSVG(path, title string, oracle Result, rs []Result) error {
	all := append([]Result{oracle}, rs...)
	const W, H, pad, gap = 1000.0, 640.0, 50.0, 40.0
	ph := (H - 2*pad - gap) / 2
	var tMax, lMax, rMax float64
	for _, r := range all {
		for _, p := range r.Series {
			tMax, lMax, rMax = math.Max(tMax, p.T), math.Max(lMax, p.Load), math.Max(rMax, p.Replicas)
		}
	}
	if tMax == 0 || lMax == 0 || rMax == 0 {
		return fmt.Errorf("svg %s: nothing to plot", path)
	}
	x := func(t float64) float64 { return pad + t/tMax*(W-2*pad) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="12">`+"\n", W, H)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/><text x="%.0f" y="20" font-size="15">%s</text>`+"\n", pad, title)
	panel := func(top float64, label string, vmax float64) {
		fmt.Fprintf(&b, `<rect x="%.0f" y="%.1f" width="%.0f" height="%.1f" fill="none" stroke="#999"/>`+"\n", pad, top, W-2*pad, ph)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.1f">%s (max %.0f)</text>`+"\n", pad+4, top+14, label, vmax)
	}
	line := func(top, vmax float64, color string, pts []Point, f func(Point) float64) {
		var s strings.Builder
		for i, p := range pts {
			cmd := "L"
			if i == 0 {
				cmd = "M"
			}
			fmt.Fprintf(&s, "%s%.1f,%.1f ", cmd, x(p.T), top+ph-f(p)/vmax*ph)
		}
		fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="1.2"/>`+"\n", s.String(), color)
	}
	top1, top2 := pad, pad+ph+gap
	panel(top1, "load, tokens/s", lMax)
	line(top1, lMax, "#555", oracle.Series, func(p Point) float64 { return p.Load })
	panel(top2, "replicas incl. warm and starting", rMax)
	for i, r := range all {
		c := palette[i%len(palette)]
		line(top2, rMax, c, r.Series, func(p Point) float64 { return p.Replicas })
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" fill="%s">%s</text>`+"\n", pad+float64(i)*130, H-12, c, r.Policy)
	}
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f">time 0..%.0f s</text>`+"\n", W-pad-120, top2+ph+14, tMax)
	b.WriteString("</svg>\n")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("write svg: %w", err)
	}
	return nil
}
