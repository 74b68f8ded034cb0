package scaleloop

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestMetricsURLStaysOnThePod: the metrics annotations are the pod owner's; whatever they say,
// the scrape URL's host is the pod's IP.
func TestMetricsURLStaysOnThePod(t *testing.T) {
	for _, tc := range []struct {
		port, path string
		want       string // "" = refused
	}{
		{"", "", "http://10.88.0.7:8000/metrics"},
		{"9400", "/custom/metrics", "http://10.88.0.7:9400/custom/metrics"},
		{"8000@169.254.169.254", "", ""},
		{"80/../", "", ""},
		{"0", "", ""},
		{"", "@169.254.169.254/latest", ""},
		{"", "metrics", ""},
		{"", "/a?x=http://169.254.169.254/", ""},
		{"", "/../../x", ""},
	} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{}}, Status: corev1.PodStatus{PodIP: "10.88.0.7"}}
		if tc.port != "" {
			p.Annotations[MetricsPortAnnotation] = tc.port
		}
		if tc.path != "" {
			p.Annotations[MetricsPathAnnotation] = tc.path
		}
		got, err := metricsURL(p)
		if tc.want == "" {
			if err == nil {
				t.Errorf("port %q path %q: URL %s, want refused", tc.port, tc.path, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("port %q path %q: %s, %v; want %s", tc.port, tc.path, got, err, tc.want)
		}
	}
}

// TestScrapeFollowsNoRedirect: a pod answering its scrape with a redirect does not make the
// controller fetch another address.
func TestScrapeFollowsNoRedirect(t *testing.T) {
	hit := false
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hit = true }))
	defer other.Close()
	pod := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+"/metrics", http.StatusFound)
	}))
	defer pod.Close()
	for _, c := range []*http.Client{nil, httpClient} {
		_, err := Scraper{Client: c}.Scrape(context.Background(), pod.URL+"/metrics")
		if err == nil || !strings.Contains(err.Error(), "redirect") || hit {
			t.Fatalf("err %v, redirect target reached %v", err, hit)
		}
	}
}
