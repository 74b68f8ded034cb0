package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ModelSource says where a model's weights come from.
type ModelSource struct {
	// URI of the weights: file:///path, http(s)://host/path or s3://bucket/key.
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="self.matches('^(file:///|https?://[^/]+/|s3://[^/]+/).+')",message="spec.source.uri must be file:///path, http(s)://host/path or s3://bucket/key"
	URI string `json:"uri"`

	// SecretRef names a Secret with credentials for the source (keys accessKeyID/secretAccessKey
	// for s3, token for http); optional.
	// +optional
	SecretRef *LocalObjectReference `json:"secretRef,omitempty"`
}

// ModelSpec declares a model's weights.
type ModelSpec struct {
	// Source of the weights.
	Source ModelSource `json:"source"`

	// Digest of the weights, "sha256:<64 lower-case hex>". The node agent verifies it and labels
	// warm nodes with WarmNodeLabel(digest).
	// +kubebuilder:validation:Pattern=`^sha256:[a-f0-9]{64}$`
	Digest string `json:"digest"`

	// Format of the weights file.
	// +kubebuilder:validation:Enum=safetensors;gguf;pytorch;onnx;tensorrt;raw
	// +kubebuilder:default=safetensors
	// +optional
	Format string `json:"format,omitempty"`

	// SizeBytes is the size of the weights in bytes, if known.
	// +kubebuilder:validation:Minimum=0
	// +optional
	SizeBytes int64 `json:"sizeBytes,omitempty"`

	// MountPath is where agent pods see the weights.
	// +kubebuilder:validation:Pattern=`^/.*`
	// +kubebuilder:default=/models
	// +optional
	MountPath string `json:"mountPath,omitempty"`
}

// ModelCachePhase is the state of a model's weights on one node.
// +kubebuilder:validation:Enum=Pending;Downloading;Verifying;Ready;Failed
type ModelCachePhase string

// Model cache phases, in their usual order.
const (
	ModelCachePending     ModelCachePhase = "Pending"
	ModelCacheDownloading ModelCachePhase = "Downloading"
	ModelCacheVerifying   ModelCachePhase = "Verifying"
	ModelCacheReady       ModelCachePhase = "Ready"
	ModelCacheFailed      ModelCachePhase = "Failed"
)

// ModelNodeStatus is the cache progress of a model on one node, written by that node's agent.
type ModelNodeStatus struct {
	// NodeName is the node this entry describes.
	NodeName string `json:"nodeName"`
	// Phase of the weights on the node.
	Phase ModelCachePhase `json:"phase"`
	// BytesCached so far.
	// +optional
	BytesCached int64 `json:"bytesCached,omitempty"`
	// Message explains a failure.
	// +optional
	Message string `json:"message,omitempty"`
	// LastUpdateTime of this entry.
	// +optional
	LastUpdateTime *metav1.Time `json:"lastUpdateTime,omitempty"`
}

// ModelStatus reports where a model is cached.
type ModelStatus struct {
	// Nodes holds one entry per node that caches or fetches the model.
	// +listType=map
	// +listMapKey=nodeName
	// +optional
	Nodes []ModelNodeStatus `json:"nodes,omitempty"`
	// ReadyNodes counts nodes whose phase is Ready.
	// +optional
	ReadyNodes int32 `json:"readyNodes,omitempty"`
	// Conditions of the model.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Model is a set of LLM weights identified by digest.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=neuronetes
// +kubebuilder:printcolumn:name="Format",type=string,JSONPath=`.spec.format`
// +kubebuilder:printcolumn:name="Size",type=integer,JSONPath=`.spec.sizeBytes`
// +kubebuilder:printcolumn:name="Ready-Nodes",type=integer,JSONPath=`.status.readyNodes`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Model struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec declares the weights.
	Spec ModelSpec `json:"spec"`
	// Status reports per-node cache progress.
	// +optional
	Status ModelStatus `json:"status,omitempty"`
}

// ModelList is a list of Models.
//
// +kubebuilder:object:root=true
type ModelList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the Models.
	Items []Model `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Model{}, &ModelList{})
}
