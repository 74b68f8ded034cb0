// Command autoscale-sim replays LLM request traces against a replica model and
// compares NeuroNetes' adaptive autoscaler with the HPA, KEDA, Knative KPA,
// AIBrix APA, the causal reference (the oracle's rule fed only the past) and
// an oracle that knows the future. It prints a table and a verdict per trace,
// writes a PNG plot per trace, prints the overall verdict last and exits 1
// when a target is missed (2 when a trace cannot be read or a flag is bad).
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/neuronetes/neuronetes/controller/cost"
	"github.com/neuronetes/neuronetes/controller/scalesim"
)

type options struct {
	traces        string
	tune          string
	out           string
	maxDur        time.Duration
	model         scalesim.Model
	slo           string
	sloPercentile float64
	sloQueueing   time.Duration
	cfg           scalesim.Config
	attainment    float64
	parallel      int
	explain       int
	priceTable    string
	instanceType  string
	capacityType  string
	nodePrice     float64
	dailyBudget   float64
	pricing       scalesim.Pricing
}

func parseFlags() options {
	var o options
	flag.StringVar(&o.traces, "trace", "", "comma-separated traces: files (.csv Azure LLM inference, .jsonl Mooncake) or synthetic:<dip|ramp|burst|diurnal>[:<seed>[:<minutes>]]")
	flag.StringVar(&o.tune, "tune", "", "comma-separated traces (as --trace) the implementable reference is tuned on, leaving out the trace it is scored on (empty: the --trace traces)")
	flag.StringVar(&o.out, "out", ".local/bench/autoscale", "directory for the PNG plots")
	flag.DurationVar(&o.maxDur, "max-duration", 0, "replay only the first part of each trace (0: all)")
	flag.Float64Var(&o.model.PrefillTPS, "prefill-tps", 2000, "prompt tokens/s one replica prefills")
	flag.Float64Var(&o.model.DecodeTPS, "decode-tps", 30, "generated tokens/s of one sequence")
	flag.IntVar(&o.model.Slots, "slots", 16, "sequences one replica holds")
	flag.DurationVar(&o.model.ColdStart, "cold-start", 60*time.Second, "replica cold start time")
	flag.DurationVar(&o.model.WarmActivation, "warm-activation", 5*time.Second, "warm replica activation time")
	flag.StringVar(&o.slo, "ttft-slo", "auto", "TTFT SLO (raw time to first token), a duration, or auto: the unloaded TTFT of the trace's --slo-prompt-percentile prompt plus --slo-queueing")
	flag.Float64Var(&o.sloPercentile, "slo-prompt-percentile", 99.9, "prompt percentile of the auto SLO")
	flag.DurationVar(&o.sloQueueing, "slo-queueing", 2*time.Second, "queueing allowance of the auto SLO")
	flag.DurationVar(&o.model.Step, "step", 100*time.Millisecond, "simulation step")
	flag.DurationVar(&o.model.Warmup, "warmup", 5*time.Minute, "initial part of each trace excluded from the evaluation of every policy")
	flag.IntVar(&o.cfg.MaxReplicas, "max-replicas", 64, "max replicas of every policy")
	flag.Float64Var(&o.cfg.TargetUtilization, "target-utilization", 0.7, "baselines' per-pod concurrency target as a fraction of slots")
	flag.Float64Var(&o.cfg.PrewarmPercent, "prewarm-percent", 0, "NeuroNetes warm pool in percent of max replicas (warmpool.Target, rounded up)")
	flag.Float64Var(&o.attainment, "attainment", 99, "percent of requests NeuroNetes holds within the SLO, and the verdict's target")
	flag.BoolVar(&o.cfg.Robust, "robust", false, "NeuroNetes chooses its scale and memory by replaying the last hour of demand (scalepolicy.Adaptive.Robust)")
	flag.BoolVar(&o.cfg.StatedCapacity, "stated-capacity", false, "NeuroNetes sizes from the stated tokens-per-second target instead of its learned capacity model (scalepolicy.Adaptive.Capacity, on by default)")
	flag.IntVar(&o.explain, "explain", 0, "after each trace, explain NeuroNetes' replica-seconds above the hindsight reference: one line every this many seconds and the excess by the rule that held its target (0: off)")
	flag.IntVar(&o.parallel, "parallel", 2, "simulations run at once")
	flag.StringVar(&o.priceTable, "price-table", "deploy/examples/autoscaling/06-price-table.yaml", "ConfigMap manifest of node prices, as the controller's --price-table (controller/cost)")
	flag.StringVar(&o.instanceType, "instance-type", "g5.12xlarge", "instance type of the simulated replicas' nodes (one replica per node)")
	flag.StringVar(&o.capacityType, "capacity-type", "on-demand", "capacity type of those nodes: on-demand or spot")
	flag.Float64Var(&o.nodePrice, "node-price", -1, "$/hour of those nodes, as the neuronetes.io/price-per-hour annotation (< 0: from --price-table)")
	flag.Float64Var(&o.dailyBudget, "daily-budget", 1000, "daily budget in $ the spend per day is compared with (seed 001's budget-pool: 1000; 0: none)")
	flag.Parse()
	return o
}

