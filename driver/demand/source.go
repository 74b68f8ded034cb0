package demand

import (
	"context"
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// AgentPool and AgentClass resources (api/v1alpha1), read without the generated types so that
// a cluster without NeuroNetes' CRDs works too.
var (
	AgentPools   = schema.GroupVersionResource{Group: "neuronetes.io", Version: "v1alpha1", Resource: "agentpools"}
	AgentClasses = schema.GroupVersionResource{Group: "neuronetes.io", Version: "v1alpha1", Resource: "agentclasses"}
)

// Objects are the API objects demand is computed from.
type Objects struct {
	Classes      []*resourceapi.DeviceClass
	Claims       []*resourceapi.ResourceClaim
	Templates    []*resourceapi.ResourceClaimTemplate
	Pools        []*unstructured.Unstructured
	AgentClasses []*unstructured.Unstructured
}

// List reads the objects from the API; dyn nil (or CRDs not served) leaves AgentPools out.
func List(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface) (Objects, error) {
	var o Objects
	dcs, err := kube.ResourceV1().DeviceClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return o, fmt.Errorf("device classes: %w", err)
	}
	for i := range dcs.Items {
		o.Classes = append(o.Classes, &dcs.Items[i])
	}
	claims, err := kube.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return o, fmt.Errorf("resource claims: %w", err)
	}
	for i := range claims.Items {
		o.Claims = append(o.Claims, &claims.Items[i])
	}
	tmpls, err := kube.ResourceV1().ResourceClaimTemplates("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return o, fmt.Errorf("resource claim templates: %w", err)
	}
	for i := range tmpls.Items {
		o.Templates = append(o.Templates, &tmpls.Items[i])
	}
	if dyn == nil {
		return o, nil
	}
	for _, r := range []struct {
		gvr schema.GroupVersionResource
		dst *[]*unstructured.Unstructured
	}{{AgentPools, &o.Pools}, {AgentClasses, &o.AgentClasses}} {
		l, err := dyn.Resource(r.gvr).List(ctx, metav1.ListOptions{})
		if apierrors.IsNotFound(err) {
			continue // NeuroNetes' CRDs are not installed
		}
		if err != nil {
			return o, fmt.Errorf("%s: %w", r.gvr.Resource, err)
		}
		for i := range l.Items {
			*r.dst = append(*r.dst, &l.Items[i])
		}
	}
	return o, nil
}

// Requests returns every device request of the objects and the names of the devices allocated
// on node by driver.
func (o Objects) Requests(driver, node string) (reqs []Request, allocated []string) {
	for _, c := range o.Claims {
		reqs = append(reqs, FromClaimSpec("resourceclaim "+c.Namespace+"/"+c.Name, c.Spec)...)
		if a := c.Status.Allocation; a != nil {
			for _, r := range a.Devices.Results {
				if r.Driver == driver && r.Pool == node {
					allocated = append(allocated, r.Device)
				}
			}
		}
	}
	for _, t := range o.Templates {
		reqs = append(reqs, FromClaimSpec("resourceclaimtemplate "+t.Namespace+"/"+t.Name, t.Spec.Spec)...)
	}
	classes := map[string]*unstructured.Unstructured{}
	for _, c := range o.AgentClasses {
		classes[c.GetNamespace()+"/"+c.GetName()] = c
	}
	for _, p := range o.Pools {
		name, _, _ := unstructured.NestedString(p.Object, "spec", "agentClassRef", "name")
		if name == "" {
			name = p.GetName()
		}
		c, ok := classes[p.GetNamespace()+"/"+name]
		if !ok {
			continue
		}
		if dc := agentClassDeviceClass(c); dc != "" {
			reqs = append(reqs, Request{Source: "agentpool " + p.GetNamespace() + "/" + p.GetName(), Class: dc})
		}
	}
	return reqs, allocated
}

// agentClassDeviceClass is the DeviceClass an AgentClass's pods claim (as documented on
// api/v1alpha1 GPURequest): deviceClassName, or "mig-<profile>.neuronetes.io" with "+" written as
// "-", or "gpu.neuronetes.io"; "" without spec.gpu.
func agentClassDeviceClass(c *unstructured.Unstructured) string {
	gpu, ok, _ := unstructured.NestedMap(c.Object, "spec", "gpu")
	if !ok {
		return ""
	}
	if dc, _ := gpu["deviceClassName"].(string); dc != "" {
		return dc
	}
	if p, _ := gpu["migProfile"].(string); p != "" {
		return "mig-" + strings.ReplaceAll(p, "+", "-") + ".neuronetes.io"
	}
	return "gpu.neuronetes.io"
}

// Compute returns the MIG profiles in demand on node: those some request selects on the node's
// devices (fullLayout: what the node publishes with every profile) plus those of devices
// allocated there.
func Compute(ctx context.Context, driver, node string, fullLayout []resourceapi.Device, o Objects) ([]string, []error) {
	classes := map[string]*resourceapi.DeviceClass{}
	for _, c := range o.Classes {
		classes[c.Name] = c
	}
	reqs, allocated := o.Requests(driver, node)
	profileOf := map[string]string{}
	for _, d := range fullLayout {
		if p := d.Attributes["profile"].StringValue; p != nil {
			profileOf[d.Name] = *p
		}
	}
	var held []string
	for _, n := range allocated {
		if p, ok := profileOf[n]; ok {
			held = append(held, p)
		}
	}
	return Profiles(ctx, driver, Candidates(fullLayout, "type", "profile", "mig"), classes, reqs, held)
}
