package scaleapi

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

func TestHandler(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name, method, auth, body string
		wantCode                 int
		wantPool                 types.NamespacedName
		wantReplicas             int32
		wantUntil                time.Time
	}{
		{"accepted with default namespace and ttl", "POST", "Bearer s3cret", `{"pool":"my-pool","replicas":10,"reason":"traffic-spike-detected"}`,
			http.StatusAccepted, types.NamespacedName{Namespace: "agents", Name: "my-pool"}, 10, now.Add(DefaultTTL)},
		{"accepted with namespace and ttl", "POST", "Bearer s3cret", `{"pool":"p","namespace":"x","replicas":0,"ttlSeconds":60}`,
			http.StatusAccepted, types.NamespacedName{Namespace: "x", Name: "p"}, 0, now.Add(time.Minute)},
		{"no token", "POST", "", `{"pool":"p","replicas":1}`, http.StatusUnauthorized, types.NamespacedName{}, 0, time.Time{}},
		{"wrong token", "POST", "Bearer nope", `{"pool":"p","replicas":1}`, http.StatusUnauthorized, types.NamespacedName{}, 0, time.Time{}},
		{"basic auth is not bearer", "POST", "Basic czNjcmV0", `{"pool":"p","replicas":1}`, http.StatusUnauthorized, types.NamespacedName{}, 0, time.Time{}},
		{"GET", "GET", "Bearer s3cret", "", http.StatusMethodNotAllowed, types.NamespacedName{}, 0, time.Time{}},
		{"missing pool", "POST", "Bearer s3cret", `{"replicas":1}`, http.StatusBadRequest, types.NamespacedName{}, 0, time.Time{}},
		{"missing replicas", "POST", "Bearer s3cret", `{"pool":"p"}`, http.StatusBadRequest, types.NamespacedName{}, 0, time.Time{}},
		{"negative replicas", "POST", "Bearer s3cret", `{"pool":"p","replicas":-1}`, http.StatusBadRequest, types.NamespacedName{}, 0, time.Time{}},
		{"unknown field", "POST", "Bearer s3cret", `{"pool":"p","replicas":1,"force":true}`, http.StatusBadRequest, types.NamespacedName{}, 0, time.Time{}},
		{"not json", "POST", "Bearer s3cret", `pool=p`, http.StatusBadRequest, types.NamespacedName{}, 0, time.Time{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var notified []types.NamespacedName
			store := &Overrides{Notify: func(n types.NamespacedName) { notified = append(notified, n) }}
			h := &Handler{Token: "s3cret", DefaultNamespace: "agents", Store: store, Now: func() time.Time { return now }}
			req := httptest.NewRequest(tc.method, "/v1/scale", strings.NewReader(tc.body))
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.wantCode {
				t.Fatalf("code %d (%s), want %d", rec.Code, rec.Body.String(), tc.wantCode)
			}
			if tc.wantCode != http.StatusAccepted {
				if len(notified) != 0 || len(store.m) != 0 {
					t.Fatalf("rejected request stored an override: %v", store.m)
				}
				return
			}
			o := store.Get(tc.wantPool, tc.wantUntil.Add(-time.Second))
			if o == nil || o.Replicas != tc.wantReplicas || len(notified) != 1 || notified[0] != tc.wantPool {
				t.Fatalf("override %+v notified %v", o, notified)
			}
			if store.Get(tc.wantPool, tc.wantUntil) != nil {
				t.Fatal("override outlived its ttl")
			}
		})
	}
	if h := (&Handler{Store: &Overrides{}}); true {
		req := httptest.NewRequest("POST", "/v1/scale", strings.NewReader(`{"pool":"p","replicas":1}`))
		req.Header.Set("Authorization", "Bearer ")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusUnauthorized {
			t.Fatalf("empty configured token accepted a request: %d", rec.Code)
		}
	}
}

func TestTokenFromFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "token")
	empty := filepath.Join(dir, "empty")
	_ = os.WriteFile(good, []byte("abc\n"), 0o600)
	_ = os.WriteFile(empty, []byte(" \n"), 0o600)
	if tok, err := TokenFromFile(good); err != nil || tok != "abc" {
		t.Fatalf("got %q, %v", tok, err)
	}
	for _, p := range []string{empty, filepath.Join(dir, "missing")} {
		if _, err := TokenFromFile(p); err == nil {
			t.Fatalf("%s: no error", p)
		}
	}
}
