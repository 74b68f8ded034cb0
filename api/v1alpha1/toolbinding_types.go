package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// QueueConfig binds a pool to a message queue.
type QueueConfig struct {
	// Provider of the queue.
	// +kubebuilder:validation:Enum=nats;kafka;sqs;redis
	Provider string `json:"provider"`
	// QueueName (subject, topic or queue).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=255
	QueueName string `json:"queueName"`
	// URL of the broker; optional, the provider default otherwise.
	// +kubebuilder:validation:MaxLength=2048
	// +optional
	URL string `json:"url,omitempty"`
	// AutoscaleOnLag lets queue lag drive the pool's autoscaler.
	// +optional
	AutoscaleOnLag bool `json:"autoscaleOnLag,omitempty"`
	// MaxLagThreshold of queued messages above which the pool scales up.
	// +kubebuilder:validation:Minimum=1
	// +optional
	MaxLagThreshold *int32 `json:"maxLagThreshold,omitempty"`
	// PrefetchCount is how many messages one replica handles concurrently.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	// +optional
	PrefetchCount *int32 `json:"prefetchCount,omitempty"`
	// TargetThroughput is the seed formula's target_throughput: messages one replica is expected
	// to clear per evaluation beyond its prefetch (default 1). Must be greater than 0.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:ExclusiveMinimum=true
	// +optional
	TargetThroughput Decimal `json:"targetThroughput,omitempty"`
}

// ToolBindingSpec binds a tool or a queue to an agent pool.
//
// +kubebuilder:validation:XValidation:rule="self.type != 'queue' || has(self.queueConfig)",message="spec.queueConfig is required when spec.type is queue",fieldPath=".queueConfig"
type ToolBindingSpec struct {
	// Type of binding.
	// +kubebuilder:validation:Enum=queue;http;grpc
	Type string `json:"type"`
	// AgentPoolRef names the pool that consumes the binding; optional.
	// +optional
	AgentPoolRef *LocalObjectReference `json:"agentPoolRef,omitempty"`
	// QueueConfig for type queue.
	// +optional
	QueueConfig *QueueConfig `json:"queueConfig,omitempty"`
	// Endpoint for type http or grpc.
	// +kubebuilder:validation:MaxLength=2048
	// +optional
	Endpoint string `json:"endpoint,omitempty"`
}

// ToolBindingStatus reports the binding.
type ToolBindingStatus struct {
	// Lag is the last observed number of queued messages.
	// +optional
	Lag int64 `json:"lag,omitempty"`
	// Conditions of the binding.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ToolBinding connects an agent pool to a tool endpoint or a work queue.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=neuronetes
// +kubebuilder:printcolumn:name="Type",type=string,JSONPath=`.spec.type`
// +kubebuilder:printcolumn:name="Provider",type=string,JSONPath=`.spec.queueConfig.provider`
// +kubebuilder:printcolumn:name="Queue",type=string,JSONPath=`.spec.queueConfig.queueName`
// +kubebuilder:printcolumn:name="Lag",type=integer,JSONPath=`.status.lag`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ToolBinding struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec of the binding.
	Spec ToolBindingSpec `json:"spec"`
	// Status of the binding.
	// +optional
	Status ToolBindingStatus `json:"status,omitempty"`
}

// ToolBindingList is a list of ToolBindings.
//
// +kubebuilder:object:root=true
type ToolBindingList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the ToolBindings.
	Items []ToolBinding `json:"items"`
}

func init() {
	SchemeBuilder.Register(&ToolBinding{}, &ToolBindingList{})
}
