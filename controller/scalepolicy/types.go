// Package scalepolicy is the pure, token-aware scaling decision of NeuroNetes.
//
// It has no Kubernetes client and no I/O: the controller loop (package
// controller/scaleloop) and the trace simulator (package controller/scalesim)
// feed it the same Input and apply the Decision it returns, so what is
// evaluated offline is exactly what runs in the cluster. Time is always passed
// in through Input.Now; an Autoscaler never reads the clock.
package scalepolicy

import (
	"time"
)

// MetricType names one of the seven token-aware metrics of the autoscaling guide.
type MetricType string

// The seven metric types. Values are per-replica averages except where noted.
const (
	// TokensInQueue is the number of prompt tokens waiting, per serving replica.
	TokensInQueue MetricType = "tokens-in-queue"
	// TTFTP95 is the pool-wide 95th percentile time to first token, in seconds.
	TTFTP95 MetricType = "ttft-p95"
	// ConcurrentSessions is the number of active sessions per serving replica.
	ConcurrentSessions MetricType = "concurrent-sessions"
	// TokensPerSecond is the generated token throughput per serving replica.
	TokensPerSecond MetricType = "tokens-per-second"
	// QueueDepth is the number of waiting requests per serving replica.
	QueueDepth MetricType = "queue-depth"
	// ContextLength is the pool-wide average context (input+output tokens) per request.
	ContextLength MetricType = "context-length"
	// ToolCallRate is the number of tool calls per minute per serving replica.
	ToolCallRate MetricType = "tool-call-rate"
)

// AllMetricTypes lists the seven metric types in the order of the guide.
var AllMetricTypes = []MetricType{TokensInQueue, TTFTP95, ConcurrentSessions, TokensPerSecond, QueueDepth, ContextLength, ToolCallRate}

// Strategy combines the per-metric ratios into one.
type Strategy string

// Strategies.
const (
	StrategyMax     Strategy = "max"
	StrategyMin     Strategy = "min"
	StrategyAverage Strategy = "average"
)

// SelectPolicy chooses between the percent and the absolute change limit.
type SelectPolicy string

// Select policies. SelectMin applies the most restrictive limit (both are caps,
// the guide's reading); SelectMax the most permissive (the HPA's default);
// SelectDisabled forbids changes in that direction.
const (
	SelectMin      SelectPolicy = "Min"
	SelectMax      SelectPolicy = "Max"
	SelectDisabled SelectPolicy = "Disabled"
)

// MetricSpec is one autoscaling metric with its target.
type MetricSpec struct {
	// Type is the metric type.
	Type MetricType
	// Target is the desired value (seconds for TTFTP95). Must be > 0.
	Target float64
	// AveragingWindow is how far back samples are averaged by the collector.
	AveragingWindow time.Duration
}

// ScalingRules limit changes in one direction.
type ScalingRules struct {
	// StabilizationWindow: scale-up uses the minimum and scale-down the maximum
	// recommendation seen within this window (the HPA's rule).
	StabilizationWindow time.Duration
	// MaxChangePercent caps the change within Period, in percent of the replicas at
	// the start of the period. 0 means no percent limit.
	MaxChangePercent float64
	// MaxChangeAbsolute caps the change within Period, in replicas. 0 means no
	// absolute limit.
	MaxChangeAbsolute int32
	// Period is the window over which past changes count against the limits.
	Period time.Duration
	// Select picks between the two limits; empty means SelectMin.
	Select SelectPolicy
}

// Behavior is the scale-up and scale-down behaviour.
type Behavior struct {
	// ScaleUp limits increases.
	ScaleUp ScalingRules
	// ScaleDown limits decreases.
	ScaleDown ScalingRules
}

