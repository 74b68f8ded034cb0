package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// HeaderValuesMatch matches a request header against a set of values.
type HeaderValuesMatch struct {
	// Name of the header.
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9-]+$`
	// +kubebuilder:validation:MaxLength=128
	Name string `json:"name"`
	// Values: the header must have one of them; empty means the header must be present.
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=256
	// +optional
	Values []string `json:"values,omitempty"`
}

// PromptClassifier is a hook that labels a request's prompt (for example "code", "support").
// The gateway POSTs {"text": <prompt>} and expects {"label": "<label>"}.
type PromptClassifier struct {
	// URL of the classifier.
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^https?://`
	URL string `json:"url"`
	// Labels that take part in the rollout.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=64
	Labels []string `json:"labels"`
	// Timeout of a call (default 100ms); a request whose call fails stays on stable.
	// +optional
	Timeout Duration `json:"timeout,omitempty"`
}

// RolloutMatch decides which requests take part in a rollout; the others stay on the stable
// pool. Every set condition must hold.
type RolloutMatch struct {
	// Headers must all match.
	// +kubebuilder:validation:MaxItems=16
	// +optional
	Headers []HeaderValuesMatch `json:"headers,omitempty"`
	// Tenants lists the tenants ("namespace/name" or a name in the rollout's namespace) that take
	// part; empty means all.
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=253
	// +optional
	Tenants []string `json:"tenants,omitempty"`
	// Classifier labels the prompt; only the listed labels take part.
	// +optional
	Classifier *PromptClassifier `json:"classifier,omitempty"`
}

// RolloutStep is one rung of the release ladder.
type RolloutStep struct {
	// Weight is the percentage of new conversations assigned to the canary pool (0 to 100).
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	Weight int32 `json:"weight"`
	// Mirror is the percentage of requests served by the stable pool that are also sent to the
	// canary as shadow traffic: the copy's response is discarded and its tool calls suppressed.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	Mirror int32 `json:"mirror,omitempty"`
	// Pause is the least time spent on the step before its gate may pass (default 1m).
	// +optional
	Pause Duration `json:"pause,omitempty"`
}

// QualityGate compares quality scores posted to the gateway (POST /v1/feedback).
type QualityGate struct {
	// MinSamples per variant before the scores count (default 30).
	// +kubebuilder:validation:Minimum=1
	// +optional
	MinSamples *int32 `json:"minSamples,omitempty"`
	// MaxDecrease is how far the canary's mean score (scores are 0 to 1) may fall below the
	// stable's (default 0.05).
	// +optional
	MaxDecrease Decimal `json:"maxDecrease,omitempty"`
}

// RolloutGate is the metric gate evaluated on every step: canary against stable.
type RolloutGate struct {
	// MinSamples is the number of requests each variant needs on a step before the gate can
	// pass (default 100).
	// +kubebuilder:validation:Minimum=1
	// +optional
	MinSamples *int32 `json:"minSamples,omitempty"`
	// Significance is the one-sided test level alpha, 0 to 1 (default 0.05).
	// +optional
	Significance Decimal `json:"significance,omitempty"`
	// Interval between gate evaluations (default 15s).
	// +optional
	Interval Duration `json:"interval,omitempty"`
	// MaxTTFTRatio bounds the canary's TTFT p95 as a multiple of the stable's (default 1.2).
	// +optional
	MaxTTFTRatio Decimal `json:"maxTTFTRatio,omitempty"`
	// MaxErrorRateIncrease bounds the canary's error rate above the stable's, absolute (default
	// 0.02).
	// +optional
	MaxErrorRateIncrease Decimal `json:"maxErrorRateIncrease,omitempty"`
	// MaxSafetyBlockRateIncrease bounds the canary's share of requests with a guardrail action
	// above the stable's, absolute (default 0.02).
	// +optional
	MaxSafetyBlockRateIncrease Decimal `json:"maxSafetyBlockRateIncrease,omitempty"`
	// Quality adds the posted quality score to the gate.
	// +optional
	Quality *QualityGate `json:"quality,omitempty"`
}

// RolloutDrain configures the drain of the stable pool after a promotion.
type RolloutDrain struct {
	// Timeout is how long conversations assigned to the stable pool keep it after the promotion
	// (default 30m, the gateway's default assignment TTL); then every request goes to the canary
	// pool and the stable pool is drained.
	// +optional
	Timeout Duration `json:"timeout,omitempty"`
	// ScaleDown sets the stable pool's spec.replicas and spec.minReplicas to 0 once it is
	// drained (default true).
	// +optional
	ScaleDown *bool `json:"scaleDown,omitempty"`
}

