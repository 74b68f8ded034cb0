package main

import (
	"flag"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/neuronetes/neuronetes/controller/scaleloop"
)

// gatewayMetricsOptions point the autoscaler at the gateway's per-pool view (docs/gateway.md).
type gatewayMetricsOptions struct {
	pods string
	port int
}

var gatewayMetrics gatewayMetricsOptions

func init() {
	flag.StringVar(&gatewayMetrics.pods, "gateway-pods", "", "the gateway replicas as <namespace>/<label selector>, e.g. neuronetes-system/app.kubernetes.io/component=gateway: the autoscaler then takes tokens-in-queue, concurrent sessions and TTFT as the gateway measures them (empty: from the pods' own metrics)")
	flag.IntVar(&gatewayMetrics.port, "gateway-admin-port", 9090, "the gateway replicas' admin port (/pools/<namespace>/<name>/metrics)")
}

// apply sets the loop's gateway source when --gateway-pods is set.
func (o gatewayMetricsOptions) apply(l *scaleloop.Loop, mgr ctrl.Manager) error {
	if o.pods == "" {
		return nil
	}
	ns, sel, ok := strings.Cut(o.pods, "/")
	if !ok || ns == "" || sel == "" {
		return fmt.Errorf("--gateway-pods %q: want <namespace>/<label selector>", o.pods)
	}
	s, err := labels.Parse(sel)
	if err != nil {
		return fmt.Errorf("--gateway-pods %q: %w", o.pods, err)
	}
	if o.port <= 0 || o.port > 65535 {
		return fmt.Errorf("--gateway-admin-port %d: not a port", o.port)
	}
	// The manager's cache holds pool pods only: the gateway pods are listed from the API,
	// at most every 5 s.
	l.Gateway = &scaleloop.GatewaySource{Client: mgr.GetAPIReader(), ListTTL: 5 * time.Second, Namespace: ns, Selector: s, Port: o.port}
	return nil
}
