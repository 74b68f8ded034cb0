package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"sync"

	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/gateway/guard"
	"github.com/neuronetes/neuronetes/gateway/stage"
)

// guardPolicyFile is --guardrail-policy.
var guardPolicyFile string

func init() {
	flag.StringVar(&guardPolicyFile, "guardrail-policy", "", "static-backends mode: a GuardrailPolicy YAML file applied to the static pool (its targetRef is ignored); in cluster mode GuardrailPolicy objects are watched")
	extensionBuilders = append(extensionBuilders, extensionBuilder{name: "guardrails", build: buildGuard})
}

// buildGuard adds the guardrail stage and chunk filter and serves the built-in detector at
// Presidio's POST /analyze and GET /supportedentities: on the API port behind the gateway's
// authentication, and unauthenticated on the admin port for stock Presidio clients.
func buildGuard(ctx context.Context, deps extensionDeps, ext *stage.Extensions) error {
	pol, err := gatewayEgress()
	if err != nil {
		return err
	}
	m := guard.NewMetrics(deps.Registerer)
	co := guard.CompileOptions{Metrics: m, Egress: pol, Client: guard.NewClient(pol)}
	pols := guard.NewPolicies()
	switch {
	case guardPolicyFile != "" && !deps.Static:
		return fmt.Errorf("--guardrail-policy: only in static-backends mode (--backends); in the cluster create GuardrailPolicy objects")
	case guardPolicyFile != "":
		p, err := loadGuardPolicy(guardPolicyFile, co)
		if err != nil {
			return err
		}
		pols.Static = p
	case deps.Cache != nil:
		// Webhook credentials are read from the apiserver directly: the gateway's cache holds
		// only the labelled API-key Secrets.
		var (
			once   sync.Once
			reader client.Client
			rerr   error
		)
		secret := func(ns, name, key string) (string, error) {
			once.Do(func() {
				cfg, err := ctrl.GetConfig()
				if err != nil {
					rerr = err
					return
				}
				reader, rerr = client.New(cfg, client.Options{})
			})
			if rerr != nil {
				return "", fmt.Errorf("kubernetes client: %w", rerr)
			}
			var s corev1.Secret
			if err := reader.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &s); err != nil {
				return "", err
			}
			v, ok := s.Data[key]
			if !ok {
				return "", fmt.Errorf("secret %s/%s has no key %q", ns, name, key)
			}
			return string(v), nil
		}
		synced, err := guard.Watch(ctx, deps.Cache, pols, co, secret)
		if err != nil {
			return err
		}
		deps.WaitFor(synced)
	}
	s := &guard.Stage{Policies: pols, Metrics: m}
	ext.Stages = append(ext.Stages, s)
	ext.Filters = append(ext.Filters, s)
	if ext.Handlers == nil {
		ext.Handlers = map[string]http.Handler{}
	}
	if ext.AdminHandlers == nil {
		ext.AdminHandlers = map[string]http.Handler{}
	}
	h := guard.AnalyzeHandler()
	for _, p := range []string{"POST /analyze", "GET /supportedentities"} {
		ext.Handlers[p] = h
		ext.AdminHandlers[p] = h
	}
	return nil
}

func loadGuardPolicy(path string, co guard.CompileOptions) (*guard.Policy, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--guardrail-policy: %w", err)
	}
	var gp nnv1.GuardrailPolicy
	if err := yaml.UnmarshalStrict(b, &gp); err != nil {
		return nil, fmt.Errorf("--guardrail-policy %s: %w", path, err)
	}
	p, err := guard.Compile(gp.Namespace+"/"+gp.Name, &gp.Spec, co)
	if err != nil {
		return nil, fmt.Errorf("--guardrail-policy %s: %w", path, err)
	}
	return p, nil
}