// AgentRolloutSpec declares a rollout from a stable AgentPool to a canary AgentPool of the same
// model (the pools may differ in model version, system prompt, tools, runtime or guardrails).
//
// +kubebuilder:validation:XValidation:rule="self.stablePool.name != self.canaryPool.name",message="spec.canaryPool must differ from spec.stablePool",fieldPath=".canaryPool"
type AgentRolloutSpec struct {
	// StablePool serves everything not assigned to the canary.
	StablePool LocalObjectReference `json:"stablePool"`
	// CanaryPool is the candidate.
	CanaryPool LocalObjectReference `json:"canaryPool"`
	// Match selects the requests that take part (default all requests for the stable pool's
	// model).
	// +optional
	Match *RolloutMatch `json:"match,omitempty"`
	// Steps are taken in order; a step passes when its gate passes, and after the last one the
	// canary is promoted (all new conversations go to it).
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=20
	Steps []RolloutStep `json:"steps"`
	// Gate configures the metric gate.
	// +optional
	Gate RolloutGate `json:"gate,omitempty"`
	// Paused holds the rollout on its current step (traffic keeps its split; no gate decisions).
	// +optional
	Paused bool `json:"paused,omitempty"`
	// Drain configures the drain of the stable pool after a promotion.
	// +optional
	Drain *RolloutDrain `json:"drain,omitempty"`
}

// RolloutPhase is where a rollout stands.
// +kubebuilder:validation:Enum=Progressing;Paused;Promoted;RolledBack
type RolloutPhase string

// Rollout phases.
const (
	RolloutProgressing RolloutPhase = "Progressing"
	RolloutPaused      RolloutPhase = "Paused"
	RolloutPromoted    RolloutPhase = "Promoted"
	RolloutRolledBack  RolloutPhase = "RolledBack"
)

// VariantSamples summarizes one variant's samples on the current step.
type VariantSamples struct {
	// Requests counted (shadow copies for the canary on a mirror-only step).
	Requests int64 `json:"requests"`
	// Errors among them.
	Errors int64 `json:"errors"`
	// SafetyBlocks counts requests a guardrail blocked, redacted or flagged.
	SafetyBlocks int64 `json:"safetyBlocks"`
	// TTFTP95Seconds is the 95th percentile time to first token.
	// +optional
	TTFTP95Seconds Decimal `json:"ttftP95Seconds,omitempty"`
	// QualityCount and QualityMean summarize posted quality scores.
	// +optional
	QualityCount int64 `json:"qualityCount,omitempty"`
	// +optional
	QualityMean Decimal `json:"qualityMean,omitempty"`
}

// RolloutSamples are both variants' samples.
type RolloutSamples struct {
	Stable VariantSamples `json:"stable"`
	Canary VariantSamples `json:"canary"`
}

// GateCheck is one metric's comparison.
type GateCheck struct {
	// Metric is ttftP95, errorRate, safetyBlockRate or quality.
	Metric string `json:"metric"`
	// Stable and Canary are the compared values.
	Stable Decimal `json:"stable"`
	Canary Decimal `json:"canary"`
	// PValue of the one-sided test that the canary is worse.
	// +optional
	PValue Decimal `json:"pValue,omitempty"`
	// Verdict is Pass, Fail or Pending (too few samples).
	Verdict string `json:"verdict"`
	// Message explains the verdict.
	// +optional
	Message string `json:"message,omitempty"`
}

// GateResult is the outcome of the last gate evaluation.
type GateResult struct {
	// Time of the evaluation.
	Time metav1.Time `json:"time"`
	// Step evaluated.
	Step int32 `json:"step"`
	// Verdict is Pass, Fail or Pending.
	Verdict string `json:"verdict"`
	// Message summarizes the verdict.
	// +optional
	Message string `json:"message,omitempty"`
	// Checks holds each metric's comparison.
	// +optional
	Checks []GateCheck `json:"checks,omitempty"`
}

