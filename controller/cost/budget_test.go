package cost

import (
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

func seedBudget() BudgetPolicy {
	return BudgetPolicy{DailyBudget: 1000, FallbackPool: "small",
		Actions:          []nnv1.BudgetAction{nnv1.BudgetScaleToMin, nnv1.BudgetUseFallbackModel, nnv1.BudgetEnableSpot},
		DynamicThreshold: 0.5, MaxSpotPercent: 70}
}

func condStatus(s BudgetState) map[string]string {
	out := map[string]string{}
	for _, c := range s.Conditions {
		out[c.Type] = string(c.Status) + "/" + c.Reason
	}
	return out
}

func TestDecideBudget(t *testing.T) {
	now := time.Date(2026, 12, 2, 15, 0, 0, 0, time.UTC)
	today := Day(now)
	pct := int32(70)
	for _, tc := range []struct {
		name      string
		p         func(*BudgetPolicy)
		in        BudgetInput
		active    []nnv1.BudgetAction
		fallback  *nnv1.CostFallback
		spot      *int32
		conds     map[string]string
		condOrder []string
	}{
		{"within budget, below threshold", nil, BudgetInput{now, today, 400}, nil, nil, nil,
			map[string]string{"BudgetExceeded": "False/WithinBudget", "ScaledToMin": "False/WithinBudget", "FallbackActive": "False/WithinBudget", "SpotEnabled": "False/WithinBudget"},
			[]string{"BudgetExceeded", "ScaledToMin", "FallbackActive", "SpotEnabled"}},
		{"past the cost threshold: new sessions to fallback", nil, BudgetInput{now, today, 500}, nil,
			&nnv1.CostFallback{PoolRef: nnv1.LocalObjectReference{Name: "small"}, Scope: nnv1.FallbackNewSessions, Reason: ReasonCostThreshold}, nil,
			map[string]string{"BudgetExceeded": "False/WithinBudget", "ScaledToMin": "False/WithinBudget", "FallbackActive": "True/CostThreshold", "SpotEnabled": "False/WithinBudget"}, nil},
		{"exceeded: every action, in order", nil, BudgetInput{now, today, 1000},
			[]nnv1.BudgetAction{nnv1.BudgetScaleToMin, nnv1.BudgetUseFallbackModel, nnv1.BudgetEnableSpot},
			&nnv1.CostFallback{PoolRef: nnv1.LocalObjectReference{Name: "small"}, Scope: nnv1.FallbackAllSessions, Reason: ReasonBudgetExceeded}, &pct,
			map[string]string{"BudgetExceeded": "True/DailyBudgetSpent", "ScaledToMin": "True/BudgetExceeded", "FallbackActive": "True/BudgetExceeded", "SpotEnabled": "True/BudgetExceeded"},
			[]string{"BudgetExceeded", "ScaledToMin", "FallbackActive", "SpotEnabled"}},
		{"spec order kept", func(p *BudgetPolicy) {
			p.Actions = []nnv1.BudgetAction{nnv1.BudgetEnableSpot, nnv1.BudgetUseFallbackModel}
		}, BudgetInput{now, today, 2000}, []nnv1.BudgetAction{nnv1.BudgetEnableSpot, nnv1.BudgetUseFallbackModel},
			&nnv1.CostFallback{PoolRef: nnv1.LocalObjectReference{Name: "small"}, Scope: nnv1.FallbackAllSessions, Reason: ReasonBudgetExceeded}, &pct,
			map[string]string{"BudgetExceeded": "True/DailyBudgetSpent", "FallbackActive": "True/BudgetExceeded", "SpotEnabled": "True/BudgetExceeded"},
			[]string{"BudgetExceeded", "SpotEnabled", "FallbackActive"}},
		{"yesterday's spend clears", nil, BudgetInput{now, "2026-12-01", 5000}, nil, nil, nil,
			map[string]string{"BudgetExceeded": "False/WithinBudget", "ScaledToMin": "False/WithinBudget", "FallbackActive": "False/WithinBudget", "SpotEnabled": "False/WithinBudget"}, nil},
		{"budget raised clears", func(p *BudgetPolicy) { p.DailyBudget = 3000 }, BudgetInput{now, today, 1200}, nil, nil, nil,
			map[string]string{"BudgetExceeded": "False/WithinBudget", "ScaledToMin": "False/WithinBudget", "FallbackActive": "False/WithinBudget", "SpotEnabled": "False/WithinBudget"}, nil},
		{"no fallback pool: reported, not routed", func(p *BudgetPolicy) { p.FallbackPool = "" }, BudgetInput{now, today, 1500},
			[]nnv1.BudgetAction{nnv1.BudgetScaleToMin, nnv1.BudgetUseFallbackModel, nnv1.BudgetEnableSpot}, nil, &pct,
			map[string]string{"BudgetExceeded": "True/DailyBudgetSpent", "ScaledToMin": "True/BudgetExceeded", "FallbackActive": "False/NoFallbackPool", "SpotEnabled": "True/BudgetExceeded"}, nil},
		{"dynamic selection alone moves all sessions once exceeded", func(p *BudgetPolicy) { p.Actions = nil }, BudgetInput{now, today, 1000}, nil,
			&nnv1.CostFallback{PoolRef: nnv1.LocalObjectReference{Name: "small"}, Scope: nnv1.FallbackAllSessions, Reason: ReasonBudgetExceeded}, nil,
			map[string]string{"BudgetExceeded": "True/DailyBudgetSpent", "FallbackActive": "True/BudgetExceeded"}, nil},
		{"no budget, no decision", func(p *BudgetPolicy) { p.DailyBudget = 0 }, BudgetInput{now, today, 1e6}, nil, nil, nil, map[string]string{}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := seedBudget()
			if tc.p != nil {
				tc.p(&p)
			}
			s := DecideBudget(p, tc.in)
			if !reflect.DeepEqual(s.Active, tc.active) {
				t.Errorf("active %v, want %v", s.Active, tc.active)
			}
			if !reflect.DeepEqual(s.Fallback, tc.fallback) {
				t.Errorf("fallback %+v, want %+v", s.Fallback, tc.fallback)
			}
			if !reflect.DeepEqual(s.SpotPercent, tc.spot) {
				t.Errorf("spot %v, want %v", s.SpotPercent, tc.spot)
			}
			if got := condStatus(s); !reflect.DeepEqual(got, tc.conds) {
				t.Errorf("conditions %v, want %v", got, tc.conds)
			}
			if tc.condOrder != nil {
				var order []string
				for _, c := range s.Conditions {
					order = append(order, c.Type)
				}
				if !reflect.DeepEqual(order, tc.condOrder) {
					t.Errorf("condition order %v, want %v", order, tc.condOrder)
				}
			}
		})
	}
}

