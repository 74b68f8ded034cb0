// Package scaleapi serves the seed's POST /v1/scale: an authenticated request to set a pool's
// serving replicas for a while. The request is stored on the AgentPool itself, in the annotation
// OverrideAnnotation, so it reaches the autoscaling loop of whichever replica leads (the loop
// watches the annotation and evaluates at once), survives restarts and leader changes, and is
// visible with kubectl. The loop applies it as a manual override, still bounded by min/max and the
// budget, until it expires.
package scaleapi

import (
	"encoding/json"
	"fmt"
	"time"

	v1alpha1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/controller/scalepolicy"
)

// OverrideAnnotation holds a pool's scale override as JSON (Override).
const OverrideAnnotation = "autoscaling.neuronetes.io/scale-override"

// DefaultTTL is how long an override lasts when the request sets none.
const DefaultTTL = 10 * time.Minute

// Override is the value of OverrideAnnotation.
type Override struct {
	// Replicas is the requested serving replica count.
	Replicas int32 `json:"replicas"`
	// Reason is recorded in the decision and its Event.
	Reason string `json:"reason"`
	// Until is when the override expires.
	Until time.Time `json:"until"`
}

// Encode renders o as the annotation value.
func (o Override) Encode() string {
	b, _ := json.Marshal(Override{Replicas: o.Replicas, Reason: o.Reason, Until: o.Until.UTC().Truncate(time.Second)})
	return string(b)
}

// FromPool returns the pool's override and whether it is still live at now. A pool without the
// annotation returns (nil, false, nil); a malformed annotation is an error naming it.
func FromPool(pool *v1alpha1.AgentPool, now time.Time) (*Override, bool, error) {
	raw, ok := pool.Annotations[OverrideAnnotation]
	if !ok {
		return nil, false, nil
	}
	var o Override
	if err := json.Unmarshal([]byte(raw), &o); err != nil {
		return nil, false, fmt.Errorf("annotation %s: %w", OverrideAnnotation, err)
	}
	if o.Replicas < 0 {
		return nil, false, fmt.Errorf("annotation %s: replicas must be >= 0, got %d", OverrideAnnotation, o.Replicas)
	}
	if o.Until.IsZero() {
		return nil, false, fmt.Errorf("annotation %s: until is required", OverrideAnnotation)
	}
	return &o, now.Before(o.Until), nil
}

// Policy returns o as the decision package's override.
func (o Override) Policy() *scalepolicy.Override {
	return &scalepolicy.Override{Replicas: o.Replicas, Reason: o.Reason}
}
