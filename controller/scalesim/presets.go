package scalesim

import (
	"math"
	"time"

	"github.com/neuronetes/neuronetes/controller/scalepolicy"
	"github.com/neuronetes/neuronetes/warmpool"
)

// Config sizes the policies under comparison.
type Config struct {
	// MaxReplicas bounds every policy.
	MaxReplicas int
	// TargetUtilization is the per-pod concurrency target of the baselines, as a
	// fraction of Slots (Knative's default target utilization is 70%).
	TargetUtilization float64
	// PrewarmPercent is NeuroNetes' warm pool, in percent of MaxReplicas. The
	// tuned preset uses 0: a warm replica costs as much as a serving one and only
	// answers WarmActivation later, so at equal cost serving capacity dominates.
	PrewarmPercent float64
	// Tune holds NeuroNetes' tuned knobs; zero fields take the defaults tuned on
	// the Azure code trace.
	Tune Tuning
}

// Tuning is the part of the NeuroNetes policy tuned on a trace.
type Tuning struct {
	// BacklogSLOs is the tokens-in-queue target in SLOs of prefill (default 1.5).
	BacklogSLOs float64
	// TokenUtilization is the tokens-per-second target as a fraction of PrefillTPS (0.9).
	TokenUtilization float64
	// ScaleDownPercent is the scale-down limit per 60 s (5).
	ScaleDownPercent float64
	// ScaleDownWindow is the scale-down stabilization window (120 s).
	ScaleDownWindow time.Duration
	// PredictiveHorizon is the trend forecaster's horizon (3 min).
	PredictiveHorizon time.Duration
	// MinConfidence is the forecaster's minConfidence (0.5).
	MinConfidence float64
}

func (t Tuning) withDefaults() Tuning {
	if t.BacklogSLOs <= 0 {
		t.BacklogSLOs = 1.5
	}
	if t.TokenUtilization <= 0 {
		t.TokenUtilization = 0.9
	}
	if t.ScaleDownPercent <= 0 {
		t.ScaleDownPercent = 5
	}
	if t.ScaleDownWindow <= 0 {
		t.ScaleDownWindow = 120 * time.Second
	}
	if t.PredictiveHorizon <= 0 {
		t.PredictiveHorizon = 3 * time.Minute
	}
	if t.MinConfidence <= 0 {
		t.MinConfidence = 0.5
	}
	return t
}

// NeuroNetes returns the NeuroNetes policy tuned on the Azure code trace: token
// backlog and token velocity against per-replica capacity, the TTFT SLO with a
// breach fast path and a scale-down safety check, a trend forecaster, a slow
// guarded scale-down and a small warm pool.
func NeuroNetes(m Model, c Config) *Decider {
	slo := m.SLO
	tu := c.Tune.withDefaults()
	return &Decider{
		Label: "neuronetes",
		Every: 5 * time.Second,
		Policy: scalepolicy.Policy{
			MinReplicas: 1, MaxReplicas: int32(c.MaxReplicas),
			Metrics: []scalepolicy.MetricSpec{
				// Backlog the replicas can clear within the SLO.
				{Type: scalepolicy.TokensInQueue, Target: m.PrefillTPS * slo.Seconds() * tu.BacklogSLOs, AveragingWindow: 5 * time.Second},
				{Type: scalepolicy.TokensPerSecond, Target: m.PrefillTPS * tu.TokenUtilization, AveragingWindow: 30 * time.Second},
				{Type: scalepolicy.ConcurrentSessions, Target: float64(m.Slots) * 0.7, AveragingWindow: 30 * time.Second},
			},
			Strategy: scalepolicy.StrategyMax,
			Behavior: scalepolicy.Behavior{
				ScaleUp:   scalepolicy.ScalingRules{MaxChangePercent: 100, MaxChangeAbsolute: 4, Period: 15 * time.Second, Select: scalepolicy.SelectMax},
				ScaleDown: scalepolicy.ScalingRules{StabilizationWindow: tu.ScaleDownWindow, MaxChangePercent: tu.ScaleDownPercent, Period: 60 * time.Second, Select: scalepolicy.SelectMin},
			},
			SLO: scalepolicy.SLOTarget{Enabled: true, TTFT: slo, BreachOnly: true, ScaleUpImmediately: true, MaxScaleUp: 30,
				RequireHeadroomPercent: 50, CheckDuration: 60 * time.Second},
			Predictive: scalepolicy.Predictive{Enabled: true, Horizon: tu.PredictiveHorizon, MinConfidence: tu.MinConfidence, Season: -1},
		},
		Warm:           int(warmpool.Target(int32(c.MaxReplicas), int32(math.Round(c.PrewarmPercent)))),
		ReplenishDelay: 30 * time.Second,
		ReplenishBatch: 2,
	}
}

// HPA returns the Kubernetes HPA (autoscaling/v2 defaults: 15 s sync, 0.1
// tolerance, scale-up max(100%, 4 pods) per 15 s with no stabilization,
// scale-down 100% per 15 s after a 300 s stabilization window) on the per-pod
// concurrency custom metric, AverageValue = TargetUtilization x Slots.
func HPA(m Model, c Config) *Decider {
	return &Decider{Label: "hpa", Every: 15 * time.Second, Policy: hpaPolicy(m, c)}
}

func hpaPolicy(m Model, c Config) scalepolicy.Policy {
	return scalepolicy.Policy{
		MinReplicas: 1, MaxReplicas: int32(c.MaxReplicas),
		Metrics:   []scalepolicy.MetricSpec{{Type: scalepolicy.ConcurrentSessions, Target: float64(m.Slots) * c.TargetUtilization}},
		Tolerance: 0.1,
		Behavior: scalepolicy.Behavior{
			ScaleUp:   scalepolicy.ScalingRules{MaxChangePercent: 100, MaxChangeAbsolute: 4, Period: 15 * time.Second, Select: scalepolicy.SelectMax},
			ScaleDown: scalepolicy.ScalingRules{StabilizationWindow: 300 * time.Second, MaxChangePercent: 100, Period: 15 * time.Second, Select: scalepolicy.SelectMax},
		},
	}
}

// KEDA returns a KEDA ScaledObject's behaviour (defaults: pollingInterval 30 s,
// cooldownPeriod 300 s, minReplicaCount 0, activation threshold 0) on top of the
// HPA it generates (same metric, AverageValue target).
func KEDA(m Model, c Config) *Decider {
	return &Decider{Label: "keda", Every: 15 * time.Second, Policy: hpaPolicy(m, c),
		KEDA: &KEDAActivation{CooldownPeriod: 300 * time.Second, PollingInterval: 30 * time.Second}}
}

// All returns NeuroNetes and the four baselines.
func All(m Model, c Config) []Policy {
	target := float64(m.Slots) * c.TargetUtilization
	return []Policy{
		NeuroNetes(m, c),
		HPA(m, c),
		KEDA(m, c),
		&KPA{Target: target, MinScale: 0, MaxScale: c.MaxReplicas},
		&APA{Target: target, MinReplicas: 1, MaxReplicas: c.MaxReplicas},
	}
}
