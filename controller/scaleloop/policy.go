package scaleloop

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	v1alpha1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/controller/scalepolicy"
)

// PolicyFromAgentPool builds the decision policy of a pool from its spec, its
// AgentClass (SLO TTFT and cost per replica-hour; may be nil) and the
// ToolBindings that reference it (queue lag; those without autoscaleOnLag are
// ignored). Unset fields keep the decision package's defaults: tolerance 0.1,
// selectPolicy Min (the guide states both maxChangePercent and
// maxChangeAbsolute as caps), season 24h, targetThroughput 1.
func PolicyFromAgentPool(pool *v1alpha1.AgentPool, class *v1alpha1.AgentClass, bindings []*v1alpha1.ToolBinding) (scalepolicy.Policy, error) {
	s := pool.Spec
	p := scalepolicy.Policy{}
	if s.MinReplicas != nil && s.MaxReplicas != nil && *s.MaxReplicas < *s.MinReplicas {
		return p, fmt.Errorf("spec.maxReplicas: must be >= spec.minReplicas (%d), got %d", *s.MinReplicas, *s.MaxReplicas)
	}
	// The same bounds as the reconciler's (v1alpha1.ReplicaBounds).
	p.MinReplicas, p.MaxReplicas = s.ReplicaBounds()
	as := s.Autoscaling
	if as == nil {
		as = &v1alpha1.AutoscalingSpec{}
	}
	for i, m := range as.Metrics {
		target, err := parseTarget(m.Type, m.Target)
		if err != nil {
			return p, fmt.Errorf("spec.autoscaling.metrics[%d].target: %w", i, err)
		}
		w, err := optDuration(m.AveragingWindow)
		if err != nil {
			return p, fmt.Errorf("spec.autoscaling.metrics[%d].averagingWindow: %w", i, err)
		}
		p.Metrics = append(p.Metrics, scalepolicy.MetricSpec{Type: scalepolicy.MetricType(m.Type), Target: target, AveragingWindow: w})
	}
	for i, e := range as.ExternalMetrics {
		target, err := strconv.ParseFloat(strings.TrimSpace(e.Target), 64)
		if err != nil {
			return p, fmt.Errorf("spec.autoscaling.externalMetrics[%d].target: %w", i, err)
		}
		p.Metrics = append(p.Metrics, scalepolicy.MetricSpec{Type: scalepolicy.MetricType(scalepolicy.ExternalPrefix + e.Name), Target: target})
	}
	p.Strategy = scalepolicy.Strategy(as.Strategy)
	var err error
	if p.CooldownPeriod, err = optDuration(as.CooldownPeriod); err != nil {
		return p, fmt.Errorf("spec.autoscaling.cooldownPeriod: %w", err)
	}
	if p.Tolerance, err = tolerance(as.Tolerance); err != nil {
		return p, fmt.Errorf("spec.autoscaling.tolerance: %w", err)
	}
	if b := as.Behavior; b != nil {
		if p.Behavior.ScaleUp, err = rules(b.ScaleUp); err != nil {
			return p, fmt.Errorf("spec.autoscaling.behavior.scaleUp: %w", err)
		}
		if p.Behavior.ScaleDown, err = rules(b.ScaleDown); err != nil {
			return p, fmt.Errorf("spec.autoscaling.behavior.scaleDown: %w", err)
		}
	}
	if err := sloPolicy(&p, as.SLOTarget, class); err != nil {
		return p, err
	}
	if err := predictivePolicy(&p, as.Predictive); err != nil {
		return p, err
	}
	if err := costPolicy(&p, as.CostConstraints, class); err != nil {
		return p, err
	}
	if err := lagPolicy(&p, pool.Name, bindings); err != nil {
		return p, err
	}
	if err := p.Validate(); err != nil {
		return p, fmt.Errorf("spec.autoscaling: %w", err)
	}
	return p, nil
}

