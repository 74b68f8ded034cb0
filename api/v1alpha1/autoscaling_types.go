package v1alpha1

// MetricType is one of the seven token-aware autoscaling signals of seed 001.
// +kubebuilder:validation:Enum=tokens-in-queue;ttft-p95;concurrent-sessions;tokens-per-second;queue-depth;context-length;tool-call-rate
type MetricType string

// The metric types of seed 001.
const (
	MetricTokensInQueue      MetricType = "tokens-in-queue"
	MetricTTFTP95            MetricType = "ttft-p95"
	MetricConcurrentSessions MetricType = "concurrent-sessions"
	MetricTokensPerSecond    MetricType = "tokens-per-second"
	MetricQueueDepth         MetricType = "queue-depth"
	MetricContextLength      MetricType = "context-length"
	MetricToolCallRate       MetricType = "tool-call-rate"
)

// MetricSpec is one scaling signal with its target.
//
// +kubebuilder:validation:XValidation:rule="!has(self.target) || (self.type == 'ttft-p95' ? self.target.matches('^[0-9]+(\\\\.[0-9]+)?(ns|us|ms|s|m|h)$') : self.target.matches('^[0-9]+(\\\\.[0-9]+)?$'))",messageExpression="self.type == 'ttft-p95' ? 'target of metric ttft-p95 must be a duration such as \"500ms\", got \"' + self.target + '\"' : 'target of metric ' + self.type + ' must be a number such as \"1000\", got \"' + self.target + '\"'",fieldPath=".target"
type MetricSpec struct {
	// Type of the signal.
	Type MetricType `json:"type"`
	// Target value: a duration ("500ms") for ttft-p95, a number ("1000") for the others. Omitted,
	// the autoscaler uses the AgentClass SLO or its default.
	// +kubebuilder:validation:MaxLength=32
	// +optional
	Target string `json:"target,omitempty"`
	// AveragingWindow over which the signal is averaged (default 1m).
	// +optional
	AveragingWindow Duration `json:"averagingWindow,omitempty"`
}

// ScalingRules limit one direction of scaling.
type ScalingRules struct {
	// StabilizationWindow: the autoscaler uses the most conservative recommendation in this window.
	// +optional
	StabilizationWindow Duration `json:"stabilizationWindow,omitempty"`
	// MaxChangePercent of the current replicas changed per operation.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	// +optional
	MaxChangePercent *int32 `json:"maxChangePercent,omitempty"`
	// MaxChangeAbsolute pods changed per operation.
	// +kubebuilder:validation:Minimum=1
	// +optional
	MaxChangeAbsolute *int32 `json:"maxChangeAbsolute,omitempty"`
	// PeriodSeconds between evaluations.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	// +optional
	PeriodSeconds *int32 `json:"periodSeconds,omitempty"`
	// SelectPolicy chooses between maxChangePercent and maxChangeAbsolute, as the HPA's
	// selectPolicy does: Min applies the more restrictive limit (the default: the guide states both
	// as caps), Max the more permissive one, Disabled forbids scaling in this direction.
	// +kubebuilder:validation:Enum=Min;Max;Disabled
	// +optional
	SelectPolicy string `json:"selectPolicy,omitempty"`
}

// ScalingBehavior configures scale-up and scale-down separately.
//
// +kubebuilder:validation:XValidation:rule="!has(self.scaleDown) || !has(self.scaleDown.maxChangePercent) || self.scaleDown.maxChangePercent <= 100",message="behavior.scaleDown.maxChangePercent must be at most 100",fieldPath=".scaleDown.maxChangePercent"
type ScalingBehavior struct {
	// ScaleUp rules.
	// +optional
	ScaleUp *ScalingRules `json:"scaleUp,omitempty"`
	// ScaleDown rules.
	// +optional
	ScaleDown *ScalingRules `json:"scaleDown,omitempty"`
}

// ReplenishStrategy says how the warm pool refills after warm pods were activated.
type ReplenishStrategy struct {
	// Delay after the last activation before warm pods are created again (default 30s).
	// +optional
	Delay Duration `json:"delay,omitempty"`
	// BatchSize is how many warm pods are created at a time (default 1).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	// +optional
	BatchSize *int32 `json:"batchSize,omitempty"`
}

