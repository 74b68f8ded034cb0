package scaleloop

import (
	"reflect"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	v1alpha1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/controller/scalepolicy"
	"github.com/neuronetes/neuronetes/controller/scalesim"
	"github.com/neuronetes/neuronetes/warmpool"
)

// simPresetPool is the AgentPool spec of the simulator's NeuroNetes preset for the default replica
// model (prefill 2000 tok/s, 16 slots, SLO 2 s, max 64), as printed in docs/autoscaling.md.
const simPresetPool = `
apiVersion: neuronetes.io/v1alpha1
kind: AgentPool
metadata: {name: bench}
spec:
  minReplicas: 1
  maxReplicas: 64
  prewarmPercent: 0
  autoscaling:
    metrics:
      - {type: tokens-in-queue, target: "6000", averagingWindow: 5s}
      - {type: tokens-per-second, target: "1800", averagingWindow: 30s}
      - {type: concurrent-sessions, target: "11.2", averagingWindow: 30s}
    strategy: max
    behavior:
      scaleUp: {maxChangePercent: 100, maxChangeAbsolute: 4, periodSeconds: 15, selectPolicy: Max}
      scaleDown: {stabilizationWindow: 120s, maxChangePercent: 5, periodSeconds: 60}
    sloTarget:
      enabled: true
      breachOnly: true
      breachResponse: {scaleUpImmediately: true, maxScaleUp: 30}
      scaleDownSafety: {requireHeadroom: 50, checkDuration: 60s}
    predictive: {enabled: true, horizonMinutes: 3, minConfidence: 0.5}
`

// TestSimPresetIsAnAgentPool checks that the policy the trace simulator evaluates as NeuroNetes is
// what the controller derives from an AgentPool spec, field for field, so the benchmark measures
// a configuration users can write.
func TestSimPresetIsAnAgentPool(t *testing.T) {
	var pool v1alpha1.AgentPool
	if err := yaml.UnmarshalStrict([]byte(simPresetPool), &pool); err != nil {
		t.Fatal(err)
	}
	var class v1alpha1.AgentClass
	if err := yaml.UnmarshalStrict([]byte("spec: {slo: {ttft: 2s}}"), &class); err != nil {
		t.Fatal(err)
	}
	got, err := PolicyFromAgentPool(&pool, &class, nil)
	if err != nil {
		t.Fatal(err)
	}
	m := scalesim.Model{PrefillTPS: 2000, DecodeTPS: 30, Slots: 16, ColdStart: time.Minute, WarmActivation: 5 * time.Second, SLO: 2 * time.Second}
	d := scalesim.NeuroNetes(m, scalesim.Config{MaxReplicas: 64, TargetUtilization: 0.7})
	want := d.Policy
	// The simulator disables the season explicitly (-1); the spec leaves it at its 24 h default,
	// which is longer than any trace, so both forecast the trend only.
	if want.Predictive.Season != -1 || got.Predictive.Season != 0 {
		t.Fatalf("season: sim %v, spec %v; want -1 and unset", want.Predictive.Season, got.Predictive.Season)
	}
	want.Predictive.Season = 0
	// Empty and nil lists mean the same.
	for _, p := range []*scalepolicy.Policy{&got, &want} {
		if len(p.Predictive.Schedules) == 0 {
			p.Predictive.Schedules = nil
		}
		if len(p.Cost.OnBudgetExceeded) == 0 {
			p.Cost.OnBudgetExceeded = nil
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("spec policy differs from the simulator preset:\n spec %+v\n  sim %+v", got, want)
	}
	if w := int(warmpool.Target(*pool.Spec.MaxReplicas, *pool.Spec.PrewarmPercent)); w != d.Warm {
		t.Errorf("warm pool: spec %d, sim %d", w, d.Warm)
	}
}
