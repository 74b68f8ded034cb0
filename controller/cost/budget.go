package cost

import (
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// BudgetPolicy is the budget part of a pool's costConstraints, resolved.
type BudgetPolicy struct {
	// DailyBudget in $ per UTC day; 0 disables every budget decision.
	DailyBudget float64
	// Actions are onBudgetExceeded, in spec order.
	Actions []nnv1.BudgetAction
	// FallbackPool is costConstraints.fallbackPoolRef.name ("" when unset).
	FallbackPool string
	// DynamicThreshold is dynamicModelSelection.costThreshold when enabled (default 1), else 0.
	DynamicThreshold float64
	// MaxSpotPercent is spotStrategy.maxSpotPercent (default nnv1.DefaultMaxSpotPercent).
	MaxSpotPercent int32
}

// BudgetInput is the spend a decision is taken on.
type BudgetInput struct {
	// Now is the clock.
	Now time.Time
	// Day is the UTC day (YYYY-MM-DD) Spent belongs to; a spend of another day than Now's counts 0.
	Day string
	// Spent is the $ spent on Day.
	Spent float64
}

// BudgetState is the decision: which actions are in force, what the gateway and the AgentPool
// reconciler are told, and the conditions that say so.
type BudgetState struct {
	// Exceeded: the day's spend is at or above the budget.
	Exceeded bool
	// Active are the onBudgetExceeded actions in force, in spec order.
	Active []nnv1.BudgetAction
	// Fallback routes conversations to another pool (nil: none).
	Fallback *nnv1.CostFallback
	// SpotPercent is the spot share enable-spot allows (nil: enable-spot not in force).
	SpotPercent *int32
	// Conditions are the status.cost conditions, without times.
	Conditions []metav1.Condition
}

// Day returns t's UTC day as YYYY-MM-DD.
func Day(t time.Time) string { return t.UTC().Format(time.DateOnly) }

// Condition reasons of status.cost.
const (
	ReasonDailyBudgetSpent = "DailyBudgetSpent"
	ReasonWithinBudget     = "WithinBudget"
	ReasonBudgetExceeded   = "BudgetExceeded"
	ReasonCostThreshold    = "CostThreshold"
	ReasonNoFallbackPool   = "NoFallbackPool"
)

// DecideBudget decides the budget actions. It is pure: the clock is in. The state clears by
// itself when the day changes (in.Day is not Now's) or the budget is raised above the spend.
func DecideBudget(p BudgetPolicy, in BudgetInput) BudgetState {
	var s BudgetState
	if p.DailyBudget <= 0 {
		return s
	}
	spent := in.Spent
	if in.Day != Day(in.Now) {
		spent = 0
	}
	s.Exceeded = spent >= p.DailyBudget
	msg := fmt.Sprintf("spent $%.2f of the daily budget $%.2f on %s", spent, p.DailyBudget, Day(in.Now))
	s.Conditions = append(s.Conditions, cond(nnv1.CostBudgetExceeded, s.Exceeded, ReasonDailyBudgetSpent, ReasonWithinBudget, msg))
	for _, a := range p.Actions {
		switch a {
		case nnv1.BudgetScaleToMin:
			s.Conditions = append(s.Conditions, cond(nnv1.CostScaledToMin, s.Exceeded, ReasonBudgetExceeded, ReasonWithinBudget, msg))
		case nnv1.BudgetEnableSpot:
			s.Conditions = append(s.Conditions, cond(nnv1.CostSpotEnabled, s.Exceeded, ReasonBudgetExceeded, ReasonWithinBudget,
				fmt.Sprintf("%s; up to %d%% of the pool's pods may be spot", msg, p.MaxSpotPercent)))
			if s.Exceeded {
				pct := p.MaxSpotPercent
				s.SpotPercent = &pct
			}
		case nnv1.BudgetUseFallbackModel:
			s.fallback(p, spent, msg)
		default:
			continue
		}
		if s.Exceeded {
			s.Active = append(s.Active, a)
		}
	}
	if !slices.Contains(p.Actions, nnv1.BudgetUseFallbackModel) {
		s.fallback(p, spent, msg)
	}
	return s
}

// fallback decides status.cost.fallback: every conversation while the budget is exceeded (with
// use-fallback-model, or with dynamicModelSelection, which keeps sessions pinned only until the
// budget is spent); new conversations once the spend passes DynamicThreshold of the budget.
func (s *BudgetState) fallback(p BudgetPolicy, spent float64, msg string) {
	useFallback := slices.Contains(p.Actions, nnv1.BudgetUseFallbackModel)
	if !useFallback && p.DynamicThreshold <= 0 {
		return
	}
	var scope nnv1.FallbackScope
	reason := ""
	switch {
	case s.Exceeded:
		scope, reason = nnv1.FallbackAllSessions, ReasonBudgetExceeded
	case p.DynamicThreshold > 0 && spent >= p.DynamicThreshold*p.DailyBudget:
		scope, reason = nnv1.FallbackNewSessions, ReasonCostThreshold
		msg = fmt.Sprintf("%s, past %.0f%% of it", msg, p.DynamicThreshold*100)
	}
	c := cond(nnv1.CostFallbackActive, scope != "", reason, ReasonWithinBudget, msg)
	switch {
	case scope != "" && p.FallbackPool == "":
		c.Status, c.Reason = metav1.ConditionFalse, ReasonNoFallbackPool
		c.Message = msg + "; spec.autoscaling.costConstraints.fallbackPoolRef is not set"
	case scope != "":
		s.Fallback = &nnv1.CostFallback{PoolRef: nnv1.LocalObjectReference{Name: p.FallbackPool}, Scope: scope, Reason: reason}
		c.Message = fmt.Sprintf("%s; %s go to pool %s", msg, scope, p.FallbackPool)
	}
	s.Conditions = append(s.Conditions, c)
}

func cond(t string, on bool, reasonOn, reasonOff, msg string) metav1.Condition {
	c := metav1.Condition{Type: t, Status: metav1.ConditionFalse, Reason: reasonOff, Message: msg}
	if on {
		c.Status, c.Reason = metav1.ConditionTrue, reasonOn
	}
	return c
}

// Transition is a condition that changed status between two states, or stayed True for a new
// reason (the fallback widening from new conversations to all of them when the budget is spent).
type Transition struct {
	// Type of the condition; Fired is true when it became True (or changed its reason while
	// True), false when it cleared.
	Type  string
	Fired bool
	// Reason and Message of the new condition.
	Reason  string
	Message string
}

// Transitions returns the conditions of next whose status differs from prev (a condition absent
// from prev counts as False) or that are True in both for different reasons, in next's order; a
// True condition of prev absent from next cleared.
func Transitions(prev []metav1.Condition, next []metav1.Condition) []Transition {
	was := map[string]metav1.Condition{}
	for _, c := range prev {
		was[c.Type] = c
	}
	var out []Transition
	seen := map[string]bool{}
	for _, c := range next {
		seen[c.Type] = true
		on := c.Status == metav1.ConditionTrue
		p, ok := was[c.Type]
		wasOn := ok && p.Status == metav1.ConditionTrue
		if on != wasOn || (on && p.Reason != c.Reason) {
			out = append(out, Transition{Type: c.Type, Fired: on, Reason: c.Reason, Message: c.Message})
		}
	}
	for _, c := range prev {
		if !seen[c.Type] && c.Status == metav1.ConditionTrue {
			out = append(out, Transition{Type: c.Type, Message: "no longer configured"})
		}
	}
	return out
}
