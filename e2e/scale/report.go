package scale

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// TargetDemandRatio is the target (issue 21): the MIG-claim pods' scheduling-algorithm p99 in the
// demand-shaped layout at most 1.5x the whole-GPU baseline's on the same nodes. Only ratios are
// judged; absolute times are reported (the baseline alone exceeds 30 ms on 2 shared cores).
const TargetDemandRatio = 1.5

// Verdict is the outcome of a comparison: Judged is false when a layout it needs did not run.
type Verdict struct {
	Judged bool
	OK     bool
	Ratio  float64
	Nodes  int
	// Against is the denominator's layout: empty for the whole-GPU baseline (TargetDemandRatio),
	// LayoutNVIDIA for NVIDIA's slices (TargetNVIDIARatio).
	Against string
}

// String is the verdict line the benchmark prints last.
func (v Verdict) String() string {
	if v.Against == LayoutNVIDIA {
		if !v.Judged {
			return "scale bench: VERDICT: none (the NVIDIA target compares mig-demand with nvidia-dynamic; one did not run)"
		}
		return fmt.Sprintf("scale bench: VERDICT: %s: mig-demand MIG-claim pods' scheduling-algorithm p99 at %d nodes is %.2fx that on the slices NVIDIA's DRA driver publishes (nvidia-dynamic; target <= %.1fx)",
			passFail(v.OK), v.Nodes, v.Ratio, TargetNVIDIARatio)
	}
	if !v.Judged {
		return "scale bench: VERDICT: none (the target judges the mig-demand layout, which did not run)"
	}
	return fmt.Sprintf("scale bench: VERDICT: %s: mig-demand MIG-claim pods' scheduling-algorithm p99 at %d nodes is %.2fx the whole-GPU baseline's (target <= %.1fx)",
		passFail(v.OK), v.Nodes, v.Ratio, TargetDemandRatio)
}

func ms(s float64) string {
	if math.IsNaN(s) {
		return "-"
	}
	return fmt.Sprintf("%.1f", s*1000)
}

func ratio(a, b float64) float64 {
	if b == 0 || math.IsNaN(a) || math.IsNaN(b) {
		return math.NaN()
	}
	return a / b
}

// Totals returns the pods bound and the pods/s of all phases together.
func (r RunResult) Totals() (bound int, podsPerSec float64) {
	var wall time.Duration
	for _, p := range r.Phases {
		bound += p.Bound
		wall += p.Wall
	}
	if wall > 0 {
		podsPerSec = float64(bound) / wall.Seconds()
	}
	return bound, podsPerSec
}

// MIGAlgorithmP99 returns the largest scheduling-algorithm p99 over the MIG kinds' phases (NaN if
// none ran). The algorithm duration (filter and score) is what the modelling costs; the attempt
// duration adds the binding cycle's API calls, i.e. the apiserver's latency.
func (r RunResult) MIGAlgorithmP99() float64 {
	v := math.NaN()
	for _, p := range r.Phases {
		if p.Kind.IsMIG() && !math.IsNaN(p.Algorithm.P99) && (math.IsNaN(v) || p.Algorithm.P99 > v) {
			v = p.Algorithm.P99
		}
	}
	return v
}

// SchedulerCPUPerPod returns the kube-scheduler's CPU time per bound pod (NaN if not sampled). It
// is what the layout costs the scheduler, and unlike latencies it hardly depends on how much CPU
// other processes leave the scheduler.
func (r RunResult) SchedulerCPUPerPod() float64 {
	u, ok := r.Usage["kube-scheduler"]
	bound, _ := r.Totals()
	if !ok || bound == 0 {
		return math.NaN()
	}
	return u.CPU.Seconds() / float64(bound)
}

// WriteRun prints one run's table: per phase, pods/s, end-to-end and scheduler quantiles.
func WriteRun(w io.Writer, r RunResult) {
	fmt.Fprintf(w, "\nscale bench: layout=%s nodes=%d slices/node=%d devices/node=%d counterSets/node=%d publish=%s profiles=%s\n",
		r.Layout, r.Nodes, r.SlicesPerNode, r.DevicesPerNode, r.CounterSetsPerNode, r.PublishTime.Round(time.Millisecond), strings.Join(r.Profiles, ","))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "kind\tpods\tbound\tpods/s\te2e p50 ms\te2e p99 ms\tattempt p50 ms\tattempt p99 ms\talgo p50 ms\talgo p99 ms\tDRA Filter p50 ms\tDRA Filter p99 ms\tunschedulable\t")
	for _, p := range r.Phases {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.0f\t\n", p.Kind, p.Pods, p.Bound, p.PodsPerSec,
			ms(p.E2E.P50), ms(p.E2E.P99), ms(p.Attempt.P50), ms(p.Attempt.P99), ms(p.Algorithm.P50), ms(p.Algorithm.P99),
			ms(p.DRAFilter.P50), ms(p.DRAFilter.P99), p.Unschedulable)
	}
	bound, pps := r.Totals()
	fmt.Fprintf(tw, "all\t\t%d\t%.1f\t\t\t\t\t\t\t\t\t\t\n", bound, pps)
	_ = tw.Flush()
	names := make([]string, 0, len(r.Usage))
	for n := range r.Usage {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		u := r.Usage[n]
		perPod := 0.0
		if bound > 0 {
			perPod = u.CPU.Seconds() * 1000 / float64(bound)
		}
		fmt.Fprintf(w, "  %-16s cpu %.1fs over %s (%.2f cores, %.1f ms/pod), peak RSS %d MiB\n", n, u.CPU.Seconds(), u.Wall.Round(time.Second), u.Cores(), perPod, u.PeakRSS>>20)
	}
	v := r.Verify
	status := "OK"
	if !v.OK() {
		status = "FAILED"
	}
	fmt.Fprintf(w, "  verify %s: %d/%d pods bound, %d/%d claims allocated, %d nodes checked in full (%d claims, %d NVLink pairs)\n",
		status, v.Pods-v.Unbound, v.Pods, v.Claims-v.Unallocated, v.Claims, v.CheckedNodes, v.CheckedClaims, v.Pairs)
	for i, p := range v.Problems {
		if i == 10 {
			fmt.Fprintf(w, "    ... %d more\n", len(v.Problems)-10)
			break
		}
		fmt.Fprintf(w, "    problem: %s\n", p)
	}
}

