package front

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/neuronetes/neuronetes/gateway/access"
	"github.com/neuronetes/neuronetes/gateway/engine"
	"github.com/neuronetes/neuronetes/gateway/metrics"
	"github.com/neuronetes/neuronetes/gateway/route"
)

// Extension handlers run only for authenticated callers and find the caller in the context
// (POST /v1/feedback scores the caller's own sessions by it).
func TestHandlersGetTheCaller(t *testing.T) {
	e := &engine.Engine{Table: route.NewTable(nil), Auth: keyAuth{}, Metrics: metrics.New(prometheus.NewRegistry())}
	s := &Server{Engine: e, Handlers: map[string]http.Handler{"POST /x": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if t := access.FromContext(r.Context()); t != nil {
			_, _ = io.WriteString(w, t.Key())
		}
	})}}
	s.Init()
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	for _, tc := range []struct {
		auth   string
		status int
		body   string
	}{{"Bearer good", 200, "anonymous"}, {"Bearer bad", 401, ""}} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/x", nil)
		req.Header.Set("Authorization", tc.auth)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.status || tc.status == 200 && string(b) != tc.body {
			t.Errorf("%s: %d %q, want %d %q", tc.auth, resp.StatusCode, b, tc.status, tc.body)
		}
	}
}

// TestEmbeddingsRoute checks POST /v1/embeddings is served (it was a 404): authenticated, then
// relayed to the model server.
func TestEmbeddingsRoute(t *testing.T) {
	base := gateway(t, keyAuth{})
	for _, tc := range []struct {
		key  string
		want int
	}{{"", 401}, {"Bearer good", 200}} {
		req, _ := http.NewRequest("POST", base+"/v1/embeddings", strings.NewReader(`{"model":"m","input":"hi"}`))
		if tc.key != "" {
			req.Header.Set("Authorization", tc.key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("key %q: status %d, want %d", tc.key, resp.StatusCode, tc.want)
		}
	}
}