// ScheduleSpec sets a replica count from a cron time onward.
type ScheduleSpec struct {
	// Name of the schedule.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// Cron expression with five fields (minute hour day-of-month month day-of-week) or a macro such as @hourly.
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|\S+(\s+\S+){4})$`
	Cron string `json:"cron"`
	// Replicas from that time on.
	// +kubebuilder:validation:Minimum=0
	Replicas int32 `json:"replicas"`
}

// PredictiveSpec configures predictive scaling.
type PredictiveSpec struct {
	// Enabled turns prediction on.
	// +optional
	Enabled bool `json:"enabled,omitempty"`
	// LookbackWindow of history to learn from (e.g. 7d).
	// +optional
	LookbackWindow Duration `json:"lookbackWindow,omitempty"`
	// HorizonMinutes to predict ahead.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1440
	// +optional
	HorizonMinutes *int32 `json:"horizonMinutes,omitempty"`
	// MinConfidence, 0 to 1, below which a prediction is ignored.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1
	// +optional
	MinConfidence Decimal `json:"minConfidence,omitempty"`
	// Schedules set replica floors at cron times.
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	// +optional
	Schedules []ScheduleSpec `json:"schedules,omitempty"`
	// Season is the seasonal period of the forecaster (default 24h, e.g. 7d for weekly traffic).
	// A season longer than the history kept makes the forecast trend only.
	// +optional
	Season Duration `json:"season,omitempty"`
}

// BreachResponse says how to react to an SLO breach.
type BreachResponse struct {
	// ScaleUpImmediately skips the scale-up stabilization window on a breach.
	// +optional
	ScaleUpImmediately bool `json:"scaleUpImmediately,omitempty"`
	// MaxScaleUp pods added on a breach.
	// +kubebuilder:validation:Minimum=1
	// +optional
	MaxScaleUp *int32 `json:"maxScaleUp,omitempty"`
}

// ScaleDownSafety guards scale-down under an SLO.
type ScaleDownSafety struct {
	// RequireHeadroom percent above the SLO before scaling down.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	RequireHeadroom *int32 `json:"requireHeadroom,omitempty"`
	// CheckDuration the headroom must hold.
	// +optional
	CheckDuration Duration `json:"checkDuration,omitempty"`
}

// SLOTargetSpec scales to meet the AgentClass SLO.
type SLOTargetSpec struct {
	// Enabled turns SLO scaling on.
	// +optional
	Enabled bool `json:"enabled,omitempty"`
	// HeadroomPercent kept above the SLO.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	HeadroomPercent *int32 `json:"headroomPercent,omitempty"`
	// BreachResponse on an SLO breach.
	// +optional
	BreachResponse *BreachResponse `json:"breachResponse,omitempty"`
	// ScaleDownSafety guards scale-down.
	// +optional
	ScaleDownSafety *ScaleDownSafety `json:"scaleDownSafety,omitempty"`
	// BreachOnly keeps the SLO out of the proportional metrics: no implicit ttft-p95 metric is
	// added, and the SLO only drives the breach response and the scale-down safety. Latency lags
	// capacity, so a proportional TTFT metric keeps adding replicas while new ones start.
	// +optional
	BreachOnly bool `json:"breachOnly,omitempty"`
	// Adaptive replaces the metric targets' fixed headroom with one learned online from the
	// pool's own first tokens: the autoscaler provisions a learned headroom times the peak demand
	// of a learned memory window, so that attainmentPercent of the requests keep a TTFT within
	// the AgentClass spec.slo.ttft. The metrics then state one replica's capacity (targets at
	// 100%). Needs enabled and the AgentClass SLO.
	// +optional
	Adaptive *AdaptiveSLO `json:"adaptive,omitempty"`
}

// AdaptiveSLO configures the online adaptation to the TTFT SLO.
type AdaptiveSLO struct {
	// AttainmentPercent is the share of requests whose TTFT must stay within the SLO, in
	// percent (default 99). The autoscaler aims at half the misses this allows.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:ExclusiveMinimum=true
	// +kubebuilder:validation:Maximum=100
	// +kubebuilder:validation:ExclusiveMaximum=true
	// +optional
	AttainmentPercent Decimal `json:"attainmentPercent,omitempty"`
}

// BudgetAction is what to do when the daily budget is spent (docs/autoscaling.md).
// +kubebuilder:validation:Enum=scale-to-min;use-fallback-model;enable-spot
type BudgetAction string

// The onBudgetExceeded actions.
const (
	// BudgetScaleToMin sets the serving replicas to minReplicas while the budget is exceeded.
	BudgetScaleToMin BudgetAction = "scale-to-min"
	// BudgetUseFallbackModel publishes costConstraints.fallbackPoolRef in status.cost.fallback
	// (scope all) while the budget is exceeded, for the gateway to route the pool's traffic to.
	BudgetUseFallbackModel BudgetAction = "use-fallback-model"
	// BudgetEnableSpot lets up to spotStrategy.maxSpotPercent (default DefaultMaxSpotPercent) of the
	// pool's pods created while the budget is exceeded be placed on spot nodes.
	BudgetEnableSpot BudgetAction = "enable-spot"
)

// DynamicModelSelection sends new conversations to the fallback pool once the day's spend passes
// costThreshold x dailyBudget.
type DynamicModelSelection struct {
	// Enabled turns it on.
	// +optional
	Enabled bool `json:"enabled,omitempty"`
	// CostThreshold is the fraction of dailyBudget, in (0,1], past which new conversations go to
	// costConstraints.fallbackPoolRef (default 1: at the budget).
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:ExclusiveMinimum=true
	// +kubebuilder:validation:Maximum=1
	// +optional
	CostThreshold Decimal `json:"costThreshold,omitempty"`
}

// CostOptimization prefers cheaper capacity and models.
type CostOptimization struct {
	// PreferSpot makes the pool's spot-eligible pods prefer spot nodes whose price (the cost
	// package's price model) is at most spotMaxPrice; a spot node priced above the cap is not
	// preferred.
	// +optional
	PreferSpot bool `json:"preferSpot,omitempty"`
	// SpotMaxPrice is the highest $/hour of a spot node that preferSpot prefers (0 or unset: no
	// cap, every spot node is preferred).
	// +kubebuilder:validation:Minimum=0
	// +optional
	SpotMaxPrice Decimal `json:"spotMaxPrice,omitempty"`
	// DynamicModelSelection moves new conversations to the fallback pool under budget pressure.
	// +optional
	DynamicModelSelection *DynamicModelSelection `json:"dynamicModelSelection,omitempty"`
}

// CostConstraints bound the pool's spend. Spend is priced by the node price model
// (docs/autoscaling.md, "Prices"): each pod is charged its node's $/hour, the AgentClass
// costPerReplicaHour where no node price is known.
type CostConstraints struct {
	// MaxCostPerHour in $.
	// +kubebuilder:validation:Minimum=0
	// +optional
	MaxCostPerHour Decimal `json:"maxCostPerHour,omitempty"`
	// DailyBudget in $ per UTC day.
	// +kubebuilder:validation:Minimum=0
	// +optional
	DailyBudget Decimal `json:"dailyBudget,omitempty"`
	// OnBudgetExceeded actions, applied in the order given while the day's spend is at or above
	// dailyBudget; each sets its status.cost condition (and an Event) when it fires and when it
	// clears (the next UTC day, or a raised budget).
	// +kubebuilder:validation:MaxItems=8
	// +optional
	OnBudgetExceeded []BudgetAction `json:"onBudgetExceeded,omitempty"`
	// FallbackPoolRef names the AgentPool (same namespace, typically serving a smaller model) that
	// use-fallback-model and dynamicModelSelection publish in status.cost.fallback. Without it
	// those two do nothing but report condition FallbackActive=False, reason NoFallbackPool.
	// +optional
	FallbackPoolRef *LocalObjectReference `json:"fallbackPoolRef,omitempty"`
	// Optimization preferences.
	// +optional
	Optimization *CostOptimization `json:"optimization,omitempty"`
}

// InterruptionAction is what the pool does when a spot node of one of its pods gets an
// interruption notice.
// +kubebuilder:validation:Enum=migrate-to-on-demand
type InterruptionAction string

// InterruptionMigrateToOnDemand starts a replacement on on-demand capacity (a warm pod first),
// then drains the interrupted pod within the timeout.
const InterruptionMigrateToOnDemand InterruptionAction = "migrate-to-on-demand"

// InterruptionPolicy says what to do when a spot node is reclaimed.
type InterruptionPolicy struct {
	// Action on interruption.
	// +optional
	Action InterruptionAction `json:"action,omitempty"`
	// Timeout within which the interrupted pod is drained (default 30s).
	// +optional
	Timeout Duration `json:"timeout,omitempty"`
}

// DefaultMaxSpotPercent is spotStrategy.maxSpotPercent when unset, also under enable-spot.
const DefaultMaxSpotPercent int32 = 100

// SpotStrategy runs part of the pool on spot capacity. The pool's pods (serving and warm) are
// placed so that at most maxSpotPercent of them may land on spot nodes: those pods tolerate the
// spot taints and prefer spot nodes; every other pod requires a node that is not spot. Spot nodes
// are recognised by the well-known labels of Karpenter (karpenter.sh/capacity-type=spot), EKS
// (eks.amazonaws.com/capacityType=SPOT), GKE (cloud.google.com/gke-spot=true,
// cloud.google.com/gke-preemptible=true) and AKS (kubernetes.azure.com/scalesetpriority=spot).
type SpotStrategy struct {
	// Enabled turns spot placement on.
	// +optional
	Enabled bool `json:"enabled,omitempty"`
	// MaxSpotPercent of the pool's pods that may run on spot nodes, rounded down (default 100).
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	MaxSpotPercent *int32 `json:"maxSpotPercent,omitempty"`
	// OnInterruption policy.
	// +optional
	OnInterruption *InterruptionPolicy `json:"onInterruption,omitempty"`
	// InstanceTypes (node.kubernetes.io/instance-type) the spot pods are spread over: the i-th
	// spot pod prefers the type the fewest spot pods of the pool prefer, so spot replicas
	// diversify across the listed types.
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=63
	// +optional
	InstanceTypes []string `json:"instanceTypes,omitempty"`
}

// ExternalMetric is a signal from an outside source.
type ExternalMetric struct {
	// Name of the metric.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// Query in the source's language.
	// +kubebuilder:validation:MaxLength=4096
	// +optional
	Query string `json:"query,omitempty"`
	// Target value, a number.
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[0-9]+(\.[0-9]+)?$`
	Target string `json:"target"`
}