// parseTarget reads a metric target: ttft-p95 as a duration ("500ms") or
// seconds, the others as numbers ("1000").
func parseTarget(t v1alpha1.MetricType, s string) (float64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, fmt.Errorf("empty target")
	}
	if t == v1alpha1.MetricTTFTP95 {
		if d, err := v1alpha1.Duration(s).Parse(); err == nil {
			return d.Seconds(), nil
		}
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number%s: %w", s, map[bool]string{true: " or duration", false: ""}[t == v1alpha1.MetricTTFTP95], err)
	}
	return v, nil
}

// ExplicitZeroTolerance stands for a tolerance written as 0: the decision
// package reads a zero Tolerance as unset (its 0.1 default), so an explicit 0
// becomes the smallest positive tolerance, under which only an exact ratio of 1
// leaves the replicas unchanged.
const ExplicitZeroTolerance = math.SmallestNonzeroFloat64

// tolerance reads spec.autoscaling.tolerance: unset is 0 (the default), else a
// value in [0,1).
func tolerance(d v1alpha1.Decimal) (float64, error) {
	if d == "" {
		return 0, nil
	}
	v, err := d.Float64()
	if err != nil {
		return 0, err
	}
	if v < 0 || v >= 1 {
		return 0, fmt.Errorf("must be in [0,1), got %v", v)
	}
	if v == 0 {
		return ExplicitZeroTolerance, nil
	}
	return v, nil
}

func optDuration(d v1alpha1.Duration) (time.Duration, error) {
	if d == "" {
		return 0, nil
	}
	return d.Parse()
}

func i32(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}

func rules(r *v1alpha1.ScalingRules) (scalepolicy.ScalingRules, error) {
	if r == nil {
		return scalepolicy.ScalingRules{}, nil
	}
	w, err := optDuration(r.StabilizationWindow)
	if err != nil {
		return scalepolicy.ScalingRules{}, fmt.Errorf("stabilizationWindow: %w", err)
	}
	return scalepolicy.ScalingRules{StabilizationWindow: w, MaxChangePercent: float64(i32(r.MaxChangePercent)),
		MaxChangeAbsolute: i32(r.MaxChangeAbsolute), Period: time.Duration(i32(r.PeriodSeconds)) * time.Second, Select: selectPolicy(r.SelectPolicy)}, nil
}

// selectPolicy maps spec selectPolicy (Min, Max, Disabled; the CRD enum) to the
// decision package's; unset is SelectMin.
func selectPolicy(s string) scalepolicy.SelectPolicy {
	if s == "" {
		return scalepolicy.SelectMin
	}
	return scalepolicy.SelectPolicy(s)
}

func sloPolicy(p *scalepolicy.Policy, s *v1alpha1.SLOTargetSpec, class *v1alpha1.AgentClass) error {
	if s == nil || !s.Enabled {
		return nil
	}
	if class == nil || class.Spec.SLO == nil || class.Spec.SLO.TTFT == "" {
		return fmt.Errorf("spec.autoscaling.sloTarget: enabled but the AgentClass has no spec.slo.ttft")
	}
	ttft, err := class.Spec.SLO.TTFT.Parse()
	if err != nil {
		return fmt.Errorf("agentclass spec.slo.ttft: %w", err)
	}
	p.SLO = scalepolicy.SLOTarget{Enabled: true, TTFT: ttft, HeadroomPercent: float64(i32(s.HeadroomPercent)), BreachOnly: s.BreachOnly}
	if b := s.BreachResponse; b != nil {
		p.SLO.ScaleUpImmediately, p.SLO.MaxScaleUp = b.ScaleUpImmediately, i32(b.MaxScaleUp)
	}
	if d := s.ScaleDownSafety; d != nil {
		p.SLO.RequireHeadroomPercent = float64(i32(d.RequireHeadroom))
		if p.SLO.CheckDuration, err = optDuration(d.CheckDuration); err != nil {
			return fmt.Errorf("spec.autoscaling.sloTarget.scaleDownSafety.checkDuration: %w", err)
		}
	}
	if a := s.Adaptive; a != nil {
		pct, err := a.AttainmentPercent.Float64()
		if err != nil {
			return fmt.Errorf("spec.autoscaling.sloTarget.adaptive.attainmentPercent: %w", err)
		}
		// The learned capacity model is on: on the benchmark's held-out
		// traces it beat the stated targets (docs/autoscaling.md).
		p.SLO.Adaptive = scalepolicy.Adaptive{Enabled: true, Attainment: pct / 100, Capacity: true}
	}
	return nil
}

