package scaleapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	v1alpha1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

const testTokens = `
# namespaces token
agents          s3cret
team-a,team-b   multi
*               admin
`

func TestHandler(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	toks, err := ParseTokens([]byte(testTokens))
	if err != nil {
		t.Fatal(err)
	}
	pool := func(ns, name string, autoscaled bool) *v1alpha1.AgentPool {
		p := &v1alpha1.AgentPool{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		if autoscaled {
			p.Spec.Autoscaling = &v1alpha1.AutoscalingSpec{}
		}
		return p
	}
	tests := []struct {
		name, method, auth, body string
		wantCode                 int
		wantPool                 types.NamespacedName
		wantReplicas             int32
		wantUntil                time.Time
		wantMsg                  string
	}{
		{"the token's only namespace, default ttl", "POST", "Bearer s3cret", `{"pool":"my-pool","replicas":10,"reason":"traffic-spike-detected"}`,
			http.StatusAccepted, types.NamespacedName{Namespace: "agents", Name: "my-pool"}, 10, now.Add(DefaultTTL), ""},
		{"namespace and ttl", "POST", "Bearer multi", `{"pool":"p","namespace":"team-b","replicas":0,"ttlSeconds":60}`,
			http.StatusAccepted, types.NamespacedName{Namespace: "team-b", Name: "p"}, 0, now.Add(time.Minute), ""},
		{"cluster-wide token", "POST", "Bearer admin", `{"pool":"p","namespace":"team-a","replicas":2}`,
			http.StatusAccepted, types.NamespacedName{Namespace: "team-a", Name: "p"}, 2, now.Add(DefaultTTL), ""},
		{"namespace outside the token's scope", "POST", "Bearer s3cret", `{"pool":"p","namespace":"team-a","replicas":1}`,
			http.StatusForbidden, types.NamespacedName{}, 0, time.Time{}, `namespace "team-a": not allowed`},
		{"several namespaces and no default", "POST", "Bearer multi", `{"pool":"p","replicas":1}`,
			http.StatusBadRequest, types.NamespacedName{}, 0, time.Time{}, "namespace: required"},
		{"unknown pool", "POST", "Bearer s3cret", `{"pool":"nope","replicas":1}`, http.StatusNotFound, types.NamespacedName{}, 0, time.Time{}, "agentpool agents/nope not found"},
		{"pool without autoscaling", "POST", "Bearer s3cret", `{"pool":"manual","replicas":1}`, http.StatusConflict, types.NamespacedName{}, 0, time.Time{}, "no spec.autoscaling"},
		{"no token", "POST", "", `{"pool":"p","replicas":1}`, http.StatusUnauthorized, types.NamespacedName{}, 0, time.Time{}, ""},
		{"wrong token", "POST", "Bearer nope", `{"pool":"p","replicas":1}`, http.StatusUnauthorized, types.NamespacedName{}, 0, time.Time{}, ""},
		{"basic auth is not bearer", "POST", "Basic czNjcmV0", `{"pool":"p","replicas":1}`, http.StatusUnauthorized, types.NamespacedName{}, 0, time.Time{}, ""},
		{"GET", "GET", "Bearer s3cret", "", http.StatusMethodNotAllowed, types.NamespacedName{}, 0, time.Time{}, ""},
		{"missing pool", "POST", "Bearer s3cret", `{"replicas":1}`, http.StatusBadRequest, types.NamespacedName{}, 0, time.Time{}, "pool: required"},
		{"missing replicas", "POST", "Bearer s3cret", `{"pool":"p"}`, http.StatusBadRequest, types.NamespacedName{}, 0, time.Time{}, "replicas: required"},
		{"negative replicas", "POST", "Bearer s3cret", `{"pool":"p","replicas":-1}`, http.StatusBadRequest, types.NamespacedName{}, 0, time.Time{}, "replicas: must be >= 0"},
		{"unknown field", "POST", "Bearer s3cret", `{"pool":"p","replicas":1,"force":true}`, http.StatusBadRequest, types.NamespacedName{}, 0, time.Time{}, "force"},
		{"not json", "POST", "Bearer s3cret", `pool=p`, http.StatusBadRequest, types.NamespacedName{}, 0, time.Time{}, ""},
		{"outside the controller's namespace", "POST", "Bearer admin", `{"pool":"p","namespace":"team-b","replicas":2}`,
			http.StatusNotFound, types.NamespacedName{}, 0, time.Time{}, "manages namespace team-a only"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := runtime.NewScheme()
			_ = v1alpha1.AddToScheme(s)
			c := fake.NewClientBuilder().WithScheme(s).WithObjects(pool("agents", "my-pool", true), pool("agents", "manual", false),
				pool("team-a", "p", true), pool("team-b", "p", true)).Build()
			h := &Handler{Tokens: toks, Client: c, Now: func() time.Time { return now }}
			if strings.Contains(tc.name, "controller's namespace") {
				h.Scope = "team-a"
			}
			req := httptest.NewRequest(tc.method, "/v1/scale", strings.NewReader(tc.body))
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.wantCode || !strings.Contains(rec.Body.String(), tc.wantMsg) {
				t.Fatalf("code %d (%s), want %d with %q", rec.Code, rec.Body.String(), tc.wantCode, tc.wantMsg)
			}
			var pools v1alpha1.AgentPoolList
			_ = c.List(context.Background(), &pools)
			for _, p := range pools.Items {
				_, stored := p.Annotations[OverrideAnnotation]
				if want := tc.wantCode == http.StatusAccepted && p.Namespace == tc.wantPool.Namespace && p.Name == tc.wantPool.Name; stored != want {
					t.Fatalf("pool %s/%s override stored=%v, want %v", p.Namespace, p.Name, stored, want)
				}
				if !stored {
					continue
				}
				o, live, err := FromPool(&p, tc.wantUntil.Add(-time.Second))
				if err != nil || !live || o.Replicas != tc.wantReplicas {
					t.Fatalf("override %+v live %v err %v", o, live, err)
				}
				if _, live, _ := FromPool(&p, tc.wantUntil); live {
					t.Fatal("override outlived its ttl")
				}
			}
		})
	}
	if h := (&Handler{}); true {
		req := httptest.NewRequest("POST", "/v1/scale", strings.NewReader(`{"pool":"p","replicas":1}`))
		req.Header.Set("Authorization", "Bearer ")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusUnauthorized {
			t.Fatalf("a handler without tokens accepted a request: %d", rec.Code)
		}
	}
}

