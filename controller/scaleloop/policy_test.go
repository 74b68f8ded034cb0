package scaleloop

import (
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/controller/scalepolicy"
)

const seedPool = `
apiVersion: neuronetes.io/v1alpha1
kind: AgentPool
metadata: {name: p}
spec:
  minReplicas: 2
  maxReplicas: 20
  autoscaling:
    metrics:
      - {type: tokens-in-queue, target: "500", averagingWindow: 30s}
      - {type: ttft-p95, target: "800ms", averagingWindow: 1m}
    externalMetrics:
      - {name: datadog-queue-depth, query: "avg:queue.depth", target: "100"}
    strategy: max
    behavior:
      scaleUp: {stabilizationWindow: 60s, maxChangePercent: 100, maxChangeAbsolute: 5, periodSeconds: 30}
      scaleDown: {stabilizationWindow: 300s, maxChangePercent: 50, maxChangeAbsolute: 2, periodSeconds: 120}
    cooldownPeriod: 5m
    sloTarget:
      enabled: true
      headroomPercent: 20
      breachResponse: {scaleUpImmediately: true, maxScaleUp: 10}
      scaleDownSafety: {requireHeadroom: 50, checkDuration: 10m}
    predictive:
      enabled: true
      lookbackWindow: 7d
      horizonMinutes: 10
      minConfidence: 0.7
      schedules:
        - {name: business-hours, cron: "0 8 * * 1-5", replicas: 20}
    costConstraints:
      maxCostPerHour: 100.0
      dailyBudget: 1000.0
      onBudgetExceeded: [scale-to-min]
`

const seedClass = `
apiVersion: neuronetes.io/v1alpha1
kind: AgentClass
metadata: {name: c}
spec:
  costPerReplicaHour: 4.5
  slo: {ttft: 500ms}
`

func mustPool(t *testing.T, s string) *v1alpha1.AgentPool {
	t.Helper()
	var p v1alpha1.AgentPool
	if err := yaml.UnmarshalStrict([]byte(s), &p); err != nil {
		t.Fatal(err)
	}
	return &p
}

func TestPolicyFromAgentPool(t *testing.T) {
	var class v1alpha1.AgentClass
	if err := yaml.UnmarshalStrict([]byte(seedClass), &class); err != nil {
		t.Fatal(err)
	}
	i32 := func(v int32) *int32 { return &v }
	binding := &v1alpha1.ToolBinding{Spec: v1alpha1.ToolBindingSpec{Type: "queue", AgentPoolRef: &v1alpha1.LocalObjectReference{Name: "p"},
		QueueConfig: &v1alpha1.QueueConfig{Provider: "nats", QueueName: "agent-tasks", AutoscaleOnLag: true, MaxLagThreshold: i32(100), PrefetchCount: i32(10)}}}
	other := binding.DeepCopy()
	other.Spec.AgentPoolRef.Name = "q"
	p, err := PolicyFromAgentPool(mustPool(t, seedPool), &class, []*v1alpha1.ToolBinding{other, binding})
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"min", p.MinReplicas, int32(2)},
		{"max", p.MaxReplicas, int32(20)},
		{"metrics", len(p.Metrics), 3},
		{"tokens target", p.Metrics[0].Target, 500.0},
		{"tokens window", p.Metrics[0].AveragingWindow, 30 * time.Second},
		{"ttft target seconds", p.Metrics[1].Target, 0.8},
		{"external", p.Metrics[2].Type, scalepolicy.MetricType("external:datadog-queue-depth")},
		{"strategy", p.Strategy, scalepolicy.StrategyMax},
		{"up", p.Behavior.ScaleUp, scalepolicy.ScalingRules{StabilizationWindow: time.Minute, MaxChangePercent: 100, MaxChangeAbsolute: 5, Period: 30 * time.Second, Select: scalepolicy.SelectMin}},
		{"down period", p.Behavior.ScaleDown.Period, 120 * time.Second},
		{"cooldown", p.CooldownPeriod, 5 * time.Minute},
		{"slo", p.SLO, scalepolicy.SLOTarget{Enabled: true, TTFT: 500 * time.Millisecond, HeadroomPercent: 20, ScaleUpImmediately: true, MaxScaleUp: 10, RequireHeadroomPercent: 50, CheckDuration: 10 * time.Minute}},
		{"lookback 7d", p.Predictive.LookbackWindow, 7 * 24 * time.Hour},
		{"horizon", p.Predictive.Horizon, 10 * time.Minute},
		{"confidence", p.Predictive.MinConfidence, 0.7},
		{"schedule", p.Predictive.Schedules[0].Replicas, int32(20)},
		{"cost", p.Cost.CostPerReplicaHour, 4.5},
		{"budget", p.Cost.DailyBudget, 1000.0},
		{"actions", len(p.Cost.OnBudgetExceeded), 1},
		{"lag", p.Lag, scalepolicy.QueueLag{Enabled: true, MaxLagThreshold: 100, PrefetchCount: 10}},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, c.got, c.want)
		}
	}
	if _, err := scalepolicy.New(p); err != nil {
		t.Fatalf("converted policy rejected: %v", err)
	}
}