// WriteComparison prints, for every MIG layout against the whole-GPU baseline, the ratios per kind,
// the MIG-claim pods' scheduling-algorithm p99 (absolute and as a ratio) and the scheduler's CPU per
// pod. It returns the verdict on the demand-shaped layout (the last one when several ran).
func WriteComparison(w io.Writer, base RunResult, runs []RunResult) Verdict {
	var v Verdict
	for _, r := range runs {
		if r.Layout == base.Layout {
			continue
		}
		fmt.Fprintf(w, "\nscale bench: ratio %s / %s at %d nodes (baseline maps MIG kinds to one whole GPU each)\n", r.Layout, base.Layout, r.Nodes)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "kind\talgo p50 x\talgo p99 x\tattempt p99 x\te2e p99 x\tpods/s x\t")
		for _, p := range r.Phases {
			b, found := base.Phase(p.Kind)
			if !found {
				continue
			}
			fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t\n", p.Kind, ratio(p.Algorithm.P50, b.Algorithm.P50), ratio(p.Algorithm.P99, b.Algorithm.P99),
				ratio(p.Attempt.P99, b.Attempt.P99), ratio(p.E2E.P99, b.E2E.P99), ratio(p.PodsPerSec, b.PodsPerSec))
		}
		_, pps := r.Totals()
		_, bpps := base.Totals()
		fmt.Fprintf(tw, "all\t\t\t\t\t%.2f\t\n", ratio(pps, bpps))
		_ = tw.Flush()
		fmt.Fprintf(w, "  kube-scheduler CPU per pod %s ms vs %s ms: %.2fx\n", ms(r.SchedulerCPUPerPod()), ms(base.SchedulerCPUPerPod()),
			ratio(r.SchedulerCPUPerPod(), base.SchedulerCPUPerPod()))
		if !layoutName(r.Layout).isMIG() {
			continue
		}
		p99, bp99 := r.MIGAlgorithmP99(), base.MIGAlgorithmP99()
		rel := ratio(p99, bp99)
		fmt.Fprintf(w, "  MIG-claim pods' scheduling-algorithm p99 %s ms (baseline %s ms): %.2fx\n", ms(p99), ms(bp99), rel)
		if r.Layout == LayoutMIGDemand {
			v = Verdict{Judged: true, OK: rel <= TargetDemandRatio, Ratio: rel, Nodes: r.Nodes}
		}
	}
	return v
}

// layoutName lets report code ask whether a layout name publishes MIG.
type layoutName string

func (l layoutName) isMIG() bool {
	return strings.HasPrefix(string(l), "mig") || string(l) == LayoutNVIDIA
}

// WriteNVIDIAComparison prints the demand-shaped layout against NVIDIA's on the same nodes: devices
// per node, per-kind algorithm p99 ratios, the MIG-claim pods' algorithm p99 and the scheduler's CPU
// per pod; it returns the verdict on TargetNVIDIARatio (not judged when either did not run).
func WriteNVIDIAComparison(w io.Writer, runs []RunResult) Verdict {
	var d, n *RunResult
	for i := range runs {
		switch runs[i].Layout {
		case LayoutMIGDemand:
			d = &runs[i]
		case LayoutNVIDIA:
			n = &runs[i]
		}
	}
	if d == nil || n == nil {
		return Verdict{Against: LayoutNVIDIA}
	}
	fmt.Fprintf(w, "\nscale bench: ratio %s / %s at %d nodes (NeuroNetes' slices / NVIDIA's; devices per node %d / %d)\n",
		d.Layout, n.Layout, d.Nodes, d.DevicesPerNode, n.DevicesPerNode)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "kind\talgo p50 x\talgo p99 x\tattempt p99 x\tpods/s x\t")
	for _, p := range d.Phases {
		b, found := n.Phase(p.Kind)
		if !found {
			continue
		}
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.2f\t%.2f\t\n", p.Kind, ratio(p.Algorithm.P50, b.Algorithm.P50), ratio(p.Algorithm.P99, b.Algorithm.P99),
			ratio(p.Attempt.P99, b.Attempt.P99), ratio(p.PodsPerSec, b.PodsPerSec))
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "  kube-scheduler CPU per pod %s ms vs %s ms: %.2fx\n", ms(d.SchedulerCPUPerPod()), ms(n.SchedulerCPUPerPod()),
		ratio(d.SchedulerCPUPerPod(), n.SchedulerCPUPerPod()))
	p99, np99 := d.MIGAlgorithmP99(), n.MIGAlgorithmP99()
	rel := ratio(p99, np99)
	fmt.Fprintf(w, "  MIG-claim pods' scheduling-algorithm p99 %s ms (NVIDIA's slices %s ms): %.2fx\n", ms(p99), ms(np99), rel)
	return Verdict{Judged: !math.IsNaN(rel), OK: rel <= TargetNVIDIARatio, Ratio: rel, Nodes: d.Nodes, Against: LayoutNVIDIA}
}

func passFail(b bool) string {
	if b {
		return "PASS"
	}
	return "FAIL"
}
