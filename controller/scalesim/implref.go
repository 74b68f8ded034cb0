package scalesim

import (
	"fmt"
	"math"
	"sync"
)

// Tuning is one trace the implementable reference may be tuned on: the trace,
// the model it is replayed under (with its SLO) and its causal sweep.
type Tuning struct {
	Trace Trace
	Model Model
	Sweep CausalSweep
	need  []float64
	mu    sync.Mutex
	runs  map[[2]float64]Result
}

// NewTuning sweeps the causal rule on tr (SweepCausal) for tuning.
func NewTuning(tr Trace, m Model, attainment float64, maxReplicas int, lookbacks []int) *Tuning {
	return &Tuning{Trace: tr, Model: m, Sweep: SweepCausal(tr, m, attainment, maxReplicas, lookbacks),
		need: Need(tr, m, causalBinW), runs: map[[2]float64]Result{}}
}

// run replays the tuning trace at (lookback, alpha), once per pair.
func (t *Tuning) run(look int, alpha float64, maxReplicas int) Result {
	k := [2]float64{float64(look), alpha}
	t.mu.Lock()
	r, ok := t.runs[k]
	t.mu.Unlock()
	if ok {
		return r
	}
	r = RunCausal(t.Trace, t.Model, t.need, look, alpha, maxReplicas)
	t.mu.Lock()
	t.runs[k] = r
	t.mu.Unlock()
	return r
}

// ImplRef is the implementable reference: the causal rule with one (Lookback,
// Alpha) chosen on other traces (leave-one-trace-out), then replayed on a
// trace it was not tuned on, as an operator who tunes one setting on the
// traffic they have and deploys it would.
type ImplRef struct {
	// Result is its run on the held-out trace.
	Result Result
	// Lookback (s) and Alpha are the setting chosen on TunedOn.
	Lookback int
	Alpha    float64
	// TunedOn names the traces the setting was chosen on.
	TunedOn []string
	// Found is false when no lookback kept the attainment on every tuning
	// trace within the searched alphas; Result is then empty.
	Found bool
}

// TuneCausal chooses one (lookback, alpha) for the tuning traces: for each
// lookback the largest of the traces' smallest alphas that keep the
// attainment (so each keeps it), then the lookback whose runs at that alpha
// cost least, as the geometric mean over the traces of the replica-seconds
// over the trace's own best (hindsight) run. ok is false when no lookback met
// the target on every trace.
func TuneCausal(ts []*Tuning, maxReplicas int) (look int, alpha float64, ok bool) {
	if len(ts) == 0 {
		return 0, 0, false
	}
	bestScore := math.Inf(1)
	for i, l := range ts[0].Sweep.Lookbacks {
		a, met := 0.0, true
		for _, t := range ts {
			r := t.Sweep.Refs[i]
			met = met && r.Met
			a = math.Max(a, r.Alpha)
		}
		if !met {
			continue
		}
		logSum := 0.0
		for _, t := range ts {
			best := t.Sweep.Best().Result.ReplicaSeconds
			logSum += math.Log(t.run(l, a, maxReplicas).ReplicaSeconds / best)
		}
		if score := logSum / float64(len(ts)); score < bestScore {
			bestScore, look, alpha, ok = score, l, a, true
		}
	}
	return look, alpha, ok
}

// ImplementableRef tunes the causal rule on the tuning traces other than tr
// (by name) and replays tr at that setting.
func ImplementableRef(tr Trace, m Model, ts []*Tuning, maxReplicas int) ImplRef {
	var others []*Tuning
	var names []string
	for _, t := range ts {
		if t.Trace.Name != tr.Name {
			others = append(others, t)
			names = append(names, t.Trace.Name)
		}
	}
	look, alpha, ok := TuneCausal(others, maxReplicas)
	out := ImplRef{Lookback: look, Alpha: alpha, TunedOn: names, Found: ok}
	if ok {
		out.Result = RunCausal(tr, m, Need(tr, m, causalBinW), look, alpha, maxReplicas)
		out.Result.Policy = "impl-ref"
	}
	return out
}

// String describes the setting.
func (r ImplRef) String() string {
	if !r.Found {
		return fmt.Sprintf("no (L, alpha) kept the target on every tuning trace (%d traces)", len(r.TunedOn))
	}
	return fmt.Sprintf("alpha %.2f x the peak need of the last %d s, tuned on %d other traces", r.Alpha, r.Lookback, len(r.TunedOn))
}
