package state

import (
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/neuronetes/neuronetes/driver/config"
	"github.com/neuronetes/neuronetes/driver/slices"
)

// entry is one decoded opaque config of a claim's allocation for this driver.
type entry struct {
	// index is the config's position in the allocation's config list.
	index    int
	requests []string
	settings *config.Settings
}

// decodeConfigs decodes every opaque config of the allocation that is meant for this driver, in
// the allocation's order (class configs before claim configs).
func (s *State) decodeConfigs(claim *resourceapi.ResourceClaim) ([]entry, error) {
	var out []entry
	for i, dc := range claim.Status.Allocation.Devices.Config {
		if dc.Opaque == nil || dc.Opaque.Driver != s.cfg.DriverName {
			continue
		}
		st, err := config.Decode(dc.Opaque.Parameters.Raw)
		if err != nil {
			return nil, fmt.Errorf("config[%d] (from %s): %w", i, dc.Source, err)
		}
		out = append(out, entry{index: i, requests: dc.Requests, settings: st})
	}
	return out, nil
}

// requestMatches reports whether a config naming request applies to an allocation result of
// result: the same request, or a subrequest of it ("req/sub" for a config naming "req").
func requestMatches(request, result string) bool {
	return request == result || strings.HasPrefix(result, request+"/")
}

// deviceType is the config device type of a resolved device.
func deviceType(k slices.Kind) config.DeviceType {
	if k == slices.KindGPU {
		return config.DeviceGPU
	}
	return config.DeviceMIG
}

// pick returns the position in entries of the config that applies to a device of type t
// allocated for request, or -1 for none. The last applicable entry wins. An entry that names the
// request but does not fit the device type is an error (as in NVIDIA's driver); an entry for all
// requests is skipped for device types it does not fit.
func pick(entries []entry, request, device string, t config.DeviceType) (int, error) {
	for i := len(entries) - 1; i >= 0; i-- {
		e := entries[i]
		if len(e.requests) == 0 {
			if e.settings.AppliesTo(t) {
				return i, nil
			}
			continue
		}
		for _, r := range e.requests {
			if !requestMatches(r, request) {
				continue
			}
			if !e.settings.AppliesTo(t) {
				return -1, fmt.Errorf("config[%d]: cannot apply %s (%s) to device %q of type %q (request %s)",
					e.index, e.settings.Kind, e.settings.APIVersion, device, t, request)
			}
			return i, nil
		}
	}
	return -1, nil
}
