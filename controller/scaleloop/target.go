package scaleloop

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// metricsURL is where p's metrics are scraped: always the pod's own IP, with the port and path
// its annotations may set. The annotations are the pod owner's: a port that is not a number or
// a path that is not a plain absolute path (no "?", "#", "@", "\\" or ".." segment) is refused, so
// an annotation cannot turn the URL into another host's.
func metricsURL(p *corev1.Pod) (string, error) {
	port := "8000"
	if len(p.Spec.Containers) > 0 && len(p.Spec.Containers[0].Ports) > 0 {
		port = strconv.Itoa(int(p.Spec.Containers[0].Ports[0].ContainerPort))
	}
	if v := p.Annotations[MetricsPortAnnotation]; v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 65535 {
			return "", fmt.Errorf("annotation %s: %q is not a port number", MetricsPortAnnotation, v)
		}
		port = v
	}
	path := "/metrics"
	if v := p.Annotations[MetricsPathAnnotation]; v != "" {
		if !strings.HasPrefix(v, "/") || strings.ContainsAny(v, "?#@\\ ") || slices.Contains(strings.Split(v, "/"), "..") {
			return "", fmt.Errorf("annotation %s: %q is not an absolute path", MetricsPathAnnotation, v)
		}
		path = v
	}
	ip, err := netip.ParseAddr(p.Status.PodIP)
	if err != nil {
		return "", fmt.Errorf("status.podIP %q: %w", p.Status.PodIP, err)
	}
	u := url.URL{Scheme: "http", Host: net.JoinHostPort(ip.String(), port), Path: path}
	return u.String(), nil
}

// noRedirect refuses every redirect of a pod scrape.
func noRedirect(req *http.Request, _ []*http.Request) error {
	return fmt.Errorf("scrape: redirect to %s refused", req.URL.Redacted())
}
