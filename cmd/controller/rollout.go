package main

import (
	"flag"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/controller/rollout"
)

// rolloutOptions are the AgentRollout reconciler's flags.
type rolloutOptions struct {
	enabled   bool
	urls      string
	namespace string
	selector  string
	port      int
}

func (o *rolloutOptions) addFlags(fs *flag.FlagSet) {
	fs.BoolVar(&o.enabled, "rollouts", true, "reconcile AgentRollouts (skipped when the CRD is not served)")
	fs.StringVar(&o.urls, "rollout-gateway-metrics-urls", "", "comma-separated /metrics URLs of every gateway replica (host-process mode); empty finds the gateway pods by --rollout-gateway-selector")
	fs.StringVar(&o.namespace, "rollout-gateway-namespace", "", "namespace of the gateway pods (default: the controller's --namespace)")
	fs.StringVar(&o.selector, "rollout-gateway-selector", "app.kubernetes.io/component=gateway", "label selector of the gateway pods whose metrics the rollout gate reads")
	fs.IntVar(&o.port, "rollout-gateway-metrics-port", 9090, "the gateway pods' admin port serving /metrics")
}

// setupRollouts registers the AgentRollout reconciler.
func setupRollouts(mgr ctrl.Manager, o *rolloutOptions, namespace string) error {
	if !o.enabled {
		return nil
	}
	if _, err := mgr.GetRESTMapper().RESTMapping(schema.GroupKind{Group: nnv1.GroupVersion.Group, Kind: "AgentRollout"}, nnv1.GroupVersion.Version); err != nil {
		klog.Background().Info("AgentRollout CRD not served; rollouts disabled", "err", err)
		return nil
	}
	if o.port < 1 || o.port > 65535 {
		return fmt.Errorf("--rollout-gateway-metrics-port: %d is not a port", o.port)
	}
	sel, err := labels.Parse(o.selector)
	if err != nil {
		return fmt.Errorf("--rollout-gateway-selector: %w", err)
	}
	src := &rollout.GatewayScraper{Reader: mgr.GetAPIReader(), Namespace: o.namespace, Selector: sel, Port: o.port}
	if src.Namespace == "" {
		src.Namespace = namespace
	}
	for _, u := range strings.Split(o.urls, ",") {
		if u = strings.TrimSpace(u); u != "" {
			if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
				return fmt.Errorf("--rollout-gateway-metrics-urls: %q is not an http(s) URL", u)
			}
			src.URLs = append(src.URLs, u)
		}
	}
	if err := (&rollout.Reconciler{Source: src}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("agentrollout controller: %w", err)
	}
	return nil
}
