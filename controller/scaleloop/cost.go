package scaleloop

import (
	"context"
	"fmt"
	"math"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/controller/cost"
)

// PriceSource prices nodes (cost.KubePrices in the controller).
type PriceSource interface {
	// NodePrices returns the prices of the named nodes; unknown nodes are left out.
	NodePrices(ctx context.Context, names []string) (map[string]cost.NodePrice, error)
}

// poolRate prices the pool's serving and warm pods by their nodes (cost.PoolRate); without a
// PriceSource every pod is charged the AgentClass price.
func (l *Loop) poolRate(ctx context.Context, pool *v1alpha1.AgentPool, classPrice float64) (cost.Rate, error) {
	var pods corev1.PodList
	if err := l.Client.List(ctx, &pods, client.InNamespace(pool.Namespace), client.MatchingLabels{v1alpha1.PoolLabel: pool.Name}); err != nil {
		return cost.Rate{}, fmt.Errorf("list pool pods: %w", err)
	}
	var nodes []string
	for i := range pods.Items {
		p := &pods.Items[i]
		st := p.Labels[v1alpha1.StateLabel]
		if !p.DeletionTimestamp.IsZero() || (st != v1alpha1.PodStateServing && st != v1alpha1.PodStateWarm) ||
			p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		nodes = append(nodes, p.Spec.NodeName)
	}
	var prices map[string]cost.NodePrice
	if l.Prices != nil && len(nodes) > 0 {
		var err error
		if prices, err = l.Prices.NodePrices(ctx, nodes); err != nil {
			return cost.Rate{}, err
		}
	}
	return cost.PoolRate(nodes, prices, classPrice), nil
}

// budgetPolicy resolves the pool's costConstraints for cost.DecideBudget.
func budgetPolicy(pool *v1alpha1.AgentPool) (cost.BudgetPolicy, error) {
	var p cost.BudgetPolicy
	as := pool.Spec.Autoscaling
	if as == nil || as.CostConstraints == nil {
		return p, nil
	}
	c := as.CostConstraints
	var err error
	if p.DailyBudget, err = c.DailyBudget.Float64(); err != nil {
		return p, fmt.Errorf("spec.autoscaling.costConstraints.dailyBudget: %w", err)
	}
	p.Actions = c.OnBudgetExceeded
	if c.FallbackPoolRef != nil {
		p.FallbackPool = c.FallbackPoolRef.Name
	}
	if o := c.Optimization; o != nil && o.DynamicModelSelection != nil && o.DynamicModelSelection.Enabled {
		p.DynamicThreshold = 1
		if o.DynamicModelSelection.CostThreshold != "" {
			if p.DynamicThreshold, err = o.DynamicModelSelection.CostThreshold.Float64(); err != nil {
				return p, fmt.Errorf("spec.autoscaling.costConstraints.optimization.dynamicModelSelection.costThreshold: %w", err)
			}
		}
		if p.DynamicThreshold <= 0 || p.DynamicThreshold > 1 {
			return p, fmt.Errorf("spec.autoscaling.costConstraints.optimization.dynamicModelSelection.costThreshold: must be in (0,1], got %v", p.DynamicThreshold)
		}
	}
	p.MaxSpotPercent = v1alpha1.DefaultMaxSpotPercent
	if s := as.SpotStrategy; s != nil && s.MaxSpotPercent != nil {
		p.MaxSpotPercent = min(max(*s.MaxSpotPercent, 0), 100)
	}
	return p, nil
}

// publishCost decides the budget actions on the day's spend, writes status.cost (a merge patch
// of that field only: the AgentPool reconciler owns the rest of the status; removed with
// costConstraints) and records an Event for each condition that fires (Warning CostActionFired)
// or clears (Normal CostActionCleared), in spec order.
func (l *Loop) publishCost(ctx context.Context, pool *v1alpha1.AgentPool, st *poolState) error {
	bp, err := budgetPolicy(pool)
	if err != nil {
		return err
	}
	now := l.now()
	spent := st.meter.ObserveRate(now, st.rate.PerHour)
	dec := cost.DecideBudget(bp, cost.BudgetInput{Now: now, Day: st.meter.Day(), Spent: spent})
	var prev []metav1.Condition
	if pool.Status.Cost != nil {
		prev = pool.Status.Cost.Conditions
	}
	next := &v1alpha1.CostStatus{
		Day: cost.Day(now), SpentToday: decimal(spent), PricePerHour: decimal(st.rate.PerHour), UnpricedPods: st.rate.Unpriced,
		ActiveActions: dec.Active, Fallback: dec.Fallback, SpotPercent: dec.SpotPercent,
		Conditions: append([]metav1.Condition(nil), prev...),
	}
	for _, c := range dec.Conditions {
		c.ObservedGeneration, c.LastTransitionTime = pool.Generation, metav1.NewTime(now)
		meta.SetStatusCondition(&next.Conditions, c)
	}
	for _, c := range prev {
		if meta.FindStatusCondition(dec.Conditions, c.Type) == nil {
			meta.RemoveStatusCondition(&next.Conditions, c.Type)
		}
	}
	orig := pool.DeepCopy()
	pool.Status.Cost = next
	if pool.Spec.Autoscaling.CostConstraints == nil {
		pool.Status.Cost = nil // costConstraints removed: every condition clears with its Event
	}
	if err := l.Client.Status().Patch(ctx, pool, client.MergeFrom(orig)); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("patch status.cost: %w", err)
	}
	for _, tr := range cost.Transitions(prev, dec.Conditions) {
		if tr.Fired {
			l.Recorder.Eventf(pool, corev1.EventTypeWarning, "CostActionFired", "%s: %s", tr.Type, tr.Message)
		} else {
			l.Recorder.Eventf(pool, corev1.EventTypeNormal, "CostActionCleared", "%s: %s", tr.Type, tr.Message)
		}
		klog.FromContext(ctx).Info("Cost condition changed", "type", tr.Type, "fired", tr.Fired, "message", tr.Message)
	}
	return nil
}

func decimal(v float64) v1alpha1.Decimal {
	return v1alpha1.Decimal(strconv.FormatFloat(math.Round(v*1e4)/1e4, 'f', -1, 64))
}