func main() {
	o := parseFlags()
	if o.traces == "" {
		fmt.Fprintln(os.Stderr, "autoscale-sim: --trace is required")
		os.Exit(2)
	}
	if o.attainment <= 0 || o.attainment >= 100 {
		fmt.Fprintf(os.Stderr, "autoscale-sim: --attainment must be in (0,100), got %v\n", o.attainment)
		os.Exit(2)
	}
	target := o.attainment / 100
	o.cfg.Attainment = target
	if err := o.resolvePricing(); err != nil {
		fmt.Fprintf(os.Stderr, "autoscale-sim: %v\n", err)
		os.Exit(2)
	}
	var errs []string
	var specs []string
	var traces []loaded
	for _, spec := range strings.Split(o.traces, ",") {
		l, err := load(o, spec)
		if err != nil {
			fmt.Fprintf(os.Stderr, "autoscale-sim: %v\n", err)
			errs = append(errs, spec)
			continue
		}
		specs = append(specs, spec)
		traces = append(traces, l)
	}
	tunings, err := tune(o, specs, traces, target)
	if err != nil {
		fmt.Fprintf(os.Stderr, "autoscale-sim: --tune: %v\n", err)
		os.Exit(2)
	}
	var outs []scalesim.Outcome
	for _, l := range traces {
		out, err := runTrace(o, l, tunings, target)
		if err != nil {
			fmt.Fprintf(os.Stderr, "autoscale-sim: %v\n", err)
			errs = append(errs, l.tr.Name)
			continue
		}
		outs = append(outs, out)
	}
	fmt.Println("summary: NeuroNetes against the implementable reference (tuned leave-one-trace-out), the hindsight reference (regret) and the baselines re-run at its cost")
	scalesim.WriteSummary(os.Stdout, outs, target)
	scalesim.WriteSplit(os.Stdout, outs, target, tuneNames(o, specs))
	scalesim.WriteMissed(os.Stdout, outs, target)
	if !scalesim.WriteVerdict(os.Stdout, outs, target, errs) {
		if len(errs) > 0 {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// tuneNames are the names of the tuning traces (--tune, or every --trace).
func tuneNames(o options, specs []string) map[string]bool {
	list := specs
	if o.tune != "" {
		list = strings.Split(o.tune, ",")
	}
	out := map[string]bool{}
	for _, s := range list {
		if strings.HasPrefix(s, "synthetic:") {
			continue
		}
		out[strings.TrimSuffix(filepath.Base(s), filepath.Ext(s))] = true
	}
	return out
}

// loaded is a trace and the model it is replayed under (its SLO set).
type loaded struct {
	tr scalesim.Trace
	m  scalesim.Model
}

// load reads a trace and sets its SLO.
func load(o options, spec string) (loaded, error) {
	tr, err := loadTrace(spec, o.maxDur)
	if err != nil {
		return loaded{}, err
	}
	m := o.model
	if o.slo == "auto" {
		if m.SLO, err = scalesim.AutoSLO(tr, m, o.sloPercentile, o.sloQueueing); err != nil {
			return loaded{}, err
		}
	} else if m.SLO, err = time.ParseDuration(o.slo); err != nil || m.SLO <= 0 {
		return loaded{}, fmt.Errorf("--ttft-slo: want a positive duration or auto, got %q", o.slo)
	}
	return loaded{tr, m}, nil
}

// tune sweeps the causal rule on the tuning traces (--tune, or the traces
// themselves), in parallel; a tuning trace that is also scored is loaded once.
func tune(o options, specs []string, traces []loaded, target float64) ([]*scalesim.Tuning, error) {
	var ls []loaded
	if o.tune == "" {
		ls = traces
	} else {
		for _, spec := range strings.Split(o.tune, ",") {
			found := false
			for i, s := range specs {
				if s == spec {
					ls, found = append(ls, traces[i]), true
				}
			}
			if !found {
				l, err := load(o, spec)
				if err != nil {
					return nil, err
				}
				ls = append(ls, l)
			}
		}
	}
	out := make([]*scalesim.Tuning, len(ls))
	parallel(o.parallel, len(ls), func(i int) {
		out[i] = scalesim.NewTuning(ls[i].tr, ls[i].m, target, o.cfg.MaxReplicas, scalesim.DefaultLookbacks)
	})
	return out, nil
}

// parallel runs f(0..n-1), at most k at once.
func parallel(k, n int, f func(i int)) {
	sem := make(chan struct{}, max(k, 1))
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			f(i)
		}()
	}
	wg.Wait()
}

// loadTrace reads a trace file or generates a synthetic trace.
func loadTrace(spec string, maxDur time.Duration) (scalesim.Trace, error) {
	if !strings.HasPrefix(spec, "synthetic:") {
		return scalesim.LoadTrace(spec, maxDur)
	}
	parts := strings.Split(strings.TrimPrefix(spec, "synthetic:"), ":")
	seed, minutes := uint64(1), 60.0
	var err error
	if len(parts) > 1 {
		if seed, err = strconv.ParseUint(parts[1], 10, 64); err != nil {
			return scalesim.Trace{}, fmt.Errorf("trace %s: seed: %w", spec, err)
		}
	}
	if len(parts) > 2 {
		if minutes, err = strconv.ParseFloat(parts[2], 64); err != nil {
			return scalesim.Trace{}, fmt.Errorf("trace %s: minutes: %w", spec, err)
		}
	}
	if len(parts) > 3 {
		return scalesim.Trace{}, fmt.Errorf("trace %s: want synthetic:<kind>[:<seed>[:<minutes>]]", spec)
	}
	return scalesim.Synthetic(parts[0], seed, time.Duration(minutes*float64(time.Minute)))
}

// runTrace replays one trace under every policy and prints its outcome.
func runTrace(o options, l loaded, tunings []*scalesim.Tuning, target float64) (scalesim.Outcome, error) {
	tr, m := l.tr, l.m
	start := time.Now()
	oracle, curve := scalesim.BestOracle(tr, m, target, o.cfg.MaxReplicas)
	pols := scalesim.All(m, o.cfg)
	res := make([]scalesim.Result, len(pols))
	var ref scalesim.CausalRef
	var impl scalesim.ImplRef
	jobs := []func(){
		func() {
			for _, t := range tunings {
				if t.Trace.Name == tr.Name {
					ref = t.Sweep.Best()
					return
				}
			}
			ref = scalesim.BestCausal(tr, m, target, o.cfg.MaxReplicas, scalesim.DefaultLookbacks)
		},
		func() { impl = scalesim.ImplementableRef(tr, m, tunings, o.cfg.MaxReplicas) },
	}
	for i, p := range pols {
		jobs = append(jobs, func() { res[i] = scalesim.Run(tr, m, p, curve[0]) })
	}
	parallel(o.parallel, len(jobs), func(i int) { jobs[i]() })
	out := scalesim.Outcome{Trace: tr.Name, SLO: m.SLO, Oracle: oracle, Causal: ref, Impl: impl, Results: res,
		NeedSeconds: scalesim.NeedSeconds(tr, m), Slacks: scalesim.Slacks(tr, m)}
	out.Iso = scalesim.BestIsoCosts(tr, m, o.cfg, out.NeuroNetes().ReplicaSeconds, curve[0], o.parallel)
	scalesim.WriteOutcome(os.Stdout, out, target)
	if d, ok := pols[0].(*scalesim.Decider); ok {
		fmt.Printf("why neuronetes costs what it does: it provisions the learned headroom x the peak need of the learned memory; over the evaluated part: %s; the hindsight reference holds alpha %.2f x the peak need of the last %d s\n",
			d.Learned(), out.Causal.Alpha, out.Causal.Lookback)
	}
	if o.explain > 0 {
		scalesim.Explain(os.Stdout, tr, m, o.cfg, out.Causal.Result, curve[0], o.explain)
	}
	scalesim.WriteSpend(os.Stdout, out, o.pricing, tr.Duration())
	png := filepath.Join(o.out, tr.Name+".png")
	if err := scalesim.WritePNG(png, fmt.Sprintf("%s: TTFT SLO %s, %s", tr.Name, m.SLO, "load, replicas and SLO attainment"), out, target); err != nil {
		return scalesim.Outcome{}, err
	}
	svg := filepath.Join(o.out, tr.Name+"-curve.svg")
	if err := scalesim.WriteCurveSVG(svg, fmt.Sprintf("%s: cost versus attainment (TTFT SLO %s)", tr.Name, m.SLO),
		curves(o, l, out, curve[0]), out.Causal.Result.ReplicaSeconds, target); err != nil {
		return scalesim.Outcome{}, err
	}
	fmt.Printf("(%s simulated in %s; plot %s; cost-versus-attainment curve %s)\n\n", tr.Name, time.Since(start).Round(time.Millisecond), png, svg)
	return out, nil
}

// curves collects each policy's runs for the cost-versus-attainment curve:
// both references around their alpha, NeuroNetes at several attainment
// targets, and every baseline run of the equal-cost search.
func curves(o options, l loaded, out scalesim.Outcome, initial int) map[string][]scalesim.Result {
	tr, m := l.tr, l.m
	cs := map[string][]scalesim.Result{"oracle": {out.Oracle}}
	var jobs []func()
	var mu sync.Mutex
	put := func(name string, rs ...scalesim.Result) {
		mu.Lock()
		defer mu.Unlock()
		cs[name] = append(cs[name], rs...)
	}
	jobs = append(jobs, func() {
		put("causal-ref", scalesim.ReferenceCurve(tr, m, out.Causal.Lookback, out.Causal.Alpha, o.cfg.MaxReplicas)...)
	})
	if out.Impl.Found {
		jobs = append(jobs, func() {
			put("impl-ref", scalesim.ReferenceCurve(tr, m, out.Impl.Lookback, out.Impl.Alpha, o.cfg.MaxReplicas)...)
		})
	}
	for _, a := range scalesim.CurveAttainments {
		jobs = append(jobs, func() {
			c := o.cfg
			c.Attainment = a
			put("neuronetes", scalesim.Run(tr, m, scalesim.NeuroNetes(m, c), initial))
		})
	}
	parallel(o.parallel, len(jobs), func(i int) { jobs[i]() })
	for _, r := range out.Results[1:] {
		put(r.Policy, r)
		put(r.Policy, out.Iso[r.Policy].Runs...)
	}
	return cs
}

// resolvePricing prices the simulated nodes with the controller's price model.
func (o *options) resolvePricing() error {
	capacity := cost.Capacity(o.capacityType)
	if capacity != cost.Spot && capacity != cost.OnDemand {
		return fmt.Errorf("--capacity-type: want spot or on-demand, got %q", o.capacityType)
	}
	if o.dailyBudget < 0 {
		return fmt.Errorf("--daily-budget: must be >= 0, got %v", o.dailyBudget)
	}
	var table cost.Table
	if o.nodePrice < 0 {
		var err error
		if table, err = scalesim.LoadPriceTable(o.priceTable); err != nil {
			return fmt.Errorf("--price-table: %w", err)
		}
	}
	node, err := scalesim.NodePricing(o.instanceType, capacity, table, o.nodePrice)
	if err != nil {
		return fmt.Errorf("--instance-type/--capacity-type: %w", err)
	}
	o.pricing = scalesim.Pricing{Node: node, DailyBudget: o.dailyBudget}
	return nil
}
