package rollout

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/gateway/access"
	"github.com/neuronetes/neuronetes/gateway/sessionkey"
)

// feedbackServer serves f as the gateway does: the caller (chosen by the X-Tenant header of
// the test) is put in the request's context.
func feedbackServer(t *testing.T, f http.Handler, tenants map[string]*access.Tenant) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.ServeHTTP(w, r.WithContext(access.NewContext(r.Context(), tenants[r.Header.Get("X-Tenant")])))
	}))
	t.Cleanup(srv.Close)
	return srv
}

func postFeedback(t *testing.T, url, tenant, body string) (int, string, http.Header) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("X-Tenant", tenant)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// Feedback scores only the caller's own sessions, once each (across replicas sharing the
// store), and answers another tenant's session exactly as an unknown one.
func TestFeedback(t *testing.T) {
	v := view(nnv1.RolloutProgressing, 50, 0, "1-0")
	store := NewMemoryStore(time.Hour, 0)
	s, _ := newSplitter(v, store)
	sessions, _ := sessionkey.New(bytes.Repeat([]byte("k"), sessionkey.MinSecretBytes))
	acme := &access.Tenant{Namespace: "ns", Name: "acme"}
	tenants := map[string]*access.Tenant{"acme": acme, "rival": {Namespace: "ns", Name: "rival"},
		"elsewhere": {Namespace: "other", Name: "acme"}}
	// acme's conversation conv-1 took part in the rollout (the engine scopes the key).
	p, _ := s.Select(context.Background(), request("r1", sessions.Scope(acme, "conv-1")))
	replica1 := feedbackServer(t, &Feedback{Splitter: s, Sessions: sessions}, tenants)
	replica2 := feedbackServer(t, &Feedback{Splitter: s, Sessions: sessions}, tenants)
	unknownStatus, unknownBody, _ := postFeedback(t, replica1.URL, "acme", `{"session_id":"unknown","score":0.9}`)
	if unknownStatus != http.StatusNotFound {
		t.Fatalf("unknown session: %d %s", unknownStatus, unknownBody)
	}
	for _, c := range []struct {
		name, srv, tenant, body string
		status                  int
		sameAsUnknown           bool
	}{
		{"another tenant of the namespace", replica1.URL, "rival", `{"session_id":"conv-1","score":0.0}`, 404, true},
		{"another namespace's tenant of the same name", replica2.URL, "elsewhere", `{"session_id":"conv-1","score":0.0}`, 404, true},
		{"another tenant naming the rollout", replica1.URL, "rival", `{"session_id":"conv-1","score":0.0,"rollout":"ns/chat"}`, 404, true},
		{"the owner", replica1.URL, "acme", `{"session_id":"conv-1","score":0.9}`, 200, false},
		{"the owner again, on another replica", replica2.URL, "acme", `{"session_id":"conv-1","score":0.1}`, 409, false},
		{"score out of range", replica1.URL, "acme", `{"session_id":"conv-1","score":1.5}`, 400, false},
		{"no session", replica1.URL, "acme", `{"score":0.5}`, 400, false},
		{"not JSON", replica1.URL, "acme", `not json`, 400, false},
	} {
		status, body, _ := postFeedback(t, c.srv, c.tenant, c.body)
		if status != c.status || c.sameAsUnknown && body != unknownBody {
			t.Errorf("%s: %d %s, want %d (same as unknown: %v)", c.name, status, body, c.status, c.sameAsUnknown)
		}
	}
	variant := "stable"
	if p.Name == "v2" {
		variant = "canary"
	}
	var m dto.Metric
	if err := s.Recorder.Quality.WithLabelValues("ns", "chat", "1-0", variant).(prometheus.Histogram).Write(&m); err != nil {
		t.Fatal(err)
	}
	if m.GetHistogram().GetSampleCount() != 1 || m.GetHistogram().GetSampleSum() != 0.9 {
		t.Fatalf("quality histogram %v, want the owner's one score", m.GetHistogram())
	}
}

// Each tenant's posts are rate-limited on its own.
func TestFeedbackRateLimit(t *testing.T) {
	s, _ := newSplitter(view(nnv1.RolloutProgressing, 50, 0, "1-0"), NewMemoryStore(time.Hour, 0))
	now := time.Unix(1000, 0)
	f := &Feedback{Splitter: s, Sessions: sessionkey.Random(), Rate: 1, Burst: 2, Now: func() time.Time { return now }}
	srv := feedbackServer(t, f, map[string]*access.Tenant{"a": {Namespace: "ns", Name: "a"}, "b": {Namespace: "ns", Name: "b"}})
	body := `{"session_id":"x","score":0.5}`
	for i, c := range []struct {
		tenant string
		status int
	}{{"a", 404}, {"a", 404}, {"a", 429}, {"b", 404}} {
		status, msg, h := postFeedback(t, srv.URL, c.tenant, body)
		if status != c.status || status == 429 && h.Get("Retry-After") != "1" {
			t.Errorf("post %d by %s: %d %s (Retry-After %q), want %d", i, c.tenant, status, msg, h.Get("Retry-After"), c.status)
		}
	}
	now = now.Add(time.Second)
	if status, msg, _ := postFeedback(t, srv.URL, "a", body); status != 404 {
		t.Errorf("after the refill: %d %s", status, msg)
	}
	if status, _, _ := postFeedback(t, feedbackServer(t, f, nil).URL, "", body); status != http.StatusUnauthorized {
		t.Errorf("unauthenticated: %d", status)
	}
}
