// Package ctrlserving applies internal/serving's policy to the servers controller-runtime builds
// itself (metrics, webhooks), which set only header and idle timeouts. It is its own package so
// that binaries without controller-runtime do not link it through internal/serving.
package ctrlserving

import (
	"net/http"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/neuronetes/neuronetes/internal/serving"
)

// MetricsFilter is a metricsserver.Options.FilterProvider that bounds every metrics request by
// serving.Admin's ReadTimeout and WriteTimeout.
func MetricsFilter(*rest.Config, *http.Client) (metricsserver.Filter, error) {
	return func(_ logr.Logger, h http.Handler) (http.Handler, error) { return serving.Admin().Bound(h), nil }, nil
}
