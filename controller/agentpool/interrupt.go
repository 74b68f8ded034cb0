package agentpool

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/controller/interruption"
	"github.com/neuronetes/neuronetes/warmpool"
)

// DefaultInterruptionTaints are the node taint keys that announce a spot interruption: the one
// list of controller/interruption, which sessions use too. Reconciler.InterruptionTaints adds
// the admin's.
var DefaultInterruptionTaints = interruption.DefaultTaints

// InterruptedAtAnnotation on a pool pod records when the reconciler first saw its node's
// interruption notice (RFC 3339); the onInterruption timeout counts from it.
const InterruptedAtAnnotation = "neuronetes.io/interrupted-at"

// DefaultInterruptionTimeout is spotStrategy.onInterruption.timeout when unset.
const DefaultInterruptionTimeout = 30 * time.Second

// interruptionPolicy is a pool's resolved spotStrategy.onInterruption.
type interruptionPolicy struct {
	migrate bool
	timeout time.Duration
}

func resolveInterruption(spec *nnv1.AgentPoolSpec) interruptionPolicy {
	if spec.Autoscaling == nil || spec.Autoscaling.SpotStrategy == nil || spec.Autoscaling.SpotStrategy.OnInterruption == nil {
		return interruptionPolicy{}
	}
	oi := spec.Autoscaling.SpotStrategy.OnInterruption
	if oi.Action != nnv1.InterruptionMigrateToOnDemand {
		return interruptionPolicy{}
	}
	p := interruptionPolicy{migrate: true, timeout: DefaultInterruptionTimeout}
	if oi.Timeout != "" {
		if d, err := oi.Timeout.Parse(); err == nil && d > 0 {
			p.timeout = d
		}
	}
	return p
}

// interruptionTaint returns the first taint of taints whose key is in keys (interruption.Taint).
func interruptionTaint(taints []corev1.Taint, keys []string) (corev1.Taint, bool) {
	return interruption.Taint(taints, keys)
}

// interruptedPod is a live pool pod on a node with an interruption notice.
type interruptedPod struct {
	name  string
	state warmpool.State
	at    time.Time // when the notice was first seen
}

// interruptionDrains decides which interrupted pods leave now. The planner has already been
// told they are gone, so it activates warm pods (first) or creates on-demand pods in their place.
// A warm pod leaves at once (it serves nothing); a serving pod once readyOthers (the Ready
// serving pods not interrupted) reach desired, i.e. its replacement serves, and at the latest
// timeout after the notice. The result is sorted.
func interruptionDrains(pods []interruptedPod, readyOthers, desired int32, timeout time.Duration, now time.Time) []string {
	var out []string
	for _, p := range pods {
		switch {
		case p.state == warmpool.Warm, readyOthers >= desired, !now.Before(p.at.Add(timeout)):
			out = append(out, p.name)
		}
	}
	sort.Strings(out)
	return out
}

// interruptions finds the pool's live serving and warm pods on nodes with an interruption taint
// and stamps InterruptedAtAnnotation on those seen for the first time.
func (r *Reconciler) interruptions(ctx context.Context, byName map[string]*corev1.Pod, now time.Time) ([]interruptedPod, error) {
	keys := interruption.Keys(r.InterruptionTaints)
	nodes := map[string]*corev1.Node{}
	var out []interruptedPod
	for _, p := range byName {
		st := podState(p)
		if p.Spec.NodeName == "" || !p.DeletionTimestamp.IsZero() || (st != warmpool.Serving && st != warmpool.Warm) {
			continue
		}
		node, ok := nodes[p.Spec.NodeName]
		if !ok {
			node = &corev1.Node{}
			if err := r.Client.Get(ctx, types.NamespacedName{Name: p.Spec.NodeName}, node); err != nil {
				if !apierrors.IsNotFound(err) {
					return nil, fmt.Errorf("get node %s: %w", p.Spec.NodeName, err)
				}
				node = nil
			}
			nodes[p.Spec.NodeName] = node
		}
		if node == nil {
			continue
		}
		taint, hit := interruptionTaint(node.Spec.Taints, keys)
		if !hit {
			continue
		}
		at, err := time.Parse(time.RFC3339, p.Annotations[InterruptedAtAnnotation])
		if err != nil {
			at = now
			if err := r.stampInterrupted(ctx, p, at); err != nil {
				return nil, err
			}
			klog.FromContext(ctx).Info("Spot interruption: migrating to on-demand", "pod", p.Name, "node", node.Name, "taint", taint.Key)
		}
		out = append(out, interruptedPod{name: p.Name, state: st, at: at})
	}
	return out, nil
}

func (r *Reconciler) stampInterrupted(ctx context.Context, p *corev1.Pod, at time.Time) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{InterruptedAtAnnotation: at.UTC().Format(time.RFC3339)}}})
	if err != nil {
		return fmt.Errorf("interruption patch: %w", err)
	}
	if err := r.Client.Patch(ctx, p, client.RawPatch(types.MergePatchType, patch)); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("stamp interrupted pod %s: %w", p.Name, err)
	}
	return nil
}

// readyServing counts the Ready serving pods outside skip.
func readyServing(byName map[string]*corev1.Pod, skip map[string]bool) int32 {
	var n int32
	for name, p := range byName {
		if !skip[name] && p.DeletionTimestamp.IsZero() && podState(p) == warmpool.Serving && podReady(p) {
			n++
		}
	}
	return n
}

// migrate drains the interrupted pods whose time has come (interruptionDrains): out of the
// Service (state draining), then deleted with the pool's drain grace period bounded by the
// timeout. It returns when to look again: the earliest deadline of those still waiting.
func (r *Reconciler) migrate(ctx context.Context, pods []interruptedPod, byName map[string]*corev1.Pod, gone map[string]bool,
	desired int32, p interruptionPolicy, drainGrace int64, now time.Time) (time.Duration, error) {
	drains := interruptionDrains(pods, readyServing(byName, gone), desired, p.timeout, now)
	grace := min(drainGrace, int64(p.timeout/time.Second))
	leaving := map[string]bool{}
	for _, name := range drains {
		pod := byName[name]
		if pod == nil {
			continue
		}
		leaving[name] = true
		if err := r.setState(ctx, pod, warmpool.Draining); err != nil && !apierrors.IsNotFound(err) {
			return 0, fmt.Errorf("drain interrupted pod %s: %w", name, err)
		}
		if err := r.Client.Delete(ctx, pod, &client.DeleteOptions{GracePeriodSeconds: &grace}); client.IgnoreNotFound(err) != nil {
			return 0, fmt.Errorf("delete interrupted pod %s: %w", name, err)
		}
		klog.FromContext(ctx).Info("Drained interrupted pod", "pod", name, "grace", grace)
		delete(byName, name)
	}
	var next time.Duration
	for _, ip := range pods {
		if leaving[ip.name] {
			continue
		}
		if d := max(ip.at.Add(p.timeout).Sub(now), time.Second); next == 0 || d < next {
			next = d
		}
	}
	return next, nil
}
