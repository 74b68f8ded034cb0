package main

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/neuronetes/neuronetes/controller/modelcreds"
)

// validateModelSources checks --model-source-namespace and --model-source-resync.
func validateModelSources(o *options) error {
	if o.modelSourceResync <= 0 {
		return fmt.Errorf("--model-source-resync: %v is not positive", o.modelSourceResync)
	}
	if ns := o.modelSourceNamespace; ns != "" {
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return fmt.Errorf("--model-source-namespace %q is not a namespace name: %v", ns, errs)
		}
	}
	return nil
}

// setupModelSources runs controller/modelcreds when --model-source-namespace is set; the
// manager's Secret cache must be modelcreds.CacheByObject of that namespace.
func setupModelSources(mgr ctrl.Manager, o *options) error {
	if o.modelSourceNamespace == "" {
		return nil
	}
	r := &modelcreds.Reconciler{Namespace: o.modelSourceNamespace, WatchNamespace: o.namespace, Resync: o.modelSourceResync}
	if err := r.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("model source credentials controller: %w", err)
	}
	return nil
}