// AutoscalingSpec is the seed 001 autoscaling block.
type AutoscalingSpec struct {
	// Metrics to scale on; at most one entry per type.
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=7
	// +optional
	Metrics []MetricSpec `json:"metrics,omitempty"`
	// Strategy combines the per-metric recommendations (default max).
	// +kubebuilder:validation:Enum=max;min;average
	// +optional
	Strategy string `json:"strategy,omitempty"`
	// Behavior limits each scaling direction.
	// +optional
	Behavior *ScalingBehavior `json:"behavior,omitempty"`
	// CooldownPeriod between any two scaling operations.
	// +optional
	CooldownPeriod Duration `json:"cooldownPeriod,omitempty"`
	// Tolerance, in [0,1): metric ratios within [1-tolerance, 1+tolerance] of the target cause no
	// change (default 0.1, the HPA's).
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1
	// +kubebuilder:validation:ExclusiveMaximum=true
	// +optional
	Tolerance Decimal `json:"tolerance,omitempty"`
	// UseWarmPool makes scale-up activate warm pods before creating new ones (default true).
	// +optional
	UseWarmPool *bool `json:"useWarmPool,omitempty"`
	// ReplenishStrategy refills the warm pool after activations.
	// +optional
	ReplenishStrategy *ReplenishStrategy `json:"replenishStrategy,omitempty"`
	// Predictive scaling and schedules.
	// +optional
	Predictive *PredictiveSpec `json:"predictive,omitempty"`
	// SLOTarget scales to meet the AgentClass SLO.
	// +optional
	SLOTarget *SLOTargetSpec `json:"sloTarget,omitempty"`
	// CostConstraints bound spend.
	// +optional
	CostConstraints *CostConstraints `json:"costConstraints,omitempty"`
	// SpotStrategy uses spot capacity.
	// +optional
	SpotStrategy *SpotStrategy `json:"spotStrategy,omitempty"`
	// ExternalMetrics from outside sources.
	// +kubebuilder:validation:MaxItems=16
	// +listType=map
	// +listMapKey=name
	// +optional
	ExternalMetrics []ExternalMetric `json:"externalMetrics,omitempty"`
}
