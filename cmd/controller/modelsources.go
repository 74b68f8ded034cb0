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
	if role := o.modelSourceReaderRole; role != "" {
		if o.modelSourceNamespace == "" {
			return fmt.Errorf("--model-source-reader-role %q needs --model-source-namespace (the Role lives there)", role)
		}
		if errs := validation.IsDNS1123Subdomain(role); len(errs) > 0 {
			return fmt.Errorf("--model-source-reader-role %q is not a Role name: %v", role, errs)
		}
	}
	return nil
}

// setupModelSources runs controller/modelcreds when --model-source-namespace is set (and its
// AccessReconciler with --model-source-reader-role); the
// manager's Secret cache must be modelcreds.CacheByObject of that namespace.
func setupModelSources(mgr ctrl.Manager, o *options) error {
	if o.modelSourceNamespace == "" {
		return nil
	}
	r := &modelcreds.Reconciler{Namespace: o.modelSourceNamespace, WatchNamespace: o.namespace, Resync: o.modelSourceResync}
	if err := r.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("model source credentials controller: %w", err)
	}
	if o.modelSourceReaderRole == "" {
		return nil
	}
	a := &modelcreds.AccessReconciler{Namespace: o.modelSourceNamespace, Role: o.modelSourceReaderRole, Resync: o.modelSourceResync}
	if err := a.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("model source reader Role controller: %w", err)
	}
	return nil
}
