package main

import (
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func families(t *testing.T, page string) map[string]*dto.MetricFamily {
	t.Helper()
	tp := expfmt.NewTextParser(model.UTF8Validation)
	f, err := tp.TextToMetricFamilies(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestSessionsOf sums the gateway replicas' views as the autoscaler does: a shared (Redis) count
// is the same on every replica and is taken once per pod; replica-scoped counts add up.
func TestSessionsOf(t *testing.T) {
	const head = "# TYPE neuronetes_concurrent_sessions gauge\n"
	a := head + `neuronetes_concurrent_sessions{pod="p1",scope="shared"} 3
neuronetes_concurrent_sessions{pod="p2",scope="shared"} 1
`
	b := head + `neuronetes_concurrent_sessions{pod="p1",scope="shared"} 2
neuronetes_concurrent_sessions{pod="p2",scope="shared"} 1
`
	own := head + `neuronetes_concurrent_sessions{pod="p1",scope="replica"} 2
neuronetes_concurrent_sessions{pod="p3",scope="replica"} 1
`
	for _, tc := range []struct {
		name  string
		pages []string
		want  float64
	}{
		{"one replica", []string{a}, 4},
		{"two replicas share the Redis count", []string{a, b}, 4},
		{"replica counts add up", []string{own, own}, 6},
		{"mixed", []string{a, own}, 7},
		{"no sessions metric", []string{"# TYPE other gauge\nother 1\n"}, 0},
		{"no replicas", nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var views []map[string]*dto.MetricFamily
			for _, p := range tc.pages {
				views = append(views, families(t, p))
			}
			if got := sessionsOf(views); got != tc.want {
				t.Errorf("sessionsOf = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestGaugeSum(t *testing.T) {
	f := families(t, `# TYPE neuronetes_gateway_endpoints gauge
neuronetes_gateway_endpoints{pool="neuronetes-demo/demo"} 4
neuronetes_gateway_endpoints{pool="other/demo"} 2
`)
	if got := gaugeSum(f, "neuronetes_gateway_endpoints", "pool", "neuronetes-demo/demo"); got != 4 {
		t.Errorf("got %v, want 4", got)
	}
	if got := gaugeSum(f, "neuronetes_gateway_endpoints", "pool", "missing/pool"); got != 0 {
		t.Errorf("got %v, want 0", got)
	}
}