func TestParseTokens(t *testing.T) {
	for _, tc := range []struct{ name, in, wantErr string }{
		{"one field", "s3cret\n", "line 1: want"},
		{"bad namespace", "Agents tok\n", `"Agents" is not a namespace name`},
		{"duplicate token", "a tok\nb tok\n", "line 2: the token of line 1 again"},
		{"empty", "# nothing\n\n", "no token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := ParseTokens([]byte(tc.in)); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err %v, want %q", err, tc.wantErr)
			}
		})
	}
	dir := t.TempDir()
	if _, err := LoadTokens(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("missing file: no error")
	}
	p := filepath.Join(dir, "tokens")
	_ = os.WriteFile(p, []byte("ns1,ns2 abc\n"), 0o600)
	toks, err := LoadTokens(p)
	if err != nil {
		t.Fatal(err)
	}
	if ns, all, ok := toks.Lookup("abc"); !ok || all || !ns["ns1"] || !ns["ns2"] || ns["ns3"] {
		t.Fatalf("lookup: %v %v %v", ns, all, ok)
	}
}

func TestFromPool(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name, ann string
		live      bool
		wantErr   string
	}{
		{"live", Override{Replicas: 3, Reason: "r", Until: now.Add(time.Minute)}.Encode(), true, ""},
		{"expired", Override{Replicas: 3, Until: now}.Encode(), false, ""},
		{"not json", "3", false, OverrideAnnotation},
		{"negative", `{"replicas":-1,"until":"2030-01-01T00:00:00Z"}`, false, "replicas must be >= 0"},
		{"no until", `{"replicas":1}`, false, "until is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &v1alpha1.AgentPool{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{OverrideAnnotation: tc.ann}}}
			_, live, err := FromPool(p, now)
			if live != tc.live || (err == nil) != (tc.wantErr == "") || err != nil && !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("live %v err %v", live, err)
			}
		})
	}
}
