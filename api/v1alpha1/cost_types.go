package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// FallbackScope says which conversations the gateway sends to status.cost.fallback.poolRef.
// +kubebuilder:validation:Enum=NewSessions;AllSessions
type FallbackScope string

const (
	// FallbackNewSessions: conversations that start now go to the fallback pool; conversations
	// already pinned to a pod of this pool stay there (dynamicModelSelection past costThreshold).
	FallbackNewSessions FallbackScope = "NewSessions"
	// FallbackAllSessions: every request of the pool goes to the fallback pool, keeping its session
	// key (use-fallback-model while the budget is exceeded).
	FallbackAllSessions FallbackScope = "AllSessions"
)

// CostFallback is the controller's routing decision for the gateway.
type CostFallback struct {
	// PoolRef is the AgentPool that serves the conversations of Scope in place of this pool.
	PoolRef LocalObjectReference `json:"poolRef"`
	// Scope of the conversations that go there.
	Scope FallbackScope `json:"scope"`
	// Reason is BudgetExceeded (use-fallback-model) or CostThreshold (dynamicModelSelection).
	Reason string `json:"reason"`
}

// CostStatus is the autoscaler's view of the pool's spend, from the node price model.
type CostStatus struct {
	// Day is the UTC day (YYYY-MM-DD) SpentToday belongs to.
	// +optional
	Day string `json:"day,omitempty"`
	// SpentToday is the $ spent since UTC midnight.
	// +optional
	SpentToday Decimal `json:"spentToday,omitempty"`
	// PricePerHour is the pool's current $/hour (serving and warm pods).
	// +optional
	PricePerHour Decimal `json:"pricePerHour,omitempty"`
	// UnpricedPods counts pods that neither their node nor the AgentClass prices; they are charged 0.
	// +optional
	UnpricedPods int32 `json:"unpricedPods,omitempty"`
	// ActiveActions are the onBudgetExceeded actions in force, in spec order.
	// +optional
	ActiveActions []BudgetAction `json:"activeActions,omitempty"`
	// Fallback, when set, tells the gateway to route conversations to another pool.
	// +optional
	Fallback *CostFallback `json:"fallback,omitempty"`
	// SpotPercent is the share of the pool's pods that may be spot while enable-spot is in force.
	// +optional
	SpotPercent *int32 `json:"spotPercent,omitempty"`
	// Conditions: BudgetExceeded, ScaledToMin, FallbackActive, SpotEnabled.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Condition types of status.cost.
const (
	// CostBudgetExceeded is true while the day's spend is at or above dailyBudget.
	CostBudgetExceeded = "BudgetExceeded"
	// CostScaledToMin is true while scale-to-min holds the pool at minReplicas.
	CostScaledToMin = "ScaledToMin"
	// CostFallbackActive is true while status.cost.fallback routes conversations elsewhere.
	CostFallbackActive = "FallbackActive"
	// CostSpotEnabled is true while enable-spot lets the pool use spot capacity.
	CostSpotEnabled = "SpotEnabled"
)
