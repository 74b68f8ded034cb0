package rolloutpolicy

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// Revision identifies a rollout's variants: a hash of its stable and canary pool names. A new
// revision is a new rollout (Argo Rollouts: a new pod template).
func Revision(spec *nnv1.AgentRolloutSpec) string {
	return hash(struct{ Stable, Canary string }{spec.StablePool.Name, spec.CanaryPool.Name})
}

// SpecHash is a hash of the spec without spec.paused: pausing and resuming change nothing else.
func SpecHash(spec *nnv1.AgentRolloutSpec) string {
	c := spec.DeepCopy()
	c.Paused = false
	return hash(c)
}

func hash(v any) string {
	b, _ := json.Marshal(v) // plain structs of strings and numbers: cannot fail
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// observeSpec applies a new spec generation to the status. It reports done when Decide must
// return at once (a new run was started or a step re-entered, with the events to record).
//
//   - A new revision (stable or canary pool changed), a first reconcile, or a changed spec after
//     a rollback starts a new run from step 0: status.run grows, so the gateway assigns
//     conversations afresh.
//   - spec.paused alone changes nothing here: the run, step, step start and samples are kept.
//   - Any other change (steps, gate, match) while Progressing or Paused keeps the run and its
//     assignments and the step index (clamped to the new last step); the step is re-entered
//     (new step id, fresh samples, pause timer restarted) only when its weight or mirror changed.
//   - After a promotion an edit changes nothing but the recorded hash.
func observeSpec(r *nnv1.AgentRollout, now time.Time) ([]Event, bool) {
	st, spec := &r.Status, &r.Spec
	if st.ObservedGeneration == r.Generation && st.Phase != "" {
		return nil, false
	}
	st.ObservedGeneration = r.Generation
	rev, sh := Revision(spec), SpecHash(spec)
	changed := st.SpecHash != sh
	st.SpecHash = sh
	switch {
	case st.Phase == "" || st.Revision != rev || (changed && st.Phase == nnv1.RolloutRolledBack):
		st.Revision = rev
		st.Run++
		st.LastGate, st.Samples, st.Drained = nil, nil, false
		meta.RemoveStatusCondition(&st.Conditions, nnv1.RolloutConditionRolledBack)
		meta.RemoveStatusCondition(&st.Conditions, nnv1.RolloutConditionPromoted)
		meta.RemoveStatusCondition(&st.Conditions, nnv1.RolloutConditionDrained)
		ev := []Event{{Type: "Normal", Reason: "Started", Message: fmt.Sprintf("rollout run %d (generation %d) started: %s -> %s",
			st.Run, r.Generation, spec.StablePool.Name, spec.CanaryPool.Name)}}
		return append(ev, enterStep(r, 0, now)...), true
	case !changed || st.Phase == nnv1.RolloutPromoted || st.Phase == nnv1.RolloutRolledBack:
		return nil, false
	}
	i := min(int(st.CurrentStep), len(spec.Steps)-1)
	s := spec.Steps[i]
	if i == int(st.CurrentStep) && s.Weight == st.CanaryWeight && s.Mirror == st.Mirror {
		return []Event{{Type: "Normal", Reason: "SpecUpdated", Message: fmt.Sprintf("spec updated; step %d and its samples are kept", i)}}, false
	}
	st.LastGate = nil
	ev := []Event{{Type: "Normal", Reason: "SpecUpdated", Message: fmt.Sprintf("spec updated; step %d re-entered with its new weight and mirror", i)}}
	return append(ev, enterStep(r, i, now)...), true
}
