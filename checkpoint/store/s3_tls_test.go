package store

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestS3DefaultsToTLS: a zero-value S3Config speaks https, so a plain-http endpoint never
// receives a request (process memory is never sent in clear by default); Insecure opts in to
// plain http.
func TestS3DefaultsToTLS(t *testing.T) {
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.WriteHeader(http.StatusOK) // HEAD bucket: it exists
	}))
	defer srv.Close()
	endpoint := strings.TrimPrefix(srv.URL, "http://")
	tests := []struct {
		name     string
		insecure bool
		wantOK   bool
	}{
		{"default is https", false, false},
		{"insecure opts in to http", true, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			requests.Store(0)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := NewS3(ctx, S3Config{Endpoint: endpoint, Bucket: "checkpoints", AccessKey: "k", SecretKey: "s", Insecure: tc.insecure})
			if (err == nil) != tc.wantOK {
				t.Fatalf("NewS3: %v, want ok=%v", err, tc.wantOK)
			}
			t.Logf("NewS3: %v", err)
			if got := requests.Load(); (got > 0) != tc.wantOK {
				t.Errorf("plain-http server saw %d requests, want any=%v", got, tc.wantOK)
			}
		})
	}
}
