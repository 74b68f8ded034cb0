package scaleloop

import (
	"fmt"
	"net/http"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"github.com/neuronetes/neuronetes/internal/egress"
)

// metricsURL is where p's metrics are scraped: always the pod's own IP, with the port and path
// its annotations may set, validated by egress.PodURL so that they cannot name another host.
func metricsURL(p *corev1.Pod) (string, error) {
	port := "8000"
	if len(p.Spec.Containers) > 0 && len(p.Spec.Containers[0].Ports) > 0 {
		port = strconv.Itoa(int(p.Spec.Containers[0].Ports[0].ContainerPort))
	}
	field := "annotation " + MetricsPortAnnotation
	if v := p.Annotations[MetricsPortAnnotation]; v != "" {
		port = v
	}
	path := "/metrics"
	if v := p.Annotations[MetricsPathAnnotation]; v != "" {
		path, field = v, "annotation "+MetricsPathAnnotation
	}
	if err := egress.ValidPort("annotation "+MetricsPortAnnotation, port); err != nil {
		return "", err
	}
	return egress.PodURL(field, p.Status.PodIP, port, path)
}

// noRedirect refuses every redirect of a pod scrape.
func noRedirect(req *http.Request, _ []*http.Request) error {
	return fmt.Errorf("scrape: redirect to %s refused", req.URL.Redacted())
}
