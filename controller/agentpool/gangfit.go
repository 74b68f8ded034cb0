package agentpool

import (
	"context"
	"fmt"

	resourcev1 "k8s.io/api/resource/v1"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// gpuDriver is the DRA driver whose ResourceSlices publish the GPUs a gang's domain is measured
// in, and the attributes read: the device type (whole GPUs are "gpu") and the NVLink domain.
const (
	gpuDriver       = "gpu.neuronetes.io"
	gpuTypeAttr     = resourcev1.QualifiedName("type")
	gpuNVLinkAttr   = resourcev1.QualifiedName("nvlinkDomain")
	gangTooLargeWhy = "GangTooLarge"
)

// gangGPUs is how many whole GPUs one replica of a gang asks for in one domain, and whether the
// class is measured at all: whole-GPU classes (gpu.count, no MIG profile or device class) with a
// topology. Other gangs are left to the scheduler.
func gangGPUs(class *nnv1.AgentClass) (int, bool) {
	g, gpu := class.Spec.Gang, class.Spec.GPU
	if g == nil || g.Topology == "" || gpu == nil || gpu.MIGProfile != "" || gpu.DeviceClassName != "" {
		return 0, false
	}
	return int(g.Size) * int(max(gpu.Count, 1)), true
}

// largestDomain returns the most whole GPUs of the driver that one domain offers in slices: per
// node for Node, per (node, NVLink domain) for NVLinkDomain; 0 when the slices publish none.
func largestDomain(slices []resourcev1.ResourceSlice, topology nnv1.GangTopology) int {
	count := map[string]int{}
	best := 0
	for _, s := range slices {
		if s.Spec.Driver != gpuDriver {
			continue
		}
		node := s.Spec.Pool.Name
		if s.Spec.NodeName != nil && *s.Spec.NodeName != "" {
			node = *s.Spec.NodeName
		}
		for _, d := range s.Spec.Devices {
			if t := d.Attributes[gpuTypeAttr].StringValue; t == nil || *t != "gpu" {
				continue
			}
			key := node
			if topology == nnv1.GangTopologyNVLinkDomain {
				dom := d.Attributes[gpuNVLinkAttr]
				switch {
				case dom.StringValue != nil:
					key += "/" + *dom.StringValue
				case dom.IntValue != nil:
					key += fmt.Sprintf("/%d", *dom.IntValue)
				default:
					key += "/" + d.Name // no NVLink: a domain of one GPU
				}
			}
			count[key]++
			best = max(best, count[key])
		}
	}
	return best
}

// gangTooLarge returns a message naming spec.gang.size when one replica of the class asks for
// more GPUs in one domain than the largest domain the cluster's ResourceSlices publish; "" when
// it fits or cannot be judged (no slices of the driver, or a class gangGPUs leaves out).
func gangTooLarge(class *nnv1.AgentClass, slices []resourcev1.ResourceSlice) string {
	want, ok := gangGPUs(class)
	if !ok {
		return ""
	}
	have := largestDomain(slices, class.Spec.Gang.Topology)
	if have == 0 || want <= have {
		return ""
	}
	domain := "node"
	if class.Spec.Gang.Topology == nnv1.GangTopologyNVLinkDomain {
		domain = "NVLink domain"
	}
	return fmt.Sprintf("spec.gang.size: %d pods × spec.gpu.count %d = %d GPUs in one %s, but the largest %s in the cluster's ResourceSlices (driver %s) has %d",
		class.Spec.Gang.Size, max(class.Spec.GPU.Count, 1), want, domain, domain, gpuDriver, have)
}

// checkGangFits lists the cluster's ResourceSlices (from the apiserver, only when gangs are to be
// created; the controller keeps no slice cache) and returns gangTooLarge's message.
func (r *Reconciler) checkGangFits(ctx context.Context, class *nnv1.AgentClass) (string, error) {
	if _, ok := gangGPUs(class); !ok {
		return "", nil
	}
	reader := r.APIReader
	if reader == nil {
		reader = r.Client
	}
	var l resourcev1.ResourceSliceList
	if err := reader.List(ctx, &l); err != nil {
		return "", fmt.Errorf("list resourceslices of %s: %w", gpuDriver, err)
	}
	return gangTooLarge(class, l.Items), nil
}
