package agentpool

import (
	"time"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/warmpool"
)

// Defaults for unset pool fields.
const (
	defaultReplenishDelay = 30 * time.Second
	defaultBatchSize      = 1
)

// sizing is the resolved replica arithmetic of a pool.
type sizing struct {
	min, max, desired, warmTarget int32
	useWarmPool                   bool
	delay                         time.Duration
	batch                         int32
}

// resolveSizing applies defaults and clamps spec.replicas to [min, max]. Invariant:
// 0 <= min <= desired <= max, and max >= 1.
func resolveSizing(spec *nnv1.AgentPoolSpec) sizing {
	s := sizing{useWarmPool: true, delay: defaultReplenishDelay, batch: defaultBatchSize}
	s.min, s.max = spec.ReplicaBounds()
	s.desired = s.min
	if spec.Replicas != nil {
		s.desired = min(max(*spec.Replicas, s.min), s.max)
	}
	var pct int32
	if spec.PrewarmPercent != nil {
		pct = *spec.PrewarmPercent
	}
	if as := spec.Autoscaling; as != nil {
		if as.UseWarmPool != nil {
			s.useWarmPool = *as.UseWarmPool
		}
		if rs := as.ReplenishStrategy; rs != nil {
			if rs.Delay != "" {
				s.delay = rs.Delay.DurationOr(defaultReplenishDelay)
			}
			if rs.BatchSize != nil {
				s.batch = max(*rs.BatchSize, 1)
			}
		}
	}
	if s.useWarmPool {
		s.warmTarget = warmpool.Target(s.max, pct)
	}
	return s
}