func TestPolicyFromAgentPoolErrors(t *testing.T) {
	tests := []struct {
		name, pool, field string
		class             *v1alpha1.AgentClass
	}{
		{"bad target", "spec: {autoscaling: {metrics: [{type: queue-depth, target: lots}]}}", "metrics[0].target", nil},
		{"bad window", "spec: {autoscaling: {metrics: [{type: queue-depth, target: '1', averagingWindow: soon}]}}", "metrics[0].averagingWindow", nil},
		{"slo without class ttft", "spec: {autoscaling: {sloTarget: {enabled: true}}}", "sloTarget", nil},
		{"unknown strategy", "spec: {autoscaling: {strategy: median}}", "strategy", nil},
		{"max below min", "spec: {minReplicas: 5, maxReplicas: 2}", "maxReplicas", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := PolicyFromAgentPool(mustPool(t, tc.pool), tc.class, nil)
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("got %v, want an error naming %q", err, tc.field)
			}
		})
	}
	// The bounds' defaults are the reconciler's (v1alpha1.ReplicaBounds; its TestResolveSizing).
	for spec, want := range map[string][2]int32{"spec: {}": {1, 10}, "spec: {minReplicas: 12}": {12, 12}, "spec: {minReplicas: 0, maxReplicas: 3}": {0, 3}} {
		p, err := PolicyFromAgentPool(mustPool(t, spec), nil, nil)
		if err != nil || p.MinReplicas != want[0] || p.MaxReplicas != want[1] {
			t.Fatalf("%s: bounds [%d,%d] (%v), want %v", spec, p.MinReplicas, p.MaxReplicas, err, want)
		}
	}
}