// SLOTarget drives scaling from the AgentClass TTFT SLO.
type SLOTarget struct {
	// Enabled turns SLO-aware scaling on.
	Enabled bool
	// TTFT is the SLO (from AgentClass spec.slo.ttft). Required when Enabled.
	TTFT time.Duration
	// HeadroomPercent: the implicit ttft-p95 target is TTFT*(1-HeadroomPercent/100).
	HeadroomPercent float64
	// ScaleUpImmediately enables the breach fast path: when ttft-p95 exceeds the
	// SLO, scale-up skips stabilization, cooldown and change policies.
	ScaleUpImmediately bool
	// MaxScaleUp caps how many replicas one fast-path decision adds (0: no cap).
	MaxScaleUp int32
	// BreachOnly keeps the SLO out of the proportional metrics: no implicit
	// ttft-p95 metric is added, the SLO only drives the breach fast path and the
	// scale-down safety. Latency lags capacity, so a proportional TTFT metric
	// compounds while new replicas start; token metrics do not.
	BreachOnly bool
	// RequireHeadroomPercent: scale-down is allowed only while ttft-p95 <=
	// TTFT*(1-RequireHeadroomPercent/100)...
	RequireHeadroomPercent float64
	// CheckDuration ...continuously for at least this long.
	CheckDuration time.Duration
	// Adaptive learns the headroom and memory that hold the SLO online.
	Adaptive Adaptive
}

// Schedule is a cron-triggered replica floor.
type Schedule struct {
	// Name identifies the schedule in reasons.
	Name string
	// Cron is a standard 5-field cron expression (UTC).
	Cron string
	// Replicas becomes the minimum from the schedule's last firing until the next
	// schedule fires.
	Replicas int32
}

// Predictive configures the seasonal-plus-trend forecaster.
type Predictive struct {
	// Enabled turns prediction on.
	Enabled bool
	// LookbackWindow bounds the history kept (also the longest season used).
	LookbackWindow time.Duration
	// Horizon is how far ahead demand is forecast.
	Horizon time.Duration
	// MinConfidence in [0,1]: forecasts less confident than this are ignored.
	MinConfidence float64
	// Season is the seasonal period (default 24h); 0 or longer than the history
	// means trend only.
	Season time.Duration
	// Schedules are cron floors.
	Schedules []Schedule
}

// BudgetAction is one onBudgetExceeded action.
type BudgetAction string

// The budget actions. Decide carries out scale-to-min; the other two are
// reported in Decision.Actions and carried out by the controller (package cost
// decides their state, the AgentPool reconciler places spot pods, the gateway
// reads the fallback from the pool's status).
const (
	// ActionScaleToMin scales the pool to its minimum.
	ActionScaleToMin BudgetAction = "scale-to-min"
	// ActionUseFallbackModel routes the pool's traffic to its fallback pool.
	ActionUseFallbackModel BudgetAction = "use-fallback-model"
	// ActionEnableSpot lets the pool place pods on spot capacity.
	ActionEnableSpot BudgetAction = "enable-spot"
)

// CostConstraints caps spend. Spend comes in through Input (SpentToday,
// PricePerReplicaHour), priced by the node price model; CostPerReplicaHour, the
// AgentClass price, stands in where no node price is known.
type CostConstraints struct {
	// CostPerReplicaHour is the AgentClass cost of one replica (serving or warm).
	CostPerReplicaHour float64
	// MaxCostPerHour caps (serving+warm)*CostPerReplicaHour. 0: no cap.
	MaxCostPerHour float64
	// DailyBudget caps Input.SpentToday. 0: no cap.
	DailyBudget float64
	// OnBudgetExceeded lists the actions taken once SpentToday >= DailyBudget.
	OnBudgetExceeded []BudgetAction
}

// QueueLag is the ToolBinding autoscaleOnLag configuration.
type QueueLag struct {
	// Enabled is ToolBinding queueConfig.autoscaleOnLag.
	Enabled bool
	// MaxLagThreshold: above this many pending messages the lag formula adds replicas.
	MaxLagThreshold int64
	// PrefetchCount is how many messages one replica holds at once.
	PrefetchCount int64
	// TargetThroughput is the seed's target_throughput (messages per replica per
	// evaluation); default 1.
	TargetThroughput float64
}

// Policy is the whole autoscaling configuration of one pool.
type Policy struct {
	// MinReplicas and MaxReplicas bound serving replicas.
	MinReplicas, MaxReplicas int32
	// Metrics are the scaling metrics.
	Metrics []MetricSpec
	// Strategy combines the metric ratios; empty means max.
	Strategy Strategy
	// Tolerance: ratios within [1-Tolerance, 1+Tolerance] cause no change (default 0.1).
	Tolerance float64
	// Behavior limits the rate of change.
	Behavior Behavior
	// CooldownPeriod is the minimum time between two scaling operations.
	CooldownPeriod time.Duration
	// SLO is the SLO-aware part.
	SLO SLOTarget
	// Predictive is the forecast and cron part.
	Predictive Predictive
	// Cost is the budget part.
	Cost CostConstraints
	// Lag is the queue-lag part (one per ToolBinding; lags are summed by the collector).
	Lag QueueLag
}

