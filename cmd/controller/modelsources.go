package main

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/neuronetes/neuronetes/controller/modelcreds"
	"github.com/neuronetes/neuronetes/internal/modelsrcapi"
)

// validateModelSources checks --model-source-namespace, --model-source-resync and the
// credentials endpoint's flags.
func validateModelSources(o *options) error {
	if o.modelSourceResync <= 0 {
		return fmt.Errorf("--model-source-resync: %v is not positive", o.modelSourceResync)
	}
	if ns := o.modelSourceNamespace; ns != "" {
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return fmt.Errorf("--model-source-namespace %q is not a namespace name: %v", ns, errs)
		}
	}
	if o.modelSourceAddr == "" {
		return nil
	}
	if o.modelSourceNamespace == "" {
		return fmt.Errorf("--model-source-addr %q needs --model-source-namespace (the endpoint serves the copies kept there)", o.modelSourceAddr)
	}
	ns, name, ok := strings.Cut(o.modelSourceNodeAgent, "/")
	if !ok || len(validation.IsDNS1123Label(ns)) > 0 || len(validation.IsDNS1123Subdomain(name)) > 0 {
		return fmt.Errorf("--model-source-node-agent %q: want the node agents' ServiceAccount as namespace/name", o.modelSourceNodeAgent)
	}
	return nil
}

// setupModelSources runs controller/modelcreds when --model-source-namespace is set, and its
// credentials endpoint on every replica with --model-source-addr; the manager's Secret cache must
// be modelcreds.CacheByObject of that namespace.
func setupModelSources(mgr ctrl.Manager, o *options) error {
	if o.modelSourceNamespace == "" {
		return nil
	}
	r := &modelcreds.Reconciler{Namespace: o.modelSourceNamespace, WatchNamespace: o.namespace, Resync: o.modelSourceResync}
	if err := r.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("model source credentials controller: %w", err)
	}
	if o.modelSourceAddr == "" {
		return nil
	}
	cs, err := kubernetes.NewForConfig(mgr.GetConfig())
	if err != nil {
		return fmt.Errorf("model source credentials endpoint: clientset: %w", err)
	}
	srv := &modelcreds.Server{
		Reviews: cs.AuthenticationV1().TokenReviews(), Live: mgr.GetAPIReader(), Cached: mgr.GetClient(),
		Namespace: o.modelSourceNamespace, NodeAgent: o.modelSourceNodeAgent, Requests: modelcreds.NewRequestsMetric(crmetrics.Registry),
	}
	certDir := o.modelSourceCertDir
	if certDir == "" {
		certDir = o.webhookCertDir
	}
	addr := o.modelSourceAddr
	if err := mgr.Add(allReplicas(func(ctx context.Context) error {
		return serveTLS(ctx, "model source credentials endpoint", "--model-source", addr, certDir, modelsrcapi.Path, srv)
	})); err != nil {
		return fmt.Errorf("model source credentials endpoint: %w", err)
	}
	return nil
}
