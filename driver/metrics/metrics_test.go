package metrics

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestHandlerServesDriverMetrics(t *testing.T) {
	m := New()
	m.PrepareSeconds.WithLabelValues("ok").Observe(0.002)
	m.UnprepareSeconds.WithLabelValues("ok").Observe(0.001)
	m.DevicesAdvertised.WithLabelValues("gpu").Set(8)
	m.MIGInstances.Set(2)
	m.PreparedClaims.Set(1)
	m.HealthEvents.WithLabelValues("xid", "79", "true").Inc()
	m.TaintedGPUs.Set(1)
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`neuronetes_driver_prepare_seconds_count{result="ok"} 1`,
		`neuronetes_driver_unprepare_seconds_count{result="ok"} 1`,
		`neuronetes_driver_devices_advertised{type="gpu"} 8`,
		`neuronetes_driver_mig_instances 2`,
		`neuronetes_driver_prepared_claims 1`,
		`neuronetes_driver_health_events_total{fatal="true",kind="xid",xid="79"} 1`,
		`neuronetes_driver_tainted_gpus 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}
