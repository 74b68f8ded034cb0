package ctrlserving

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-logr/logr"
)

func TestMetricsFilterServes(t *testing.T) {
	f, err := MetricsFilter(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	h, err := f(logr.Discard(), http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) }))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTeapot {
		t.Fatalf("filtered handler answered %d, want the wrapped handler's 418", resp.StatusCode)
	}
}