// TestPolicyFromAgentPoolTuning covers the fields that tune the decision
// package (tolerance, selectPolicy, breachOnly, adaptive, season, targetThroughput): set
// they are carried over, unset they leave its defaults in place.
func TestPolicyFromAgentPoolTuning(t *testing.T) {
	var class v1alpha1.AgentClass
	if err := yaml.UnmarshalStrict([]byte(seedClass), &class); err != nil {
		t.Fatal(err)
	}
	lag := func(tt v1alpha1.Decimal) []*v1alpha1.ToolBinding {
		return []*v1alpha1.ToolBinding{{Spec: v1alpha1.ToolBindingSpec{Type: "queue", AgentPoolRef: &v1alpha1.LocalObjectReference{Name: "p"},
			QueueConfig: &v1alpha1.QueueConfig{Provider: "nats", QueueName: "q", AutoscaleOnLag: true, TargetThroughput: tt}}}}
	}
	tests := []struct {
		name     string
		pool     string
		bindings []*v1alpha1.ToolBinding
		check    func(p scalepolicy.Policy) (got, want any)
	}{
		{"tolerance set", "spec: {autoscaling: {tolerance: 0.25}}", nil,
			func(p scalepolicy.Policy) (any, any) { return p.Tolerance, 0.25 }},
		{"tolerance unset keeps the default", "spec: {autoscaling: {}}", nil,
			func(p scalepolicy.Policy) (any, any) { return p.Tolerance, 0.0 }},
		{"tolerance 0 is explicit", "spec: {autoscaling: {tolerance: 0}}", nil,
			func(p scalepolicy.Policy) (any, any) { return p.Tolerance, ExplicitZeroTolerance }},
		{"selectPolicy Max", "spec: {autoscaling: {behavior: {scaleUp: {selectPolicy: Max}}}}", nil,
			func(p scalepolicy.Policy) (any, any) { return p.Behavior.ScaleUp.Select, scalepolicy.SelectMax }},
		{"selectPolicy Disabled", "spec: {autoscaling: {behavior: {scaleDown: {selectPolicy: Disabled}}}}", nil,
			func(p scalepolicy.Policy) (any, any) { return p.Behavior.ScaleDown.Select, scalepolicy.SelectDisabled }},
		{"selectPolicy unset is Min", "spec: {autoscaling: {behavior: {scaleDown: {maxChangePercent: 10}}}}", nil,
			func(p scalepolicy.Policy) (any, any) { return p.Behavior.ScaleDown.Select, scalepolicy.SelectMin }},
		{"breachOnly", "spec: {autoscaling: {sloTarget: {enabled: true, breachOnly: true}}}", nil,
			func(p scalepolicy.Policy) (any, any) { return p.SLO.BreachOnly, true }},
		{"adaptive", "spec: {autoscaling: {sloTarget: {enabled: true, adaptive: {attainmentPercent: 99.5}}}}", nil,
			func(p scalepolicy.Policy) (any, any) {
				return p.SLO.Adaptive, scalepolicy.Adaptive{Enabled: true, Attainment: 0.995, Capacity: true}
			}},
		{"adaptive with the default attainment", "spec: {autoscaling: {sloTarget: {enabled: true, adaptive: {}}}}", nil,
			func(p scalepolicy.Policy) (any, any) {
				return p.SLO.Adaptive, scalepolicy.Adaptive{Enabled: true, Capacity: true}
			}},
		{"season 7d", "spec: {autoscaling: {predictive: {enabled: true, horizonMinutes: 10, season: 7d}}}", nil,
			func(p scalepolicy.Policy) (any, any) { return p.Predictive.Season, 7 * 24 * time.Hour }},
		{"season unset", "spec: {autoscaling: {predictive: {enabled: true, horizonMinutes: 10}}}", nil,
			func(p scalepolicy.Policy) (any, any) { return p.Predictive.Season, time.Duration(0) }},
		{"targetThroughput", "spec: {autoscaling: {}}", lag("2.5"),
			func(p scalepolicy.Policy) (any, any) { return p.Lag.TargetThroughput, 2.5 }},
		{"targetThroughput unset", "spec: {autoscaling: {}}", lag(""),
			func(p scalepolicy.Policy) (any, any) { return p.Lag.TargetThroughput, 0.0 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := PolicyFromAgentPool(mustPool(t, "metadata: {name: p}\n"+tc.pool), &class, tc.bindings)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := tc.check(p); got != want {
				t.Fatalf("got %v, want %v", got, want)
			}
			if _, err := scalepolicy.New(p); err != nil {
				t.Fatalf("converted policy rejected: %v", err)
			}
		})
	}
	for _, tc := range []struct{ name, pool, field string }{
		{"tolerance 1", "spec: {autoscaling: {tolerance: 1}}", "spec.autoscaling.tolerance"},
		{"negative tolerance", "spec: {autoscaling: {tolerance: -0.5}}", "spec.autoscaling.tolerance"},
		{"bad season", "spec: {autoscaling: {predictive: {season: weekly}}}", "spec.autoscaling.predictive.season"},
		{"unknown selectPolicy", "spec: {autoscaling: {behavior: {scaleUp: {selectPolicy: Random}}}}", "behavior.scaleUp"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := PolicyFromAgentPool(mustPool(t, "metadata: {name: p}\n"+tc.pool), &class, nil)
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("got %v, want an error naming %q", err, tc.field)
			}
		})
	}
	if _, err := PolicyFromAgentPool(mustPool(t, "metadata: {name: p}\nspec: {autoscaling: {}}"), &class, lag("-1")); err == nil ||
		!strings.Contains(err.Error(), "spec.queueConfig.targetThroughput") {
		t.Fatalf("negative targetThroughput: got %v", err)
	}
}
