package main

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	v1alpha1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/dispatcher/binding"
	"github.com/neuronetes/neuronetes/dispatcher/toolproxy"
)

// startKube runs the ToolBinding reconciler on an informer cache of the watched namespaces.
func (a *app) startKube(ctx context.Context) error {
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("kubernetes config: %w", err)
	}
	cfg.UserAgent = "neuronetes-dispatcher"
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return err
	}
	if err := v1alpha1.AddToScheme(s); err != nil {
		return err
	}
	opts := ctrl.Options{Scheme: s, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Logger: klog.FromContext(ctx)}
	if a.o.namespaces != "" {
		opts.Cache.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range strings.Split(a.o.namespaces, ",") {
			if ns = strings.TrimSpace(ns); ns != "" {
				opts.Cache.DefaultNamespaces[ns] = cache.Config{}
			}
		}
	}
	mgr, err := ctrl.NewManager(cfg, opts)
	if err != nil {
		return fmt.Errorf("manager: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	rec := &binding.Reconciler{Client: mgr.GetClient(), Manager: a.manager, Tools: a.tools}
	if err := rec.SetupWithManager(mgr); err != nil {
		return err
	}
	a.manager.ReadyReplicas = rec.ReadyReplicas
	a.reporter.Client = mgr.GetClient()
	// Callers are verified by their pod's projected token, the pod and its controller read live.
	a.proxy.Identity = &toolproxy.TokenIdentity{Reviews: cs.AuthenticationV1().TokenReviews(), Reader: mgr.GetAPIReader()}
	a.proxy.AgentClass = func(ns, pool string) string {
		var p v1alpha1.AgentPool
		if err := mgr.GetClient().Get(context.Background(), types.NamespacedName{Namespace: ns, Name: pool}, &p); err != nil {
			return ""
		}
		return binding.ClassOf(&p)
	}
	a.ready = func() bool { return mgr.GetCache().WaitForCacheSync(ctx) }
	go func() {
		if err := mgr.Start(ctx); err != nil {
			klog.FromContext(ctx).Error(err, "Kubernetes manager stopped")
		}
	}()
	return nil
}
