package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/yaml"

	v1alpha1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/dispatcher/binding"
	"github.com/neuronetes/neuronetes/dispatcher/toolproxy"
)

// startStatic serves the ToolBindings of --static-bindings without Kubernetes: queue bindings
// request --static-model and assume --static-pool-replicas ready pool replicas; tool callers are
// named by --tool-callers. Nothing is written back (no status).
func (a *app) startStatic(ctx context.Context) error {
	bs, err := readBindings(a.o.staticBindings)
	if err != nil {
		return err
	}
	ready := a.o.staticReady
	a.manager.ReadyReplicas = func(string, string) int { return ready }
	for i := range bs {
		b := &bs[i]
		if b.Namespace == "" {
			b.Namespace = "default"
		}
		switch {
		case b.Spec.Type == "http" || b.Spec.Type == "grpc":
			a.tools.Update(b)
		case binding.Dispatched(b):
			if b.Spec.AgentPoolRef == nil {
				return fmt.Errorf("%s: ToolBinding %s: spec.agentPoolRef is required with queueConfig.dispatch", a.o.staticBindings, b.Name)
			}
			pool := &v1alpha1.AgentPool{ObjectMeta: metav1.ObjectMeta{Namespace: b.Namespace, Name: b.Spec.AgentPoolRef.Name}}
			class := &v1alpha1.AgentClass{ObjectMeta: metav1.ObjectMeta{Namespace: b.Namespace, Name: pool.Name},
				Spec: v1alpha1.AgentClassSpec{ModelRef: &v1alpha1.LocalObjectReference{Name: a.o.staticModel}}}
			s, err := binding.Resolve(b, pool, class)
			if err != nil {
				return fmt.Errorf("%s: ToolBinding %s: %w", a.o.staticBindings, b.Name, err)
			}
			a.manager.Apply(ctx, s)
		}
	}
	callers, _ := parseCallers(a.o.toolCallers)
	id := toolproxy.StaticIdentity{}
	for ip, c := range callers {
		id[ip] = toolproxy.Caller{Namespace: c.ns, Pool: c.pool}
	}
	a.proxy.Identity = id
	return nil
}

func readBindings(path string) ([]v1alpha1.ToolBinding, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--static-bindings: %w", err)
	}
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(raw), 4096)
	var out []v1alpha1.ToolBinding
	for {
		var b v1alpha1.ToolBinding
		if err := dec.Decode(&b); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, fmt.Errorf("--static-bindings %s: %w", path, err)
		}
		if b.Kind == "" && b.Name == "" {
			continue
		}
		if b.Kind != "ToolBinding" {
			return nil, fmt.Errorf("--static-bindings %s: kind %q: only ToolBindings", path, b.Kind)
		}
		out = append(out, b)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--static-bindings %s: no ToolBinding", path)
	}
	return out, nil
}
