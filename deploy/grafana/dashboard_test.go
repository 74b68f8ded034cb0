package grafana

import (
	"reflect"
	"strings"
	"testing"
)

func TestExprMetrics(t *testing.T) {
	cases := []struct {
		expr string
		want []string
	}{
		{`neuronetes_agentpool_replicas`, []string{"neuronetes_agentpool_replicas"}},
		{`sum by (namespace, pool) (neuronetes_warm_pool_replicas{namespace=~"$namespace", pool=~"a|b"})`, []string{"neuronetes_warm_pool_replicas"}},
		{`histogram_quantile(0.95, sum by (le) (rate(neuronetes_ttft_seconds_bucket{x="y"}[5m])))`, []string{"neuronetes_ttft_seconds_bucket"}},
		{`rate(vllm:generation_tokens_total[1m]) / clamp_min(up, 1e-9)`, []string{"vllm:generation_tokens_total", "up"}},
		{`sum(a + b) * $cost_per_replica_hour`, []string{"a", "b"}},
		{`a and on (pool) b offset 5m`, []string{"a", "b"}},
	}
	for _, tc := range cases {
		got, err := ExprMetrics(tc.expr)
		if err != nil {
			t.Errorf("%s: %v", tc.expr, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.expr, got, tc.want)
		}
	}
	for _, bad := range []string{`sum(rate(x[5m])`, `x{a="b"`, `sum(1)`} {
		if _, err := ExprMetrics(bad); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

func TestExported(t *testing.T) {
	fam := map[string]string{"h": "histogram", "s": "summary", "c": "counter"}
	cases := map[string]bool{"h": true, "h_bucket": true, "h_count": true, "s_sum": true, "s_bucket": false, "c": true, "c_bucket": false, "x": false}
	for name, want := range cases {
		if got := Exported(name, fam); got != want {
			t.Errorf("Exported(%q) = %v, want %v", name, got, want)
		}
	}
}

// TestDashboardHasSeedPanels checks the panels the autoscaling guide (seed 001) asks for, and that
// each names the metrics it is about. Whether those metrics exist is checked against the running
// components by the e2e test TestDeployDashboardMetricsExported.
func TestDashboardHasSeedPanels(t *testing.T) {
	d, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"replicas vs desired vs warm": {"neuronetes_agentpool_replicas", "neuronetes_agentpool_desired_replicas", "neuronetes_warm_pool_replicas"},
		"scaling triggers":            {"neuronetes_tokens_in_queue", "neuronetes_concurrent_sessions", "neuronetes_ttft_seconds_bucket"},
		"scale operations":            {"neuronetes_scale_up_total", "neuronetes_scale_down_total"},
		"ttft p95":                    {"neuronetes_ttft_seconds_bucket"},
		"tokens per second":           {"neuronetes_tokens_total"},
		"retrieval misses":            {"neuronetes_retrieval_misses_total"},
		"cost":                        {"neuronetes_agentpool_replicas"},
	}
	match := map[string]string{
		"replicas vs desired vs warm": "actual vs desired vs warm",
		"scaling triggers":            "scaling triggers",
		"scale operations":            "scale operations (1h)",
		"ttft p95":                    "ttft p95",
		"tokens per second":           "tokens per second",
		"retrieval misses":            "retrieval misses",
		"cost":                        "cost",
	}
	for key, metrics := range want {
		var p *Panel
		for i := range d.Panels {
			if strings.Contains(strings.ToLower(d.Panels[i].Title), match[key]) {
				p = &d.Panels[i]
			}
		}
		if p == nil {
			t.Errorf("no panel for %q", key)
			continue
		}
		got := map[string]bool{}
		for _, tg := range p.Targets {
			names, err := ExprMetrics(tg.Expr)
			if err != nil {
				t.Fatalf("panel %q: %v", p.Title, err)
			}
			for _, n := range names {
				got[n] = true
			}
		}
		for _, m := range metrics {
			if !got[m] {
				t.Errorf("panel %q does not query %s (has %v)", p.Title, m, got)
			}
		}
	}
	names, err := d.MetricNames()
	if err != nil {
		t.Fatal(err)
	}
	if len(names) < 10 {
		t.Errorf("dashboard names %d metrics, want at least 10: %v", len(names), names)
	}
}
