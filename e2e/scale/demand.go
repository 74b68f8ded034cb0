package scale

import (
	"context"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/neuronetes/neuronetes/driver/demand"
	"github.com/neuronetes/neuronetes/driver/model"
	"github.com/neuronetes/neuronetes/driver/slices"
)

// DemandProfiles is the demand-shaped layout's profile selection, computed as the driver's
// --mig-demand computes it: it creates in the run's namespace one ResourceClaimTemplate per pod
// kind with the claim spec that kind's pods use (what AgentPools have the controller create in a
// real fleet), reads every DeviceClass, claim, template and AgentPool from the API and evaluates
// them (driver/demand) on the devices the first node publishes with every profile.
func DemandProfiles(ctx context.Context, cs kubernetes.Interface, cfg Config) ([]string, error) {
	for _, k := range Kinds {
		if cfg.Mix[k] == 0 {
			continue
		}
		c := Claim("demand-"+string(k), cfg.RunID, k, true, cfg.Classes)
		t := &resourceapi.ResourceClaimTemplate{ObjectMeta: c.ObjectMeta, Spec: resourceapi.ResourceClaimTemplateSpec{Spec: c.Spec}}
		if _, err := cs.ResourceV1().ResourceClaimTemplates(cfg.Namespace).Create(ctx, t, metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("claim template %s: %w", t.Name, err)
		}
	}
	node := cfg.Nodes[0].Name
	gpus, err := Inventory(ctx, cfg.GPUProfile, node)
	if err != nil {
		return nil, err
	}
	var full []resourceapi.Device
	for _, s := range slices.Build(node, gpus, slices.Options{MIG: slices.MIGDynamic}).Pools[node].Slices {
		full = append(full, s.Devices...)
	}
	objs, err := demand.List(ctx, cs, nil)
	if err != nil {
		return nil, err
	}
	profiles, errs := demand.Compute(ctx, model.DriverName, node, full, objs)
	if len(errs) > 0 {
		return nil, fmt.Errorf("demand: %v", errs)
	}
	return profiles, nil
}
