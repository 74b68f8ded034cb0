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
	// preset uses 0: a warm replica costs as much as a serving one and only
	// answers WarmActivation later, so at equal cost serving capacity dominates.
	PrewarmPercent float64
	// Attainment is the share of requests NeuroNetes holds within the SLO
	// (default scalepolicy.DefaultAttainment).
	Attainment float64
	// Robust turns on the adaptive policy's robust sizing
	// (scalepolicy.Adaptive.Robust) in the NeuroNetes preset.
	Robust bool
	// StatedCapacity turns off the adaptive policy's learned capacity model
	// (scalepolicy.Adaptive.Capacity, on in the preset as in an AgentPool):
	// the need is then the offered tokens/s over the stated
	// tokens-per-second target, the policy before the model.
	StatedCapacity bool
}

// NeuroNetes returns the NeuroNetes preset: the adaptive SLO policy on the
// replicas' capacity, with no knob fitted to a trace. Its need is the largest
// of the token velocity over one replica's prefill throughput, the running
// sequences over one replica's slots (both at 100%: the learned headroom
// supplies the margin, or takes it away when the SLO allows queueing) and the
// queued prompt tokens over what one replica prefills within the SLO; it
// provisions the
// learned headroom x the peak need of the learned memory, scales up and down
// without stabilization or rate limits (the memory is the scale-down
// stabilization), and decides every 5 s.
func NeuroNetes(m Model, c Config) *Decider {
	return &Decider{
		Label: "neuronetes",
		Every: 5 * time.Second,
		Policy: scalepolicy.Policy{
			MinReplicas: 1, MaxReplicas: int32(c.MaxReplicas),
			Metrics: []scalepolicy.MetricSpec{
				{Type: scalepolicy.TokensPerSecond, Target: m.PrefillTPS, AveragingWindow: 10 * time.Second},
				{Type: scalepolicy.ConcurrentSessions, Target: float64(m.Slots), AveragingWindow: 10 * time.Second},
				// The backlog one replica prefills within half the SLO: the demand the
				// processed-token and running counts cannot show, since they stop
				// at the capacity that exists.
				{Type: scalepolicy.TokensInQueue, Target: m.PrefillTPS * m.SLO.Seconds() / 2, AveragingWindow: 10 * time.Second},
			},
			Strategy: scalepolicy.StrategyMax,
			SLO: scalepolicy.SLOTarget{Enabled: true, TTFT: m.SLO,
				Adaptive: scalepolicy.Adaptive{Enabled: true, Attainment: c.Attainment, Robust: c.Robust, Capacity: !c.StatedCapacity}},
		},
		Offered:        true,
		Warm:           int(warmpool.Target(int32(c.MaxReplicas), int32(math.Round(c.PrewarmPercent)))),
		ReplenishDelay: 30 * time.Second,
		ReplenishBatch: 2,
	}
}

// HPA returns the Kubernetes HPA (autoscaling/v2 defaults: 15 s sync, 0.1
// tolerance, scale-up max(100%, 4 pods) per 15 s with no stabilization,
// scale-down 100% per 15 s after a 300 s stabilization window) on the per-pod
// concurrency (in-flight requests, InFlight), AverageValue = TargetUtilization x Slots.
func HPA(m Model, c Config) *Decider {
	return &Decider{Label: "hpa", Every: 15 * time.Second, Policy: hpaPolicy(m, c)}
}

func hpaPolicy(m Model, c Config) scalepolicy.Policy {
	return scalepolicy.Policy{
		MinReplicas: 1, MaxReplicas: int32(c.MaxReplicas),
		Metrics:   []scalepolicy.MetricSpec{{Type: InFlight, Target: float64(m.Slots) * c.TargetUtilization}},
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
