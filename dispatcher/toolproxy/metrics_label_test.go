package toolproxy

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	v1alpha1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/dispatcher/metrics"
)

// TestToolNameLabel: the metrics' tool_name is a tool the registry serves to the caller; a
// random name in the path, or a tool of another namespace, is counted as "unknown" and never
// becomes a label value.
func TestToolNameLabel(t *testing.T) {
	fx := newIdentityFixture(t)
	reg := prometheus.NewRegistry()
	fx.proxy.Metrics = metrics.New(reg)
	random := "rnd-" + newID()
	tok := fx.api.mint(issued{ns: "other", sa: "default", pod: "agents-0", uid: "p5", aud: []string{v1alpha1.ToolProxyAudience}}, time.Hour, nil)
	own := fx.api.mint(issued{ns: "ns", sa: "default", pod: "agents-0", uid: "p1", aud: []string{v1alpha1.ToolProxyAudience}}, time.Hour, nil)
	for _, c := range []struct{ path, token string }{
		{"/v1/tools/ns/" + random, own}, // no such tool
		{"/v1/tools/ns/weather", tok},   // a tool of another namespace than the caller's
		{"/v1/tools/ns/" + random, ""},  // no caller
		{"/v1/tools/ns/weather", own},   // served
	} {
		req := httptest.NewRequest(http.MethodPost, c.path, bytes.NewReader([]byte(`{}`)))
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		fx.proxy.ServeHTTP(httptest.NewRecorder(), req)
	}
	m := fx.proxy.Metrics
	for _, w := range []struct {
		tool, pool, outcome string
		n                   float64
	}{
		{UnknownToolLabel, "agents", OutcomeNotFound, 2},
		{UnknownToolLabel, "", OutcomeRefusedAuth, 1},
		{"weather", "agents", OutcomeOK, 1},
	} {
		if got := testutil.ToFloat64(m.ToolCalls.WithLabelValues(w.tool, w.pool, w.outcome)); got != w.n {
			t.Errorf("tool calls %s/%s/%s = %v, want %v", w.tool, w.pool, w.outcome, got, w.n)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			for _, l := range mt.GetLabel() {
				if strings.Contains(l.GetValue(), random) {
					t.Fatalf("%s has the label %s=%q", mf.GetName(), l.GetName(), l.GetValue())
				}
			}
		}
	}
}
