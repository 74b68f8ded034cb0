package plugin

import (
	"context"
	"fmt"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/neuronetes/neuronetes/driver/slices"
)

// CheckNoForeignSlices refuses NVIDIA compatibility mode while another driver publishes
// ResourceSlices under the same driver name anywhere in the cluster: both would claim the same
// DeviceClasses, attribute domain and opaque configs. A pool is NeuroNetes' own when one of its
// devices carries slices.AttrImplementation (every pool NeuroNetes publishes has a whole GPU or a
// static MIG device, which carry it).
func CheckNoForeignSlices(ctx context.Context, kube kubernetes.Interface, driver string) error {
	list, err := kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + driver})
	if err != nil {
		return fmt.Errorf("compatibility mode: listing %s ResourceSlices: %w", driver, err)
	}
	type pool struct{ ours, devices bool }
	pools := map[string]*pool{}
	for _, s := range list.Items {
		if s.Spec.Driver != driver {
			continue // the field selector is a hint for the apiserver; fakes ignore it
		}
		key := s.Spec.Pool.Name
		if s.Spec.NodeName != nil {
			key = *s.Spec.NodeName + "/" + key
		}
		p := pools[key]
		if p == nil {
			p = &pool{}
			pools[key] = p
		}
		for _, d := range s.Spec.Devices {
			p.devices = true
			if v := d.Attributes[slices.AttrImplementation].StringValue; v != nil && *v == slices.Implementation {
				p.ours = true
			}
		}
	}
	var foreign []string
	for k, p := range pools {
		if p.devices && !p.ours {
			foreign = append(foreign, k)
		}
	}
	if len(foreign) == 0 {
		return nil
	}
	sort.Strings(foreign)
	return fmt.Errorf("compatibility mode: another %s driver already publishes ResourceSlices (pools %s); uninstall NVIDIA's DRA driver before enabling NeuroNetes' compatibility mode",
		driver, strings.Join(foreign, ", "))
}
