package state

import (
	"context"
	"fmt"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/klog/v2"

	"github.com/neuronetes/neuronetes/driver/config"
)

// claimConfigs holds the decoded opaque configs of a claim: per request, the last applicable one
// (claim configs come after class configs, so they win).
type claimConfigs struct {
	all        *config.GpuConfig
	perRequest map[string]*config.GpuConfig
}

func (c claimConfigs) env(request string) []string {
	if cfg, ok := c.perRequest[request]; ok {
		return cfg.Env()
	}
	return c.all.Env()
}

func (s *State) configs(claim *resourceapi.ResourceClaim) (claimConfigs, error) {
	out := claimConfigs{perRequest: map[string]*config.GpuConfig{}}
	for i, dc := range claim.Status.Allocation.Devices.Config {
		if dc.Opaque == nil || dc.Opaque.Driver != s.cfg.DriverName {
			continue
		}
		cfg, err := config.Decode(dc.Opaque.Parameters.Raw)
		if err != nil {
			return out, fmt.Errorf("config[%d] (from %s): %w", i, dc.Source, err)
		}
		if len(dc.Requests) == 0 {
			out.all = cfg
			for k := range out.perRequest {
				out.perRequest[k] = cfg
			}
			continue
		}
		for _, r := range dc.Requests {
			out.perRequest[r] = cfg
		}
	}
	return out, nil
}

// Sleep is a hook that pauses a prepare (for crash tests), honoring cancellation.
func Sleep(d time.Duration) func(ctx context.Context, uid string) {
	return func(ctx context.Context, uid string) {
		klog.FromContext(ctx).Info("Pausing prepare (debug hook)", "uid", uid, "duration", d)
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
}
