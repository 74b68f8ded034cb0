package rollout

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/neuronetes/neuronetes/internal/egress"
)

// TestClassifierEgress: the classifier URL is user-chosen: without an admin allowlist a loopback
// or metadata address is refused, and an admitted classifier may not redirect.
func TestClassifierEgress(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, "http://169.254.169.254/", http.StatusFound)
			return
		}
		w.Write([]byte(`{"label":"code"}`))
	}))
	defer srv.Close()
	for _, tc := range []struct {
		name   string
		url    string
		client *http.Client
		denied bool
	}{
		{"loopback, default client", srv.URL, nil, true},
		{"metadata server", "http://169.254.169.254/classify", nil, true},
		{"loopback admitted", srv.URL, NewClassifierClient(egress.AllowLoopback()), false},
		{"admitted classifier redirects", srv.URL + "/redirect", NewClassifierClient(egress.AllowLoopback()), true},
	} {
		c := &Classifier{URL: tc.url, Timeout: 2 * time.Second, Client: tc.client}
		label, err := c.Classify(context.Background(), "x")
		if tc.denied != (err != nil) || (!tc.denied && label != "code") {
			t.Errorf("%s: label %q, err %v; want denied=%v", tc.name, label, err, tc.denied)
		}
		if tc.denied && tc.client == nil && !errors.Is(err, egress.ErrDenied) {
			t.Errorf("%s: err %v is not an egress denial", tc.name, err)
		}
	}
}
