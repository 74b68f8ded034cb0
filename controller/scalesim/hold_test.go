package scalesim

import (
	"testing"
	"time"

	"github.com/neuronetes/neuronetes/controller/scalepolicy"
)

// TestFirstDecisionHoldsWithoutSamples: at t=0 no second has been sampled,
// so every metric is missing and each policy holds the initial count rather
// than reading the empty window as zero demand (the t=0 ratchet: 7 -> 1, then
// the misses that follow raise the learned headroom for good).
func TestFirstDecisionHoldsWithoutSamples(t *testing.T) {
	m := testModel
	m.SLO = 5 * time.Second
	tr := burst(0, 0, Request{Arrival: 30, In: 100, Out: 1})
	for _, p := range []*Decider{NeuroNetes(m, Config{MaxReplicas: 16, Attainment: 0.99}), HPA(m, Config{MaxReplicas: 16, TargetUtilization: 0.7})} {
		t.Run(p.Label, func(t *testing.T) {
			c := newCluster(m, tr.Requests, 7)
			if got := p.Decide(View{c}); got != 7 {
				t.Fatalf("first decision without samples: got %d, want 7 (hold)", got)
			}
			if r := p.Last().Reason; r != scalepolicy.ReasonNoMetrics {
				t.Fatalf("reason %s, want %s", r, scalepolicy.ReasonNoMetrics)
			}
			if p.Label != "neuronetes" {
				return // the HPA's scale-down stabilization holds for 300 s anyway
			}
			c.step(1)
			c.record()
			if got := p.Decide(View{c}); got >= 7 {
				t.Fatalf("with an idle sample: got %d, want a scale-down", got)
			}
		})
	}
}

func TestDeciderSummarizesLearnedState(t *testing.T) {
	m := testModel
	m.SLO = 5 * time.Second
	nn, hpa := NeuroNetes(m, Config{MaxReplicas: 16, Attainment: 0.99}), HPA(m, Config{MaxReplicas: 16, TargetUtilization: 0.7})
	Run(steady(120), m, nn, 2)
	Run(steady(120), m, hpa, 2)
	l := nn.Learned()
	if l.Decisions == 0 || l.MeanHeadroom < 0.3 || l.MeanHeadroom > 4 || l.EndMemory <= 0 || l.MaxHeadroom < l.MeanHeadroom {
		t.Fatalf("neuronetes learned %+v", l)
	}
	if hpa.Learned().Decisions != 0 || hpa.Learned().String() != "not adaptive" {
		t.Fatalf("hpa learned %+v", hpa.Learned())
	}
}
