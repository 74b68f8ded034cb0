package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GPURequest asks for GPUs or MIG slices through a DRA ResourceClaimTemplate.
//
// +kubebuilder:validation:XValidation:rule="!(has(self.migProfile) && has(self.deviceClassName))",message="spec.gpu: set at most one of migProfile and deviceClassName"
// +kubebuilder:validation:XValidation:rule="!has(self.alignment) || !has(self.migProfile)",message="spec.gpu.alignment: applies to whole GPUs, not MIG slices (migProfile)",fieldPath=".alignment"
// +kubebuilder:validation:XValidation:rule="!has(self.alignment) || self.alignment != 'NVLinkDomain' || !has(self.deviceClassName)",message="spec.gpu.alignment: NVLinkDomain reads the attribute of the gpu.neuronetes.io driver, not that of deviceClassName's driver",fieldPath=".alignment"
// +kubebuilder:validation:XValidation:rule="!has(self.alignment) || self.alignment != 'NVLinkDomain' || !has(self.count) || self.count <= 8",message="spec.gpu.alignment: count exceeds 8, the GPUs of the largest NVLink domain",fieldPath=".alignment"
type GPURequest struct {
	// Count of devices per pod.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=16
	// +kubebuilder:default=1
	// +optional
	Count int32 `json:"count,omitempty"`

	// MIGProfile requests MIG slices of this profile (e.g. "1g.10gb", "1g.5gb+me") through
	// DeviceClass "mig-<profile>.neuronetes.io" ("+" written as "-"); empty requests whole GPUs
	// through "gpu.neuronetes.io".
	// +kubebuilder:validation:Pattern=`^[0-9]+g\.[0-9]+gb(\+[a-z]+)?$`
	// +optional
	MIGProfile string `json:"migProfile,omitempty"`

	// DeviceClassName overrides the DeviceClass the claim template uses.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	DeviceClassName string `json:"deviceClassName,omitempty"`

	// Alignment, when set, makes all Count GPUs of one pod share one domain: NUMANode (the same
	// standard attribute resource.kubernetes.io/numaNode) or NVLinkDomain (the same
	// gpu.neuronetes.io/nvlinkDomain). A device that does not publish the attribute is never
	// chosen, so an aligned pod only lands on nodes whose driver exposes it.
	// +optional
	Alignment GPUAlignment `json:"alignment,omitempty"`
}

// GPUAlignment names the domain all GPUs of one pod must share.
// +kubebuilder:validation:Enum=NUMANode;NVLinkDomain
type GPUAlignment string

const (
	// GPUAlignmentNUMANode puts a pod's GPUs on one NUMA node.
	GPUAlignmentNUMANode GPUAlignment = "NUMANode"
	// GPUAlignmentNVLinkDomain puts a pod's GPUs in one NVLink domain.
	GPUAlignmentNVLinkDomain GPUAlignment = "NVLinkDomain"
)

// SLO is the service level an agent class aims for; the autoscaler reads it.
type SLO struct {
	// TTFT is the target time to first token.
	// +optional
	TTFT Duration `json:"ttft,omitempty"`
	// TokensPerSecond is the target generation throughput per session.
	// +kubebuilder:validation:Minimum=0
	// +optional
	TokensPerSecond *int32 `json:"tokensPerSecond,omitempty"`
	// P95Latency is the target 95th percentile request latency.
	// +optional
	P95Latency Duration `json:"p95Latency,omitempty"`
	// AvailabilityPercent is the availability target, 0 to 100.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	AvailabilityPercent Decimal `json:"availabilityPercent,omitempty"`
}

// SidecarConfig tunes the injected sidecar.
type SidecarConfig struct {
	// Inject turns sidecar injection for this class on or off (default on).
	// +optional
	Inject *bool `json:"inject,omitempty"`
	// RedisAddr is the session store address (host:port) passed as NEURONETES_REDIS_ADDR.
	// +optional
	RedisAddr string `json:"redisAddr,omitempty"`
	// KeysSecretName is the Secret mounted at /etc/neuronetes/keys (encryption keys).
	// +optional
	KeysSecretName string `json:"keysSecretName,omitempty"`
}

// GangTopology names the domain a gang's pods must share.
// +kubebuilder:validation:Enum=Node;NVLinkDomain
type GangTopology string

const (
	// GangTopologyNode places every pod of a replica on one node.
	GangTopologyNode GangTopology = "Node"
	// GangTopologyNVLinkDomain places a replica's GPUs in one NVLink domain. The driver's domains
	// are within a node, so today this is one node too (docs/placement.md says what is missing).
	GangTopologyNVLinkDomain GangTopology = "NVLinkDomain"
)

// MaxNVLinkDomainGPUs is the most GPUs one NVLink domain the driver publishes holds (8, a DGX
// or HGX board); a gang on one domain may not ask for more.
const MaxNVLinkDomainGPUs = 8

// Gang makes each replica of a pool a group of Size pods placed all or nothing (a PodGroup with
// a gang policy, scheduled by the Kubernetes Workload API).
type Gang struct {
	// Size is the number of pods of one replica (as LeaderWorkerSet's size); all are bound or none.
	// +kubebuilder:validation:Minimum=2
	// +kubebuilder:validation:Maximum=64
	Size int32 `json:"size"`

	// Topology, when set, makes every pod of a replica share one domain: Node (one node) or
	// NVLinkDomain (the replica's GPUs on one NVLink domain).
	// +optional
	Topology GangTopology `json:"topology,omitempty"`
}

