package scaleloop

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	v1alpha1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/controller/scaleapi"
)

// seen is what the loop last saw of a pool and left in it. Invariant: after an evaluation,
// replicas is the pool's spec.replicas as the loop left it (its own write, or the value it held),
// so a different spec.replicas later was written by someone else.
type seen struct {
	known    bool
	replicas int32
	spec     [sha256.Size]byte // digest of the spec without replicas
	override string            // the scale-override annotation
}

// trigger says why a pool must be evaluated now rather than at its next period.
type trigger struct {
	// external is set when spec.replicas changed outside the loop (kubectl scale, a patch).
	external bool
	// reason names the change, for logs; empty when nothing changed.
	reason string
}

// specDigest hashes the spec with replicas left out: a change in it is a policy change.
func specDigest(p *v1alpha1.AgentPool) [sha256.Size]byte {
	s := p.Spec.DeepCopy()
	s.Replicas = nil
	b, _ := json.Marshal(s)
	return sha256.Sum256(b)
}

// currentReplicas is spec.replicas, or the min bound when unset (as the reconciler reads it).
func currentReplicas(p *v1alpha1.AgentPool) int32 {
	if p.Spec.Replicas != nil {
		return *p.Spec.Replicas
	}
	lo, _ := p.Spec.ReplicaBounds()
	return lo
}

// compare tells what changed in pool since s.
func (s seen) compare(pool *v1alpha1.AgentPool) trigger {
	switch {
	case !s.known:
		return trigger{reason: "first evaluation"}
	case pool.Spec.Replicas != nil && *pool.Spec.Replicas != s.replicas:
		// An unset spec.replicas follows minReplicas: its change is a spec change, below.
		return trigger{external: true, reason: fmt.Sprintf("spec.replicas set to %d outside the autoscaler (it left %d)", *pool.Spec.Replicas, s.replicas)}
	case specDigest(pool) != s.spec:
		return trigger{reason: "spec changed"}
	case pool.Annotations[scaleapi.OverrideAnnotation] != s.override:
		return trigger{reason: "scale override changed"}
	}
	return trigger{}
}

// overrideChanged passes updates whose scale-override annotation changed: a /v1/scale request
// is evaluated at once (the other watched changes bump the generation).
var overrideChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		if e.ObjectOld == nil || e.ObjectNew == nil {
			return false
		}
		return e.ObjectOld.GetAnnotations()[scaleapi.OverrideAnnotation] != e.ObjectNew.GetAnnotations()[scaleapi.OverrideAnnotation]
	},
	CreateFunc:  func(event.CreateEvent) bool { return true },
	DeleteFunc:  func(event.DeleteEvent) bool { return true },
	GenericFunc: func(event.GenericEvent) bool { return true },
}