// AgentRolloutStatus reports the rollout.
type AgentRolloutStatus struct {
	// ObservedGeneration is the last spec generation the controller acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Run counts the starts from step 0 (1 for the first). The gateway keys each conversation's
	// variant by the run, so assignments survive pauses and edits that keep the run.
	// +optional
	Run int64 `json:"run,omitempty"`
	// Revision identifies the variants (a hash of spec.stablePool and spec.canaryPool): a new
	// revision starts a new run from step 0.
	// +optional
	Revision string `json:"revision,omitempty"`
	// SpecHash is a hash of the spec without spec.paused, as last acted on: a change with the
	// same revision keeps the run's progress (or, after a rollback, starts a new run).
	// +optional
	SpecHash string `json:"specHash,omitempty"`
	// Phase of the rollout.
	// +optional
	Phase RolloutPhase `json:"phase,omitempty"`
	// CurrentStep indexes spec.steps.
	// +optional
	CurrentStep int32 `json:"currentStep"`
	// StepID names the current step's sample window ("<generation>-<step>", the generation the
	// step was entered at); the gateway labels the step's samples with it.
	// +optional
	StepID string `json:"stepID,omitempty"`
	// StepStartTime is when the current step began.
	// +optional
	StepStartTime *metav1.Time `json:"stepStartTime,omitempty"`
	// CanaryWeight is the share of new conversations the gateway assigns to the canary now.
	// +optional
	CanaryWeight int32 `json:"canaryWeight"`
	// Mirror is the share of stable requests mirrored to the canary now.
	// +optional
	Mirror int32 `json:"mirror"`
	// Drained is true once a promoted rollout's stable pool is drained: the gateway then sends
	// every request, of every conversation, to the canary pool.
	// +optional
	Drained bool `json:"drained,omitempty"`
	// Samples on the current step.
	// +optional
	Samples *RolloutSamples `json:"samples,omitempty"`
	// LastGate is the last gate evaluation.
	// +optional
	LastGate *GateResult `json:"lastGate,omitempty"`
	// Conditions: Progressing, RolledBack, Promoted.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Condition types of an AgentRollout.
const (
	// RolloutConditionProgressing is true while steps are being taken.
	RolloutConditionProgressing = "Progressing"
	// RolloutConditionRolledBack is true after an automatic rollback.
	RolloutConditionRolledBack = "RolledBack"
	// RolloutConditionPromoted is true after the last step passed.
	RolloutConditionPromoted = "Promoted"
	// RolloutConditionDrained is true once the stable pool is drained after a promotion.
	RolloutConditionDrained = "Drained"
)

// Metric names the gateway exports per rollout and the controller's gate reads (Prometheus text
// from every gateway replica, summed). Labels: namespace, rollout, step (status.stepID), variant
// (stable|canary) and, where noted, mode (live|shadow) and outcome (ok|error).
const (
	// RolloutRequestsMetric counts requests {namespace, rollout, step, variant, mode, outcome}.
	RolloutRequestsMetric = "neuronetes_rollout_requests_total"
	// RolloutTTFTMetric is a histogram of TTFT in seconds {namespace, rollout, step, variant, mode}.
	RolloutTTFTMetric = "neuronetes_rollout_ttft_seconds"
	// RolloutSafetyMetric counts requests with a guardrail action {namespace, rollout, step, variant, mode}.
	RolloutSafetyMetric = "neuronetes_rollout_safety_blocks_total"
	// RolloutQualityMetric is a histogram of posted quality scores {namespace, rollout, step, variant}.
	RolloutQualityMetric = "neuronetes_rollout_quality_score"
)

// AgentRollout moves traffic from a stable AgentPool to a canary one step by step: shadow
// copies, a stable-hash share of conversations, a metric gate per step, automatic rollback.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=neuronetes,shortName=aro
// +kubebuilder:printcolumn:name="Stable",type=string,JSONPath=`.spec.stablePool.name`
// +kubebuilder:printcolumn:name="Canary",type=string,JSONPath=`.spec.canaryPool.name`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Step",type=integer,JSONPath=`.status.currentStep`
// +kubebuilder:printcolumn:name="Weight",type=integer,JSONPath=`.status.canaryWeight`
// +kubebuilder:printcolumn:name="Mirror",type=integer,JSONPath=`.status.mirror`
// +kubebuilder:printcolumn:name="Gate",type=string,JSONPath=`.status.lastGate.verdict`
// +kubebuilder:printcolumn:name="Canary-Reqs",type=integer,JSONPath=`.status.samples.canary.requests`,priority=1
// +kubebuilder:printcolumn:name="Stable-Reqs",type=integer,JSONPath=`.status.samples.stable.requests`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type AgentRollout struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec declares the rollout.
	Spec AgentRolloutSpec `json:"spec"`
	// Status reports it.
	// +optional
	Status AgentRolloutStatus `json:"status,omitempty"`
}

// AgentRolloutList is a list of AgentRollouts.
//
// +kubebuilder:object:root=true
type AgentRolloutList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the AgentRollouts.
	Items []AgentRollout `json:"items"`
}

func init() {
	SchemeBuilder.Register(&AgentRollout{}, &AgentRolloutList{})
}
