// Package rollout is the AgentRollout reconciler: every gate interval it reads the step's
// samples from the gateway replicas, lets the pure rolloutpolicy core decide (advance, promote,
// roll back), writes the status the gateways split traffic by, and records Events.
package rollout

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/controller/rolloutpolicy"
)

// EventRecorder records Events (core/v1, as kubectl describe shows them).
type EventRecorder interface {
	Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...any)
}

// Reconciler reconciles AgentRollouts.
type Reconciler struct {
	Client   client.Client
	Source   SampleSource
	Recorder EventRecorder
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// ConditionInvalid is set when the spec cannot run (a pool is missing, a value is out of range).
const ConditionInvalid = "Invalid"

// Reconcile implements reconcile.Reconciler.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	log := klog.FromContext(ctx).WithValues("rollout", req.NamespacedName)
	var ro nnv1.AgentRollout
	if err := r.Client.Get(ctx, req.NamespacedName, &ro); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	before := ro.Status.DeepCopy()
	cfg, err := rolloutpolicy.ParseConfig(&ro.Spec)
	if err == nil {
		err = r.checkPools(ctx, &ro)
	}
	if err != nil {
		meta.SetStatusCondition(&ro.Status.Conditions, metav1.Condition{Type: ConditionInvalid, Status: metav1.ConditionTrue,
			Reason: "InvalidSpec", Message: err.Error(), ObservedGeneration: ro.Generation})
		if !equality.Semantic.DeepEqual(before, &ro.Status) {
			r.Recorder.Eventf(&ro, corev1.EventTypeWarning, "InvalidSpec", "%v", err)
		}
		return ctrl.Result{RequeueAfter: time.Minute}, r.writeStatus(ctx, &ro, before)
	}
	meta.RemoveStatusCondition(&ro.Status.Conditions, ConditionInvalid)
	var samples *rolloutpolicy.Samples
	// The step's samples, where the gate may look at them: a new generation keeps the step in
	// most cases (rolloutpolicy.Decide ignores them when it re-enters or restarts), and a
	// rollout being resumed is judged at once.
	if st := ro.Status.Phase; st == nnv1.RolloutProgressing || st == nnv1.RolloutPaused && !ro.Spec.Paused {
		if samples, err = r.Source.Samples(ctx, &ro); err != nil {
			log.Info("Rollout samples unavailable; the gate waits", "err", err.Error())
			samples = nil
		}
	}
	events := rolloutpolicy.Decide(&ro, cfg, samples, r.now())
	drain, ev := rolloutpolicy.Drain(&ro, cfg, r.now())
	events = append(events, ev...)
	if drain.ScaleDown != "" {
		// Before the status: a failed scale-down leaves the rollout undrained, and the next
		// reconcile decides the drain again.
		if err := r.scaleDown(ctx, ro.Namespace, drain.ScaleDown); err != nil {
			return ctrl.Result{}, err
		}
	}
	for _, ev := range events {
		r.Recorder.Eventf(&ro, ev.Type, ev.Reason, "%s", ev.Message)
		log.Info("Rollout event", "reason", ev.Reason, "message", ev.Message)
	}
	if err := r.writeStatus(ctx, &ro, before); err != nil {
		return ctrl.Result{}, err
	}
	switch ro.Status.Phase {
	case nnv1.RolloutPromoted:
		return ctrl.Result{RequeueAfter: drain.RequeueAfter}, nil
	case nnv1.RolloutRolledBack:
		return ctrl.Result{}, nil
	}
	return ctrl.Result{RequeueAfter: cfg.Interval}, nil
}

// scaleDown sets a drained stable pool's spec.replicas and spec.minReplicas to 0 (a merge patch:
// nothing else of the pool changes).
func (r *Reconciler) scaleDown(ctx context.Context, namespace, pool string) error {
	p := &nnv1.AgentPool{}
	p.Namespace, p.Name = namespace, pool
	patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":0,"minReplicas":0}}`))
	if err := r.Client.Patch(ctx, p, patch); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("scale down drained pool %s/%s: %w", namespace, pool, err)
	}
	return nil
}

func (r *Reconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// checkPools requires both AgentPools to exist in the rollout's namespace.
func (r *Reconciler) checkPools(ctx context.Context, ro *nnv1.AgentRollout) error {
	for _, f := range []struct{ field, name string }{{"spec.stablePool", ro.Spec.StablePool.Name}, {"spec.canaryPool", ro.Spec.CanaryPool.Name}} {
		var p nnv1.AgentPool
		err := r.Client.Get(ctx, client.ObjectKey{Namespace: ro.Namespace, Name: f.name}, &p)
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("%s: AgentPool %q not found in namespace %s", f.field, f.name, ro.Namespace)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", f.field, err)
		}
	}
	return nil
}

func (r *Reconciler) writeStatus(ctx context.Context, ro *nnv1.AgentRollout, before *nnv1.AgentRolloutStatus) error {
	if equality.Semantic.DeepEqual(before, &ro.Status) {
		return nil
	}
	if err := r.Client.Status().Update(ctx, ro); err != nil {
		if apierrors.IsConflict(err) {
			return errors.New("status conflict; retrying")
		}
		return fmt.Errorf("update status: %w", err)
	}
	return nil
}

// SetupWithManager registers the reconciler for AgentRollouts (spec changes only: the status it
// writes itself does not re-trigger it; the gate interval requeues).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}
	if r.Recorder == nil {
		r.Recorder = mgr.GetEventRecorderFor("neuronetes-rollout") //nolint:staticcheck // core/v1 Events, as kubectl describe shows them
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&nnv1.AgentRollout{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Named("agentrollout").
		Complete(r)
}
