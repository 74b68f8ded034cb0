package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AgentPoolSpec is the seed 001 pool spec. The reconciler keeps Replicas serving pods and
// prewarmPercent% of MaxReplicas warm pods.
//
// +kubebuilder:validation:XValidation:rule="!has(self.minReplicas) || !has(self.maxReplicas) || self.minReplicas <= self.maxReplicas",message="spec.minReplicas must be less than or equal to spec.maxReplicas",fieldPath=".minReplicas"
// +kubebuilder:validation:XValidation:rule="!has(self.replicas) || !has(self.maxReplicas) || self.replicas <= self.maxReplicas",message="spec.replicas must be less than or equal to spec.maxReplicas",fieldPath=".replicas"
// +kubebuilder:validation:XValidation:rule="!has(self.sessions) || !has(self.autoscaling)",message="spec.sessions and spec.autoscaling exclude each other: a pool through sessions holds a pod per running conversation, not replicas an autoscaler sizes",fieldPath=".sessions"
type AgentPoolSpec struct {
	// AgentClassRef names the AgentClass whose template the pods use. When omitted, the AgentClass
	// with the pool's own name is used.
	// +optional
	AgentClassRef *LocalObjectReference `json:"agentClassRef,omitempty"`

	// Replicas is the number of serving pods, written through the scale subresource. In a pool
	// with spec.autoscaling the autoscaler owns it (as the HPA owns a Deployment's replicas): a
	// value written by anyone else is re-decided at once and replaced by the autoscaler's decision
	// (Event ManualScaleOverridden); set minReplicas for a floor or POST /v1/scale for a temporary
	// value. When unset, MinReplicas is used. The reconciler clamps it to [MinReplicas, MaxReplicas].
	// +kubebuilder:validation:Minimum=0
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`

	// MinReplicas is the lower bound of serving pods (default 1).
	// +kubebuilder:validation:Minimum=0
	// +optional
	MinReplicas *int32 `json:"minReplicas,omitempty"`

	// MaxReplicas is the upper bound of serving pods (default 10, or minReplicas when higher; the
	// reconciler and the autoscaler use the same default).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	// +optional
	MaxReplicas *int32 `json:"maxReplicas,omitempty"`

	// PrewarmPercent of MaxReplicas is kept as warm pods: started and Ready, outside the Service.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	PrewarmPercent *int32 `json:"prewarmPercent,omitempty"`

	// DrainGracePeriodSeconds is the termination grace period of pods removed by scale-down, so that
	// open streams can finish (default: the template's, else 30).
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=3600
	// +optional
	DrainGracePeriodSeconds *int64 `json:"drainGracePeriodSeconds,omitempty"`

	// Autoscaling configures the autoscaler and the warm pool's use.
	// +optional
	Autoscaling *AutoscalingSpec `json:"autoscaling,omitempty"`

	// Sessions, when set, serves each conversation of the pool (the gateway's tenant-scoped
	// session key) by an AgentSession of the pool's class, created by the gateway on the
	// conversation's first request and suspended after IdleTimeout; the pool itself then keeps
	// no pods (docs/sessions.md, "An AgentPool through sessions"). Excludes spec.autoscaling.
	// +optional
	Sessions *PoolSessionsSpec `json:"sessions,omitempty"`
}

// PoolSessionsSpec is what the AgentSessions of a pool through sessions get.
type PoolSessionsSpec struct {
	// IdleTimeout is each session's spec.idleTimeout: it is suspended after this long without
	// a request.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s')",message="spec.sessions.idleTimeout must be at least 1s"
	IdleTimeout metav1.Duration `json:"idleTimeout"`

	// WorkspaceSizeLimit is each session's spec.workspaceSizeLimit (default: the session's
	// default, 1Gi).
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).isGreaterThan(quantity('0'))",message="spec.sessions.workspaceSizeLimit must be positive"
	// +optional
	WorkspaceSizeLimit *resource.Quantity `json:"workspaceSizeLimit,omitempty"`

	// Retention, when set, deletes a session of the pool that has stayed Suspended this long
	// since its last activity (with its pods, ServiceAccount and AgentCheckpoints, as any deleted
	// session): the conversation's next request starts a new session. Unset: suspended sessions
	// are kept until deleted.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s')",message="spec.sessions.retention must be at least 1s"
	// +optional
	Retention *metav1.Duration `json:"retention,omitempty"`
}

// AgentPoolStatus is observed state plus the autoscaler's last decision.
type AgentPoolStatus struct {
	// ObservedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Replicas counts serving pods (the scale subresource's status replicas).
	// +optional
	Replicas int32 `json:"replicas,omitempty"`
	// ReadyReplicas counts serving pods that are Ready.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`
	// WarmReplicas counts warm pods that are Ready.
	// +optional
	WarmReplicas int32 `json:"warmReplicas,omitempty"`
	// WarmTarget is the number of warm pods the reconciler aims for.
	// +optional
	WarmTarget int32 `json:"warmTarget,omitempty"`
	// DesiredReplicas is the serving count the reconciler drives the pool to now: spec.replicas
	// (the autoscaler's decision in an autoscaled pool) clamped to [minReplicas, maxReplicas].
	// +optional
	DesiredReplicas int32 `json:"desiredReplicas,omitempty"`
	// Selector is the label selector of serving pods, for the scale subresource.
	// +optional
	Selector string `json:"selector,omitempty"`
	// LastScaleTime is when the serving count last changed.
	// +optional
	LastScaleTime *metav1.Time `json:"lastScaleTime,omitempty"`
	// LastActivationTime is when warm pods were last turned into serving ones; the warm pool is
	// replenished replenishStrategy.delay after it.
	// +optional
	LastActivationTime *metav1.Time `json:"lastActivationTime,omitempty"`
	// WarmActivations counts warm pods turned into serving ones over the pool's life.
	// +optional
	WarmActivations int64 `json:"warmActivations,omitempty"`
	// Cost is the spend and the budget decisions of an autoscaled pool with costConstraints,
	// written by the autoscaler.
	// +optional
	Cost *CostStatus `json:"cost,omitempty"`
	// Conditions: Ready, Scaling, WarmPoolReady.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Defaults of the replica bounds, shared by the reconciler and the autoscaler.
const (
	// DefaultMinReplicas is minReplicas when unset.
	DefaultMinReplicas int32 = 1
	// DefaultMaxReplicas is maxReplicas when unset (raised to minReplicas when that is higher).
	DefaultMaxReplicas int32 = 10
)

// ReplicaBounds returns the pool's serving bounds with defaults applied. Invariant:
// 0 <= lo <= hi and hi >= 1.
func (s *AgentPoolSpec) ReplicaBounds() (lo, hi int32) {
	lo = DefaultMinReplicas
	if s.MinReplicas != nil {
		lo = max(*s.MinReplicas, 0)
	}
	hi = max(lo, DefaultMaxReplicas)
	if s.MaxReplicas != nil {
		hi = max(*s.MaxReplicas, lo, 1)
	}
	return lo, hi
}

// Condition types of an AgentPool.
const (
	// AgentPoolReady is true when the ready serving pods reach spec.replicas.
	AgentPoolReady = "Ready"
	// AgentPoolScaling is true while the serving count differs from spec.replicas.
	AgentPoolScaling = "Scaling"
	// AgentPoolWarmPoolReady is true when the ready warm pods reach the warm target.
	AgentPoolWarmPoolReady = "WarmPoolReady"
)

// AgentPool is a set of agent pods of one AgentClass with a warm pool and autoscaling.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:subresource:scale:specpath=.spec.replicas,statuspath=.status.replicas,selectorpath=.status.selector
// +kubebuilder:resource:categories=neuronetes,shortName=ap
// +kubebuilder:printcolumn:name="Class",type=string,JSONPath=`.spec.agentClassRef.name`
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=`.spec.replicas`
// +kubebuilder:printcolumn:name="Serving",type=integer,JSONPath=`.status.replicas`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyReplicas`
// +kubebuilder:printcolumn:name="Warm",type=integer,JSONPath=`.status.warmReplicas`
// +kubebuilder:printcolumn:name="Activations",type=integer,JSONPath=`.status.warmActivations`
// +kubebuilder:printcolumn:name="Min",type=integer,JSONPath=`.spec.minReplicas`,priority=1
// +kubebuilder:printcolumn:name="Max",type=integer,JSONPath=`.spec.maxReplicas`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type AgentPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec declares the pool.
	Spec AgentPoolSpec `json:"spec,omitempty"`
	// Status reports the pool.
	// +optional
	Status AgentPoolStatus `json:"status,omitempty"`
}

// AgentPoolList is a list of AgentPools.
//
// +kubebuilder:object:root=true
type AgentPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the AgentPools.
	Items []AgentPool `json:"items"`
}

func init() {
	SchemeBuilder.Register(&AgentPool{}, &AgentPoolList{})
}
