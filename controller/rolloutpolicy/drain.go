package rolloutpolicy

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// DefaultDrainTimeout is how long stable conversations keep the old pool after a promotion:
// the gateway's default assignment TTL, after which an idle conversation's assignment is gone.
const DefaultDrainTimeout = 30 * time.Minute

// DrainConfig is spec.drain parsed, defaults applied.
type DrainConfig struct {
	Timeout   time.Duration
	ScaleDown bool
}

func parseDrain(d *nnv1.RolloutDrain) (DrainConfig, error) {
	c := DrainConfig{Timeout: DefaultDrainTimeout, ScaleDown: true}
	if d == nil {
		return c, nil
	}
	var err error
	if c.Timeout, err = duration(d.Timeout, DefaultDrainTimeout, "spec.drain.timeout"); err != nil {
		return c, err
	}
	if c.Timeout < 0 {
		return c, fmt.Errorf("spec.drain.timeout: %s is negative", d.Timeout)
	}
	if d.ScaleDown != nil {
		c.ScaleDown = *d.ScaleDown
	}
	return c, nil
}

// DrainDecision is what the reconciler does about a promoted rollout's stable pool.
type DrainDecision struct {
	// ScaleDown names the stable pool to scale to zero now ("" for none). It is set once, on
	// the decision that drains the pool; a pool scaled up again later is left alone.
	ScaleDown string
	// RequeueAfter is when the drain must be looked at again (0: nothing left to do).
	RequeueAfter time.Duration
}

// Drain decides the drain of the old version after a promotion (status changed in place, as
// Decide does). The promotion sends every new conversation to the canary while conversations
// assigned to the stable pool finish there; cfg.Drain.Timeout after the promotion
// (status.stepStartTime) the rollout is Drained: the gateway sends every request to the canary
// (the moved conversations' session memory lives in the sidecar's Redis, as after a re-pin), and
// the stable pool is scaled down unless spec.drain.scaleDown is false. Drain is pure.
func Drain(r *nnv1.AgentRollout, cfg Config, now time.Time) (DrainDecision, []Event) {
	st := &r.Status
	if st.Phase != nnv1.RolloutPromoted || st.Drained || st.StepStartTime == nil {
		return DrainDecision{}, nil
	}
	if left := st.StepStartTime.Add(cfg.Drain.Timeout).Sub(now); left > 0 {
		return DrainDecision{RequeueAfter: left}, nil
	}
	st.Drained = true
	msg := fmt.Sprintf("%s drained %s after the promotion: every request goes to %s", r.Spec.StablePool.Name, cfg.Drain.Timeout, r.Spec.CanaryPool.Name)
	var d DrainDecision
	if cfg.Drain.ScaleDown {
		d.ScaleDown = r.Spec.StablePool.Name
		msg += "; " + r.Spec.StablePool.Name + " scaled to 0 replicas"
	}
	setCond(st, nnv1.RolloutConditionDrained, metav1.ConditionTrue, "Drained", msg, r.Generation)
	return d, []Event{{Type: "Normal", Reason: "Drained", Message: msg}}
}
