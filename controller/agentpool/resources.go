package agentpool

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// DeviceClass names published by the DRA driver.
const (
	// GPUDeviceClass selects whole GPUs.
	GPUDeviceClass = "gpu.neuronetes.io"
	// MIGDeviceClassFormat selects MIG slices of one profile, e.g. mig-1g.10gb.neuronetes.io.
	MIGDeviceClassFormat = "mig-%s.neuronetes.io"
)

// defaultServicePort is the Service port when the agent container declares none.
const defaultServicePort int32 = 8080

// deviceClassFor returns the DeviceClass a GPU request uses.
func deviceClassFor(g *nnv1.GPURequest) string {
	switch {
	case g.DeviceClassName != "":
		return g.DeviceClassName
	case g.MIGProfile != "":
		return fmt.Sprintf(MIGDeviceClassFormat, strings.ReplaceAll(g.MIGProfile, "+", "-"))
	default:
		return GPUDeviceClass
	}
}

// alignmentAttribute maps spec.gpu.alignment to the device attribute all of a pod's GPUs share.
var alignmentAttribute = map[nnv1.GPUAlignment]resourcev1.FullyQualifiedName{
	nnv1.GPUAlignmentNUMANode:     resourcev1.FullyQualifiedName(deviceattribute.StandardDeviceAttributeNUMANode),
	nnv1.GPUAlignmentNVLinkDomain: gpuDriver + "/" + resourcev1.FullyQualifiedName(gpuNVLinkAttr),
}

// alignmentConstraints returns the claim constraint that keeps a pod's GPUs in one domain: a
// matchAttribute over the GPU request when the class sets an alignment and asks for more than one
// device; nil otherwise (one device is always aligned with itself).
func alignmentConstraints(g *nnv1.GPURequest) []resourcev1.DeviceConstraint {
	attr, ok := alignmentAttribute[g.Alignment]
	if !ok || g.Count <= 1 {
		return nil
	}
	return []resourcev1.DeviceConstraint{{Requests: []string{GPUClaimName}, MatchAttribute: &attr}}
}

// claimTemplateName is the ResourceClaimTemplate kept for an AgentClass's GPU request.
func claimTemplateName(class string) string { return class + "-gpu" }

// ensureClaimTemplate keeps the AgentClass's ResourceClaimTemplate as its GPU request says and
// reports whether its DeviceClass exists. When it does not (the driver is not installed yet), the
// template is still written: pods stay Pending until the DeviceClass appears. A template's spec is
// immutable, so one whose spec no longer matches the class (count, profile, alignment changed) is
// deleted and written anew; pods created before keep the claims generated from the old one.
func ensureClaimTemplate(ctx context.Context, c client.Client, scheme *runtime.Scheme, class *nnv1.AgentClass) (name string, classExists bool, err error) {
	g := class.Spec.GPU
	dc := deviceClassFor(g)
	var dcObj resourcev1.DeviceClass
	switch err := c.Get(ctx, types.NamespacedName{Name: dc}, &dcObj); {
	case err == nil:
		classExists = true
	case apierrors.IsNotFound(err):
	default:
		return "", false, fmt.Errorf("get deviceclass %s: %w", dc, err)
	}
	want := resourcev1.ResourceClaimSpec{Devices: resourcev1.DeviceClaim{
		Requests: []resourcev1.DeviceRequest{{
			Name: GPUClaimName,
			Exactly: &resourcev1.ExactDeviceRequest{
				DeviceClassName: dc,
				AllocationMode:  resourcev1.DeviceAllocationModeExactCount,
				Count:           int64(max(g.Count, 1)),
			},
		}},
		Constraints: alignmentConstraints(g),
	}}
	key := types.NamespacedName{Namespace: class.Namespace, Name: claimTemplateName(class.Name)}
	var have resourcev1.ResourceClaimTemplate
	switch err := c.Get(ctx, key, &have); {
	case err == nil && equality.Semantic.DeepEqual(have.Spec.Spec, want):
		return key.Name, classExists, nil
	case err == nil:
		if err := c.Delete(ctx, &have, client.Preconditions{UID: &have.UID}); err != nil && !apierrors.IsNotFound(err) {
			return "", classExists, fmt.Errorf("delete outdated resourceclaimtemplate %s: %w", key, err)
		}
	case !apierrors.IsNotFound(err):
		return "", classExists, fmt.Errorf("get resourceclaimtemplate %s: %w", key, err)
	}
	tmpl := &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace},
		Spec:       resourcev1.ResourceClaimTemplateSpec{Spec: want},
	}
	if err := controllerutil.SetOwnerReference(class, tmpl, scheme); err != nil {
		return "", classExists, fmt.Errorf("resourceclaimtemplate %s owner: %w", key, err)
	}
	if err := c.Create(ctx, tmpl); err != nil {
		return "", classExists, fmt.Errorf("create resourceclaimtemplate %s: %w", key, err)
	}
	return key.Name, classExists, nil
}

// ensureService keeps the pool's Service, which selects serving pods only.
func (r *Reconciler) ensureService(ctx context.Context, pool *nnv1.AgentPool, class *nnv1.AgentClass) error {
	port := defaultServicePort
	if t := class.Spec.Template; t != nil && len(t.Spec.Containers) > 0 && len(t.Spec.Containers[0].Ports) > 0 {
		port = t.Spec.Containers[0].Ports[0].ContainerPort
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: pool.Name, Namespace: pool.Namespace}}
	_, err := controllerutil.CreateOrUpdate(ctx, r.Client, svc, func() error {
		if svc.Labels == nil {
			svc.Labels = map[string]string{}
		}
		svc.Labels[nnv1.PoolLabel] = pool.Name
		svc.Spec.Selector = servingSelector(pool.Name)
		svc.Spec.Ports = []corev1.ServicePort{{
			Name: "http", Port: port, TargetPort: intstr.FromInt32(port), Protocol: corev1.ProtocolTCP,
		}}
		return controllerutil.SetControllerReference(pool, svc, r.Scheme)
	})
	if err != nil {
		return fmt.Errorf("service %s/%s: %w", pool.Namespace, pool.Name, err)
	}
	return nil
}

// warmLabelFor returns the warm node label of the class's model, or "" when the class has no
// model or the model is missing.
func (r *Reconciler) warmLabelFor(ctx context.Context, class *nnv1.AgentClass) (string, error) {
	if class.Spec.ModelRef == nil {
		return "", nil
	}
	var m nnv1.Model
	err := r.Client.Get(ctx, types.NamespacedName{Namespace: class.Namespace, Name: class.Spec.ModelRef.Name}, &m)
	if apierrors.IsNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("get model %s: %w", class.Spec.ModelRef.Name, err)
	}
	return nnv1.WarmNodeLabel(m.Spec.Digest), nil
}

// classFor resolves the pool's AgentClass: spec.agentClassRef, else the class named like the pool.
func (r *Reconciler) classFor(ctx context.Context, pool *nnv1.AgentPool) (*nnv1.AgentClass, error) {
	name := pool.Name
	if pool.Spec.AgentClassRef != nil {
		name = pool.Spec.AgentClassRef.Name
	}
	var c nnv1.AgentClass
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: pool.Namespace, Name: name}, &c); err != nil {
		return nil, fmt.Errorf("agentclass %s (spec.agentClassRef): %w", name, err)
	}
	return &c, nil
}
