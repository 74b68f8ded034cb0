// Package kube holds the client helpers shared by the e2e tests and the
// `make run` demo: server-side apply of multi-document manifests and polling
// with a deadline that reports the last error.
package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// Applier server-side applies manifests through the dynamic client.
type Applier struct {
	dyn          dynamic.Interface
	mapper       *restmapper.DeferredDiscoveryRESTMapper
	fieldManager string
}

// Applied names one applied object, for deletion.
type Applied struct {
	Resource dynamic.ResourceInterface
	Kind     string
	Name     string
}

// NewApplier returns an Applier that applies as fieldManager.
func NewApplier(cfg *rest.Config, fieldManager string) (*Applier, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &Applier{dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc)), fieldManager: fieldManager}, nil
}

// Dynamic returns the dynamic client.
func (a *Applier) Dynamic() dynamic.Interface { return a.dyn }

// Apply server-side applies every object of a multi-document YAML manifest
// (with force, so it takes over fields). Namespaced objects without a
// namespace go to namespace. It returns the objects applied so far, also on
// error.
func (a *Applier) Apply(ctx context.Context, namespace, manifest string) ([]Applied, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(manifest), 4096)
	var done []Applied
	for {
		obj := &unstructured.Unstructured{}
		if err := dec.Decode(&obj.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return done, nil
			}
			return done, fmt.Errorf("decoding manifest: %w", err)
		}
		if len(obj.Object) == 0 {
			continue
		}
		ri, err := a.ResourceFor(obj, namespace)
		if err != nil {
			return done, fmt.Errorf("mapping %s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
		data, err := obj.MarshalJSON()
		if err != nil {
			return done, err
		}
		force := true
		if _, err := ri.Patch(ctx, obj.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: a.fieldManager, Force: &force}); err != nil {
			return done, fmt.Errorf("applying %s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
		done = append(done, Applied{Resource: ri, Kind: obj.GetKind(), Name: obj.GetName()})
	}
}

// ResourceFor maps obj to its dynamic resource; a namespaced object without a
// namespace is put in namespace.
func (a *Applier) ResourceFor(obj *unstructured.Unstructured, namespace string) (dynamic.ResourceInterface, error) {
	gvk := obj.GroupVersionKind()
	m, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		// A CRD installed since discovery was cached: refresh once.
		a.mapper.Reset()
		if m, err = a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
			return nil, err
		}
	}
	if m.Scope.Name() != meta.RESTScopeNameNamespace {
		return a.dyn.Resource(m.Resource), nil
	}
	if obj.GetNamespace() == "" {
		obj.SetNamespace(namespace)
	}
	return a.dyn.Resource(m.Resource).Namespace(obj.GetNamespace()), nil
}

// WaitFor polls cond every 200ms until it returns true, the timeout passes
// or ctx ends. The timeout error names what it waited for and the last error
// cond returned.
func WaitFor(ctx context.Context, timeout time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s (last error: %v)", timeout, what, last)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}
