package scale

import (
	"context"
	"fmt"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/cel"
)

// CheckDeviceClass evaluates every CEL selector of dc on every device, as the scheduler would, and
// returns the first compilation or runtime error. A runtime error (e.g. an attribute that only some
// devices have, used without has()) makes the scheduler fail every claim of the class with a
// SchedulerError, so such a class cannot be measured.
func CheckDeviceClass(ctx context.Context, dc *resourceapi.DeviceClass, driver string, devices []resourceapi.Device) error {
	for i, s := range dc.Spec.Selectors {
		if s.CEL == nil {
			continue
		}
		res := cel.GetCompiler(cel.Features{}).CompileCELExpression(s.CEL.Expression, cel.Options{})
		if res.Error != nil {
			return fmt.Errorf("device class %s selector #%d: %w", dc.Name, i, res.Error)
		}
		for _, d := range devices {
			if _, _, err := res.DeviceMatches(ctx, cel.Device{Driver: driver, Attributes: d.Attributes, Capacity: d.Capacity}); err != nil {
				return fmt.Errorf("device class %s selector #%d on device %s: %w", dc.Name, i, d.Name, err)
			}
		}
	}
	return nil
}