// AgentClassSpec describes how to run one kind of agent.
//
// +kubebuilder:validation:XValidation:rule="!has(self.gang) || !has(self.gang.topology) || self.gang.topology != 'NVLinkDomain' || self.gang.size * (has(self.gpu) && has(self.gpu.count) ? self.gpu.count : 1) <= 8",message="spec.gang.size: size × spec.gpu.count exceeds 8, the GPUs of the largest NVLink domain",fieldPath=".gang.size"
type AgentClassSpec struct {
	// ModelRef names the Model the agent serves; pods prefer nodes where it is warm.
	// +optional
	ModelRef *LocalObjectReference `json:"modelRef,omitempty"`

	// Template is the agent pod template. The first container is the agent.
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Type=object
	// +optional
	Template *corev1.PodTemplateSpec `json:"template,omitempty"`

	// GPU requests devices per pod; omit for CPU-only agents.
	// +optional
	GPU *GPURequest `json:"gpu,omitempty"`

	// Gang makes each replica a group of pods placed all or nothing; omit for one pod a replica.
	// +optional
	Gang *Gang `json:"gang,omitempty"`

	// SLO targets of the class.
	// +optional
	SLO *SLO `json:"slo,omitempty"`

	// CostPerReplicaHour in US dollars, used by cost-aware scaling.
	// +kubebuilder:validation:Minimum=0
	// +optional
	CostPerReplicaHour Decimal `json:"costPerReplicaHour,omitempty"`

	// Sidecar configures the injected sidecar.
	// +optional
	Sidecar *SidecarConfig `json:"sidecar,omitempty"`

	// AllowedRuntimeClassNames lists the RuntimeClasses an AgentSession of this class may name in
	// spec.runtimeClassName instead of the template's; empty: no override.
	// +kubebuilder:validation:MaxItems=16
	// +listType=set
	// +optional
	AllowedRuntimeClassNames []string `json:"allowedRuntimeClassNames,omitempty"`

	// Sessions configures the AgentSessions of this class: their warm pool.
	// +optional
	Sessions *SessionsConfig `json:"sessions,omitempty"`
}

// SessionsConfig configures the AgentSessions of a class (docs/sessions.md, "Warm pool").
type SessionsConfig struct {
	// WarmPoolSize is how many unclaimed session pods the controller keeps started for this
	// class, each with its own ServiceAccount; a new AgentSession claims a Ready one instead of
	// creating its pod. 0 (the default): no warm pool.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	WarmPoolSize int32 `json:"warmPoolSize,omitempty"`
	// WarmRestoreHosts is how many unclaimed restore hosts the controller keeps running for this
	// class: pods rendered as a resume's host pod (the restore host image in place of the first
	// container), each with its own ServiceAccount. A resuming AgentSession of the class claims a
	// running one, preferring the node of its last checkpoint, and the node agent restores the
	// checkpoint into it, instead of creating its host pod and waiting for it to start. 0 (the
	// default): none; every resume creates its host pod.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	WarmRestoreHosts int32 `json:"warmRestoreHosts,omitempty"`
}

// WarmPoolLabel on an unclaimed session pod names the AgentClass whose warm pool holds it; a
// claim removes it and sets SessionLabel.
const WarmPoolLabel = "neuronetes.io/session-warm-pool"

// WarmRestoreHostLabel ("true") on a warm session pod marks it as a restore host
// (SessionsConfig.WarmRestoreHosts), which only a resume claims; a claim removes it.
const WarmRestoreHostLabel = "neuronetes.io/session-warm-restore-host"

// WarmPoolTemplateHashLabel on a warm session pod is the hash of the class's template it was
// rendered from; a pod of another hash is retired.
const WarmPoolTemplateHashLabel = "neuronetes.io/session-template-hash"

// AgentClassStatus reports the class's derived objects.
type AgentClassStatus struct {
	// ResourceClaimTemplateName is the claim template the controller keeps for the GPU request.
	// +optional
	ResourceClaimTemplateName string `json:"resourceClaimTemplateName,omitempty"`
	// Conditions of the class.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// AgentClass is the template and contract of one kind of agent.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=neuronetes
// +kubebuilder:printcolumn:name="Model",type=string,JSONPath=`.spec.modelRef.name`
// +kubebuilder:printcolumn:name="GPUs",type=integer,JSONPath=`.spec.gpu.count`
// +kubebuilder:printcolumn:name="MIG",type=string,JSONPath=`.spec.gpu.migProfile`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type AgentClass struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec describes the agent.
	Spec AgentClassSpec `json:"spec"`
	// Status reports derived objects.
	// +optional
	Status AgentClassStatus `json:"status,omitempty"`
}

// AgentClassList is a list of AgentClasses.
//
// +kubebuilder:object:root=true
type AgentClassList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the AgentClasses.
	Items []AgentClass `json:"items"`
}

func init() {
	SchemeBuilder.Register(&AgentClass{}, &AgentClassList{})
}
