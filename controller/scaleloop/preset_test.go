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
// model (prefill 2000 tok/s, 16 slots, max 64) under a 2 s TTFT SLO, as printed in
// docs/autoscaling.md.
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
      - {type: tokens-per-second, target: "2000", averagingWindow: 10s}
      - {type: concurrent-sessions, target: "16", averagingWindow: 10s}
    strategy: max
    sloTarget:
      enabled: true
      adaptive: {attainmentPercent: 99}
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
	d := scalesim.NeuroNetes(m, scalesim.Config{MaxReplicas: 64, TargetUtilization: 0.7, Attainment: 0.99})
	want := d.Policy
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