// TestBudgetFiresAndClears walks one day into the next with an injected clock: the actions fire
// once when the budget is spent and clear at UTC midnight.
func TestBudgetFiresAndClears(t *testing.T) {
	p := seedBudget()
	t0 := time.Date(2026, 12, 2, 22, 0, 0, 0, time.UTC)
	var prev []metav1.Condition
	steps := []struct {
		in   BudgetInput
		want []Transition
	}{
		{BudgetInput{t0, Day(t0), 100}, nil},
		{BudgetInput{t0.Add(time.Hour), Day(t0), 600}, []Transition{{Type: "FallbackActive", Fired: true}}},
		// The fallback, on for new conversations since the threshold, widens to every
		// conversation: its own Event, between scale-to-min's and enable-spot's (spec order).
		{BudgetInput{t0.Add(90 * time.Minute), Day(t0), 1000}, []Transition{{Type: "BudgetExceeded", Fired: true}, {Type: "ScaledToMin", Fired: true}, {Type: "FallbackActive", Fired: true}, {Type: "SpotEnabled", Fired: true}}},
		{BudgetInput{t0.Add(100 * time.Minute), Day(t0), 1100}, nil},
		{BudgetInput{t0.Add(3 * time.Hour), Day(t0), 1100}, []Transition{{Type: "BudgetExceeded"}, {Type: "ScaledToMin"}, {Type: "FallbackActive"}, {Type: "SpotEnabled"}}},
	}
	for i, st := range steps {
		s := DecideBudget(p, st.in)
		got := Transitions(prev, s.Conditions)
		for j := range got {
			got[j].Message, got[j].Reason = "", ""
		}
		if !reflect.DeepEqual(got, st.want) {
			t.Fatalf("step %d: transitions %+v, want %+v", i, got, st.want)
		}
		prev = s.Conditions
	}
}

func TestTransitionsRemovedCondition(t *testing.T) {
	prev := []metav1.Condition{{Type: "SpotEnabled", Status: metav1.ConditionTrue}, {Type: "ScaledToMin", Status: metav1.ConditionFalse}}
	got := Transitions(prev, nil)
	if len(got) != 1 || got[0].Type != "SpotEnabled" || got[0].Fired {
		t.Fatalf("got %+v", got)
	}
}