// MetricValue is one observed metric.
type MetricValue struct {
	// Value is the averaged value (per replica or pool-wide, see MetricType).
	Value float64
	// Valid is false when the metric is missing or stale.
	Valid bool
}

// Override is a manual request from the /v1/scale webhook.
type Override struct {
	// Replicas is the requested serving replica count.
	Replicas int32
	// Reason is the caller's reason.
	Reason string
}

// Input is everything one decision sees.
type Input struct {
	// Now is the decision time.
	Now time.Time
	// CurrentReplicas is the current serving replica count (spec.replicas).
	CurrentReplicas int32
	// ReadyReplicas is how many serving replicas report metrics; metrics are
	// per-ready-replica averages. 0 means CurrentReplicas.
	ReadyReplicas int32
	// WarmReplicas is how many warm replicas can be activated now.
	WarmReplicas int32
	// Metrics maps a metric type to its observation.
	Metrics map[MetricType]MetricValue
	// QueueLag is the pending message count across the pool's queue ToolBindings;
	// negative means unknown.
	QueueLag int64
	// SpentToday is the cost accumulated since UTC midnight.
	SpentToday float64
	// PricePerReplicaHour is the pool's current mean $/hour of one replica from the
	// node price model (package cost); 0: the AgentClass CostPerReplicaHour.
	PricePerReplicaHour float64
	// Override, when set, is a manual scale request.
	Override *Override
	// TTFT counts the first tokens since the previous decision against the
	// SLO; the adaptive policy learns from them.
	TTFT TTFTCounts
	// Offered is the load arriving at the pool, measured where requests
	// enter it (the gateway); the adaptive policy sizes from it when valid.
	Offered OfferedDemand
	// Capacity is what the pods reported about the requests they prefilled
	// since the previous decision; the learned capacity model
	// (Adaptive.Capacity) learns from it.
	Capacity CapacitySample
}

// OfferedDemand is the demand offered to a pool, counted at arrival rather
// than when served: a backlog that drains after a burst is served work, not
// new demand, and a server's processed-token counter cannot tell them apart.
type OfferedDemand struct {
	// Valid is false when the offered load is not measured (no gateway view,
	// or no sample in the window).
	Valid bool
	// PromptTokensPerSecond is the prompt tokens of the requests that arrived,
	// per second, counted when each request arrived.
	PromptTokensPerSecond float64
}

// Reason says which rule produced the Decision.
type Reason string

// Reasons.
const (
	ReasonMetrics         Reason = "Metrics"
	ReasonWithinTolerance Reason = "WithinTolerance"
	ReasonNoMetrics       Reason = "NoMetrics"
	ReasonSLOBreach       Reason = "SLOBreach"
	ReasonQueueLag        Reason = "QueueLag"
	ReasonSchedule        Reason = "Schedule"
	ReasonPredictive      Reason = "Predictive"
	ReasonOverride        Reason = "Override"
	ReasonStabilized      Reason = "Stabilized"
	ReasonPolicyLimit     Reason = "PolicyLimit"
	ReasonCooldown        Reason = "Cooldown"
	ReasonScaleDownUnsafe Reason = "ScaleDownUnsafe"
	ReasonMissingMetrics  Reason = "MissingMetricsHoldDown"
	ReasonBounds          Reason = "Bounds"
	ReasonBudget          Reason = "Budget"
	ReasonAdaptive        Reason = "Adaptive"
)

// Decision is the outcome of one evaluation.
type Decision struct {
	// Current is Input.CurrentReplicas.
	Current int32
	// Desired is the new serving replica count.
	Desired int32
	// Raw is the unconstrained recommendation (before stabilization and limits).
	Raw int32
	// Reason is the rule that determined Desired last.
	Reason Reason
	// Message explains the decision in words, for Events.
	Message string
	// Ratios are the per-metric current/target ratios used.
	Ratios map[MetricType]float64
	// FromWarm is how many of the added replicas should come from the warm pool.
	FromWarm int32
	// Cold is how many added replicas must be started cold.
	Cold int32
	// Actions are budget actions the controller must carry out.
	Actions []BudgetAction
}

// Changed reports whether the decision scales the pool.
func (d Decision) Changed() bool { return d.Desired != d.Current }
