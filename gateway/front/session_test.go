package front

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/neuronetes/neuronetes/gateway/access"
	"github.com/neuronetes/neuronetes/gateway/engine"
	"github.com/neuronetes/neuronetes/gateway/metrics"
	"github.com/neuronetes/neuronetes/gateway/openai"
	"github.com/neuronetes/neuronetes/gateway/route"
	"github.com/neuronetes/neuronetes/gateway/sessionroute"
)

// tenantAuth authenticates every caller as a tenant of namespace team-a.
type tenantAuth struct{}

func (tenantAuth) Authenticate(context.Context, http.Header) (*access.Tenant, *openai.Error) {
	return &access.Tenant{Name: "t", Namespace: "team-a", AllModels: true}, nil
}

// askedSessions records what the engine asked the session router, and answers 404.
type askedSessions struct {
	mu    sync.Mutex
	asked []string
}

func (a *askedSessions) Await(_ context.Context, ns, name string) (route.Endpoint, *openai.Error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.asked = append(a.asked, ns+"/"+name)
	return route.Endpoint{}, sessionroute.NotFound(name)
}

func (a *askedSessions) AwaitPool(ctx context.Context, ns, name string, _ sessionroute.PoolOwner) (route.Endpoint, *openai.Error) {
	return a.Await(ctx, ns, name)
}

// TestSessionPaths: POST /v1/sessions/<name>/chat/completions and /completions reach the session
// router with the caller's namespace and the path's name; other methods and deeper paths are not
// session routes.
func TestSessionPaths(t *testing.T) {
	rec := &askedSessions{}
	e := &engine.Engine{Table: route.NewTable(nil), Auth: tenantAuth{}, Metrics: metrics.New(prometheus.NewRegistry()), AgentSessions: rec}
	e.Init()
	s := &Server{Engine: e}
	s.Init()
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	for _, tc := range []struct {
		method, path string
		status       int
		code, asked  string
	}{
		{"POST", "/v1/sessions/alice-1/chat/completions", 404, "session_not_found", "team-a/alice-1"},
		{"POST", "/v1/sessions/alice-1/completions", 404, "session_not_found", "team-a/alice-1"},
		{"POST", "/v1/sessions/team-b/alice-1/chat/completions", 404, "unknown_url", ""},
		{"GET", "/v1/sessions/alice-1/chat/completions", 404, "unknown_url", ""},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			rec.asked = nil
			req, _ := http.NewRequest(tc.method, srv.URL+tc.path, strings.NewReader(`{"model":"m","prompt":"hi","messages":[{"role":"user","content":"hi"}]}`))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.status || !strings.Contains(string(b), tc.code) {
				t.Fatalf("%d %s, want %d %s", resp.StatusCode, b, tc.status, tc.code)
			}
			if got := strings.Join(rec.asked, ","); got != tc.asked {
				t.Fatalf("router asked %q, want %q", got, tc.asked)
			}
		})
	}
}