func predictivePolicy(p *scalepolicy.Policy, s *v1alpha1.PredictiveSpec) error {
	if s == nil {
		return nil
	}
	var err error
	p.Predictive.Enabled = s.Enabled
	if p.Predictive.LookbackWindow, err = optDuration(s.LookbackWindow); err != nil {
		return fmt.Errorf("spec.autoscaling.predictive.lookbackWindow: %w", err)
	}
	p.Predictive.Horizon = time.Duration(i32(s.HorizonMinutes)) * time.Minute
	if p.Predictive.Season, err = optDuration(s.Season); err != nil {
		return fmt.Errorf("spec.autoscaling.predictive.season: %w", err)
	}
	if p.Predictive.MinConfidence, err = s.MinConfidence.Float64(); err != nil {
		return fmt.Errorf("spec.autoscaling.predictive.minConfidence: %w", err)
	}
	for _, sc := range s.Schedules {
		p.Predictive.Schedules = append(p.Predictive.Schedules, scalepolicy.Schedule{Name: sc.Name, Cron: sc.Cron, Replicas: sc.Replicas})
	}
	return nil
}

func costPolicy(p *scalepolicy.Policy, c *v1alpha1.CostConstraints, class *v1alpha1.AgentClass) error {
	if class != nil {
		v, err := class.Spec.CostPerReplicaHour.Float64()
		if err != nil {
			return fmt.Errorf("agentclass spec.costPerReplicaHour: %w", err)
		}
		p.Cost.CostPerReplicaHour = v
	}
	if c == nil {
		return nil
	}
	var err error
	if p.Cost.MaxCostPerHour, err = c.MaxCostPerHour.Float64(); err != nil {
		return fmt.Errorf("spec.autoscaling.costConstraints.maxCostPerHour: %w", err)
	}
	if p.Cost.DailyBudget, err = c.DailyBudget.Float64(); err != nil {
		return fmt.Errorf("spec.autoscaling.costConstraints.dailyBudget: %w", err)
	}
	for _, a := range c.OnBudgetExceeded {
		p.Cost.OnBudgetExceeded = append(p.Cost.OnBudgetExceeded, scalepolicy.BudgetAction(a))
	}
	return nil
}

// lagPolicy takes the queue settings of the first ToolBinding of this pool
// with autoscaleOnLag (the collector sums the lag of all of them). An unset
// targetThroughput stays 0, the decision package's default of 1.
func lagPolicy(p *scalepolicy.Policy, pool string, bindings []*v1alpha1.ToolBinding) error {
	for _, b := range LagBindings(pool, bindings) {
		q := b.Spec.QueueConfig
		tt, err := q.TargetThroughput.Float64()
		if err != nil {
			return fmt.Errorf("toolbinding %s spec.queueConfig.targetThroughput: %w", b.Name, err)
		}
		if tt < 0 {
			return fmt.Errorf("toolbinding %s spec.queueConfig.targetThroughput: must be > 0, got %v", b.Name, tt)
		}
		p.Lag = scalepolicy.QueueLag{Enabled: true, MaxLagThreshold: int64(i32(q.MaxLagThreshold)), PrefetchCount: int64(max(i32(q.PrefetchCount), 1)), TargetThroughput: tt}
		return nil
	}
	return nil
}

// LagBindings returns the ToolBindings of pool that scale it on queue lag.
func LagBindings(pool string, bindings []*v1alpha1.ToolBinding) []*v1alpha1.ToolBinding {
	var out []*v1alpha1.ToolBinding
	for _, b := range bindings {
		if b.Spec.AgentPoolRef == nil || b.Spec.AgentPoolRef.Name != pool || b.Spec.QueueConfig == nil || !b.Spec.QueueConfig.AutoscaleOnLag {
			continue
		}
		out = append(out, b)
	}
	return out
}
