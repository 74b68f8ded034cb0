package toolproxy

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	v1alpha1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/internal/egress"
)

const weatherSchema = `{"type":"object","required":["city"],"additionalProperties":false,
 "properties":{"city":{"type":"string","minLength":2},"days":{"type":"integer","minimum":1,"maximum":7}}}`

func toolBinding(name, typ, endpoint string, cfg v1alpha1.ToolConfig) *v1alpha1.ToolBinding {
	return &v1alpha1.ToolBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Spec: v1alpha1.ToolBindingSpec{Type: typ, Endpoint: endpoint, AgentPoolRef: &v1alpha1.LocalObjectReference{Name: "agents"}, Tool: &cfg}}
}

// grpcTool serves the standard health service with reflection.
func grpcTool(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	healthpb.RegisterHealthServer(s, health.NewServer())
	reflection.Register(s)
	go func() { _ = s.Serve(l) }()
	t.Cleanup(s.Stop)
	return l.Addr().String()
}

func TestProxy(t *testing.T) {
	var calls atomic.Int64
	httpTool := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		b, _ := io.ReadAll(r.Body)
		if strings.Contains(string(b), "slow") {
			time.Sleep(300 * time.Millisecond)
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"forecast":"sun","got":` + string(b) + `,"key":"` + r.Header.Get("Idempotency-Key") + `"}`))
	}))
	defer httpTool.Close()
	reg := NewRegistry()
	reg.Update(toolBinding("weather", "http", httpTool.URL, v1alpha1.ToolConfig{Parameters: &runtime.RawExtension{Raw: []byte(weatherSchema)}}))
	pay := toolBinding("pay", "http", httpTool.URL, v1alpha1.ToolConfig{SideEffects: true, AllowedPools: []string{"billing"}})
	pay.Spec.AgentPoolRef = nil
	reg.Update(pay)
	reg.Update(toolBinding("slow", "http", httpTool.URL, v1alpha1.ToolConfig{Timeout: "100ms"}))
	reg.Update(toolBinding("health", "grpc", grpcTool(t), v1alpha1.ToolConfig{Method: "grpc.health.v1.Health/Check"}))
	reg.Update(toolBinding("broken", "http", httpTool.URL, v1alpha1.ToolConfig{Parameters: &runtime.RawExtension{Raw: []byte(`{"type":"nonsense"}`)}}))
	audit := &Audit{}
	p := &Proxy{Registry: reg, Invoker: &Invokers{Egress: egress.AllowLoopback()}, Idem: &MemoryIdem{}, Audit: audit, Identity: StaticIdentity{
		"10.0.0.1": {Namespace: "ns", Pool: "agents", Pod: "agents-0"},
		"10.0.0.2": {Namespace: "ns", Pool: "billing", Pod: "billing-0"},
		"10.0.0.3": {Namespace: "other", Pool: "agents", Pod: "agents-0"},
	}}
	for _, tc := range []struct {
		name, from, path, body, key string
		status                      int
		code, outcome, inBody       string
		toolCalls                   int64 // calls of the HTTP tool after this case
	}{
		{"ok", "10.0.0.1", "/v1/tools/ns/weather", `{"city":"Lyon","days":3}`, "", 200, "", OutcomeOK, `"forecast":"sun"`, 1},
		{"schema: missing field", "10.0.0.1", "/v1/tools/ns/weather", `{"days":3}`, "", 400, "schema_violation", OutcomeRefusedSchema, "missing property 'city'", 1},
		{"schema: out of range, extra field", "10.0.0.1", "/v1/tools/ns/weather", `{"city":"SecretTown","days":99,"x":1}`, "", 400, "schema_violation", OutcomeRefusedSchema, "at /days", 1},
		{"not JSON", "10.0.0.1", "/v1/tools/ns/weather", `{city`, "", 400, "schema_violation", OutcomeRefusedSchema, "not JSON", 1},
		{"unknown caller", "192.0.2.9", "/v1/tools/ns/weather", `{"city":"Lyon"}`, "", 401, "unknown_caller", OutcomeRefusedAuth, "not a pod of an AgentPool", 1},
		{"pool not allowed", "10.0.0.1", "/v1/tools/ns/pay", `{}`, "", 403, "forbidden_tool", OutcomeRefusedAuth, "AgentPool agents may not call", 1},
		{"other namespace", "10.0.0.3", "/v1/tools/ns/weather", `{"city":"Lyon"}`, "", 404, "tool_not_found", OutcomeNotFound, "", 1},
		{"no such tool", "10.0.0.1", "/v1/tools/ns/nope", `{}`, "", 404, "tool_not_found", OutcomeNotFound, "", 1},
		{"invalid binding is not served", "10.0.0.1", "/v1/tools/ns/broken", `{}`, "", 404, "tool_not_found", OutcomeNotFound, "", 1},
		{"side effects need a key", "10.0.0.2", "/v1/tools/ns/pay", `{"amount":5}`, "", 428, "idempotency_key_required", OutcomeRefusedIdempotency, "Idempotency-Key", 1},
		{"side effects with a key", "10.0.0.2", "/v1/tools/ns/pay", `{"amount":5}`, "k1", 200, "", OutcomeOK, `"key":"k1"`, 2},
		{"the same key is replayed", "10.0.0.2", "/v1/tools/ns/pay", `{"amount":5}`, "k1", 200, "", OutcomeReplayed, `"key":"k1"`, 2},
		{"the same key with other arguments", "10.0.0.2", "/v1/tools/ns/pay", `{"amount":6}`, "k1", 422, "idempotency_key_reused", OutcomeRefusedIdempotency, "", 2},
		{"timeout", "10.0.0.1", "/v1/tools/ns/slow", `"slowly"`, "", 504, "tool_timeout", OutcomeTimeout, "within 100ms", 3},
		{"grpc by reflection", "10.0.0.1", "/v1/tools/ns/health", `{"service":""}`, "", 200, "", OutcomeOK, `"status":"SERVING"`, 3},
		{"grpc arguments that do not fit", "10.0.0.1", "/v1/tools/ns/health", `{"nope":1}`, "", 400, "", OutcomeToolError, "grpc.health.v1.HealthCheckRequest", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodPost, tc.path, bytes.NewReader([]byte(tc.body)))
			req.RemoteAddr = tc.from + ":40000"
			if tc.key != "" {
				req.Header.Set("Idempotency-Key", tc.key)
			}
			rec := httptest.NewRecorder()
			p.ServeHTTP(rec, req)
			body := rec.Body.String()
			if rec.Code != tc.status || !strings.Contains(body, tc.inBody) || (tc.code != "" && !strings.Contains(body, `"code":"`+tc.code+`"`)) {
				t.Fatalf("status %d body %s; want %d with code %q and %q", rec.Code, body, tc.status, tc.code, tc.inBody)
			}
			if calls.Load() != tc.toolCalls {
				t.Fatalf("the HTTP tool was called %d times, want %d", calls.Load(), tc.toolCalls)
			}
			es := audit.Entries()
			e := es[len(es)-1]
			if e.Outcome != tc.outcome || e.Status != tc.status || e.ArgBytes != len(tc.body) || e.RequestID != rec.Header().Get("X-Request-Id") {
				t.Fatalf("audit entry %+v; want outcome %s status %d argument bytes %d", e, tc.outcome, tc.status, len(tc.body))
			}
			raw, _ := json.Marshal(e)
			if len(tc.body) > 2 && strings.Contains(string(raw), strings.Trim(tc.body, "{}")) {
				t.Fatalf("audit entry holds the arguments: %s", raw)
			}
		})
	}
	// The audit of the out-of-range call names the failing keywords, not the values.
	refused := 0
	for _, e := range audit.Entries() {
		if e.Outcome == OutcomeRefusedSchema && e.Tool == "weather" && len(e.Violations) >= 2 {
			refused++
			// The random request ID, the time and the duration may hold "99" by chance.
			e.RequestID, e.Time, e.DurationMs = "", time.Time{}, 0
			raw, _ := json.Marshal(e)
			if strings.Contains(string(raw), "SecretTown") || strings.Contains(string(raw), "99") {
				t.Fatalf("audit leaks values: %s", raw)
			}
		}
	}
	if refused != 1 {
		t.Fatalf("want one refused entry with its violations, got %d", refused)
	}
	h := reg.Health()
	if b := h[types.NamespacedName{Namespace: "ns", Name: "broken"}]; b.State != "error" || b.Reason != "InvalidSchema" || !strings.Contains(b.Message, "spec.tool.parameters") {
		t.Fatalf("health of the broken binding = %+v", b)
	}
	if w := h[types.NamespacedName{Namespace: "ns", Name: "weather"}]; w.State != "consuming" || w.ReadyReason != "ToolServed" {
		t.Fatalf("health of weather = %+v", w)
	}
}

func TestBuildErrors(t *testing.T) {
	for _, tc := range []struct {
		b     *v1alpha1.ToolBinding
		field string
	}{
		{toolBinding("t", "http", "", v1alpha1.ToolConfig{}), "spec.endpoint"},
		{toolBinding("t", "grpc", "h:1", v1alpha1.ToolConfig{Method: "nomethod"}), "spec.tool.method"},
		{toolBinding("t", "http", "http://x", v1alpha1.ToolConfig{Timeout: "0s"}), "spec.tool.timeout"},
		{toolBinding("t", "http", "http://x", v1alpha1.ToolConfig{Parameters: &runtime.RawExtension{Raw: []byte(`{"$ref":"http://example.com/s.json"}`)}}), "spec.tool.parameters"},
		{&v1alpha1.ToolBinding{ObjectMeta: metav1.ObjectMeta{Name: "t"}, Spec: v1alpha1.ToolBindingSpec{Type: "http", Endpoint: "http://x"}}, "spec.tool.allowedPools"},
	} {
		if _, err := Build(tc.b); err == nil || !strings.HasPrefix(err.Error(), tc.field+": ") {
			t.Errorf("Build = %v, want an error on %s", err, tc.field)
		}
	}
}
