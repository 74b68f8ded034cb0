package guard

import (
	"context"
	"fmt"

	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	crcache "sigs.k8s.io/controller-runtime/pkg/cache"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// Watch keeps pols current from the GuardrailPolicies in c (the gateway's informer cache). A
// policy that does not compile is logged with the field at fault and, so that nothing it should
// have caught passes, its target's requests are blocked with 503 until it is fixed. synced
// reports whether the handler has applied every policy of the cache's first list: the gateway is
// not ready before, so no request runs without its policy.
func Watch(ctx context.Context, c crcache.Cache, pols *Policies, o CompileOptions, secret func(ns, name, key string) (string, error)) (synced func() bool, err error) {
	inf, err := c.GetInformer(ctx, &nnv1.GuardrailPolicy{})
	if err != nil {
		return nil, fmt.Errorf("watch GuardrailPolicies: %w", err)
	}
	log := klog.FromContext(ctx)
	targets := map[string]nnv1.PolicyTargetRef{} // policy key -> target it was attached to
	set := func(obj any) {
		gp, ok := obj.(*nnv1.GuardrailPolicy)
		if !ok {
			return
		}
		key := gp.Namespace + "/" + gp.Name
		if old, ok := targets[key]; ok {
			pols.Set(gp.Namespace, old.Kind, old.Name, gp.Name, nil)
		}
		co := o
		if secret != nil {
			co.Secret = func(name, k string) (string, error) { return secret(gp.Namespace, name, k) }
		}
		p, err := Compile(key, &gp.Spec, co)
		if err != nil {
			log.Error(err, "GuardrailPolicy does not compile; its target's requests are refused until it is fixed", "policy", key)
			p = refuseAll(key, err, o.Metrics)
		}
		targets[key] = gp.Spec.TargetRef
		pols.Set(gp.Namespace, gp.Spec.TargetRef.Kind, gp.Spec.TargetRef.Name, gp.Name, p)
	}
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    set,
		UpdateFunc: func(_, obj any) { set(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if gp, ok := obj.(*nnv1.GuardrailPolicy); ok {
				key := gp.Namespace + "/" + gp.Name
				if old, ok := targets[key]; ok {
					pols.Set(gp.Namespace, old.Kind, old.Name, gp.Name, nil)
					delete(targets, key)
				}
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("watch GuardrailPolicies: %w", err)
	}
	return reg.HasSynced, nil
}

// refuseAll is the stand-in for a policy that does not compile: a chain whose one check fails
// closed.
func refuseAll(name string, cause error, m *Metrics) *Policy {
	ch, _ := NewChain(m, Entry{Name: "invalid-policy", Plugin: brokenPlugin{cause}, Action: Block})
	return &Policy{Name: name, Request: ch}
}

type brokenPlugin struct{ err error }

func (brokenPlugin) GetType() string { return "policy" }
func (b brokenPlugin) Check(context.Context, *Request) (*GuardrailResult, error) {
	return nil, fmt.Errorf("guardrail policy invalid: %w", b.err)
}
